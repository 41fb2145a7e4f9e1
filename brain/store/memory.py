"""``MemoryStore``: the store interface on plain dicts, for tests (``brain.testing``).

Same behaviour as :class:`brain.store.Store` where the runner can tell, at a
fraction of the cost: no SQL, no driver thread. The store tests run against
both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from brain._clock import utcnow
from brain.results import (
    FINISHED_RUN,
    LogBatch,
    LogLine,
    RunResult,
    RunStatus,
    StepStatus,
    TriggerData,
    clean_text,
)
from brain.store.base import QueuedRun, RunRecord, StepProcess
from brain.store.memory_queue import MemoryQueue
from brain.store.memory_state import MemoryStep, as_json, as_stored, run_result
from brain.store.memory_waits import MemoryWaits

__all__ = ["MemoryStore"]


class MemoryStore(MemoryWaits, MemoryQueue):
    """A private store that lives as long as the object (see :class:`RunStore`); every
    method of :class:`brain.store.Store` behaves the same here.

    Unlike the SQL stores, it answers after :meth:`close` (a test may read a run
    after it ended).
    """

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` has run."""
        return self._open

    @property
    def shown_url(self) -> str:
        """A name for messages."""
        return "memory://"

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._runs)} runs)"

    async def open(self) -> MemoryStore:
        """Nothing to connect to."""
        self._open = True
        return self

    async def close(self) -> None:
        """Keeps the data: a test may read it after the run."""
        self._open = False

    async def __aenter__(self) -> MemoryStore:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- writing -------------------------------------------------------------

    async def create_run(self, *, run_id: str, workflow: str, definition_hash: str,
                         trigger: TriggerData, step_rows: Sequence[tuple[str, str]],
                         owner: str | None = None, lease_seconds: float = 30,
                         previous_run_id: str | None = None) -> datetime:
        """Record a run (``running`` under ``owner``'s lease, else ``queued``)."""
        now = utcnow()
        leased: dict[str, Any] = {} if owner is None else {
            "status": RunStatus.RUNNING.value, "started_at": now, "lease_owner": owner,
            "lease_expires_at": now + timedelta(seconds=lease_seconds)}
        self._keep(self._new_run(run_id, workflow, definition_hash, trigger, step_rows,
                                 previous_run_id=previous_run_id, created_at=now, **leased))
        return now

    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        """Take a queued run, or a running one whose lease expired."""
        run = self._runs.get(run_id)
        if run is None:
            return False
        r, now = run.record, utcnow()
        expired = r.status == RunStatus.RUNNING.value and (
            r.lease_expires_at is None or r.lease_expires_at < now)
        if r.status != RunStatus.QUEUED.value and not expired:
            return False
        self._set(run, status=RunStatus.RUNNING.value, lease_owner=owner,
                  lease_expires_at=now + timedelta(seconds=lease_seconds),
                  started_at=r.started_at or now)
        return True

    async def set_previous_run(self, run_id: str, previous_run_id: str | None, *,
                               owner: str | None = None) -> None:
        """Record which run ``{previous.X}`` reads from."""
        self._set(self._leased(run_id, owner), previous_run_id=previous_run_id)

    async def heartbeat(self, run_id: str, owner: str,
                        lease_seconds: float | None) -> tuple[bool, bool]:
        """Renew the lease; return (still ours, cancel requested)."""
        run = self._runs.get(run_id)
        if run is None:
            return False, True
        if lease_seconds is not None and run.record.lease_owner == owner:
            self._set(run, lease_expires_at=utcnow() + timedelta(seconds=lease_seconds))
        return run.record.lease_owner == owner, run.record.cancel_requested

    async def step_running(self, run_id: str, name: str, *, inputs: dict[str, Any],
                           tries: int, started_at: datetime, owner: str | None = None) -> None:
        """Mark a step ``running``."""
        step = self._leased(run_id, owner).steps[name]
        step.status, step.inputs, step.tries = StepStatus.RUNNING.value, as_json(inputs), tries
        step.started_at, step.ended_at, step.error = as_stored(started_at), None, None

    async def step_finished(self, run_id: str, name: str, *, status: StepStatus, tries: int,
                            ended_at: datetime, output: str | None = None,
                            error: str | None = None, stderr: str | None = None,
                            inputs: dict[str, Any] | None = None,
                            started_at: datetime | None = None, owner: str | None = None,
                            usage: dict[str, int] | None = None) -> None:
        """Record a step's end."""
        step = self._leased(run_id, owner).steps[name]
        step.status, step.tries, step.ended_at = status.value, tries, as_stored(ended_at)
        step.output, step.error, step.stderr = clean_text(output), clean_text(error), clean_text(stderr)
        step.usage = None if usage is None else dict(usage)
        if inputs is not None:
            step.inputs = as_json(inputs)
        if started_at is not None:
            step.started_at = as_stored(started_at)

    async def step_output(self, run_id: str, name: str, *, output: str | None,
                          stderr: str | None, owner: str | None = None,
                          usage: dict[str, int] | None = None) -> None:
        """Keep what a step printed (and, an LLM step, the tokens it spent) before it was cut
        off (its status is written after)."""
        step = self._leased(run_id, owner).steps[name]
        step.output, step.stderr = clean_text(output), clean_text(stderr)
        step.usage = None if usage is None else dict(usage)

    async def append_log(self, run_id: str, step: str, batch: LogBatch, *,
                         owner: str | None = None) -> None:
        """Add to a step's stored log."""
        if not batch:
            return
        lines = self._leased(run_id, owner).logs.setdefault(step, {})
        now = utcnow()
        if batch.drop is not None:
            for seq in [s for s in lines if batch.drop[0] <= s <= batch.drop[1]]:
                del lines[seq]
        for line in (*batch.lines, *([batch.note] if batch.note is not None else [])):
            lines[line.seq] = (LogLine(line.seq, line.stream, line.t,
                                       clean_text(line.text) or ""), now)
        if batch.progress is not None:
            self._leased(run_id, owner).steps[step].progress = dict(batch.progress)

    async def append_logs(self, run_id: str, batches: Sequence[tuple[str, LogBatch]], *,
                          owner: str | None = None) -> None:
        """Store several steps' batches at once."""
        self._leased(run_id, owner)
        for step, batch in batches:
            await self.append_log(run_id, step, batch, owner=owner)

    async def read_log(self, run_id: str, step: str, *, after: int = 0,
                       limit: int = 20_000) -> list[LogLine]:
        """The stored lines of ``step`` whose ``seq`` is greater than ``after``, in order."""
        run = self._runs.get(run_id)  # a run that is gone has no lines, as in SQL
        lines = run.logs.get(step, {}) if run is not None else {}
        return [lines[seq][0] for seq in sorted(lines) if seq > after][:limit]

    async def run_logs(self, run_id: str) -> dict[str, list[LogLine]]:
        """Every stored line of the run, by step."""
        logs = self._run(run_id).logs
        return {step: [logs[step][seq][0] for seq in sorted(logs[step])]
                for step in sorted(logs) if logs[step]}

    async def recent_logs(self, since: datetime, limit: int = 20_000
                          ) -> list[tuple[str, str, str, LogLine]]:
        """``(run id, workflow, step, line)`` of the lines stored at ``since`` or later."""
        found = [(when, run.record.id, run.record.workflow, step, line)
                 for run in self._runs.values() for step, lines in run.logs.items()
                 for line, when in lines.values() if when >= since]
        found.sort(key=lambda f: (f[0], f[1], f[3], f[4].seq))
        return [f[1:] for f in found[:limit]]

    async def step_process(self, run_id: str, process: StepProcess, *,
                           owner: str | None = None) -> None:
        """Record the process group a step's try has started, in place of an earlier one's."""
        self._leased(run_id, owner).steps[process.step].process = process

    async def steps_ended(self, run_id: str, names: Iterable[str], status: StepStatus,
                          error: str | None = None, *, owner: str | None = None) -> None:
        """Mark several steps ``skipped``, ``cancelled`` or ``failed``."""
        run, now = self._leased(run_id, owner), utcnow()
        for name in names:
            step = run.steps[name]
            step.status, step.ended_at, step.error = status.value, now, clean_text(error)

    async def add_steps(self, run_id: str, rows: Sequence[tuple[str, str, int]], *,
                        owner: str | None = None) -> None:
        """Add pending steps ``(name, kind, position)`` a run does not have yet."""
        run = self._leased(run_id, owner)
        for name, kind, position in rows:
            run.steps.setdefault(name, MemoryStep(name, kind, position))

    async def end_unfinished_steps(self, run_id: str, *, pending: StepStatus,
                                   error: str | None = None, owner: str | None = None) -> None:
        """End every step still ``running`` (``cancelled``) or ``pending`` (``pending``)."""
        run, now = self._leased(run_id, owner), utcnow()
        error = clean_text(error)
        for step in run.steps.values():
            if step.status in (StepStatus.RUNNING.value, StepStatus.WAITING.value):
                step.status, step.ended_at, step.error = StepStatus.CANCELLED.value, now, error
            elif step.status == StepStatus.PENDING.value:
                step.status, step.ended_at = pending.value, now
                step.error = error if pending is not StepStatus.SKIPPED else None

    async def reset_steps(self, run_id: str, names: Iterable[str], *,
                          owner: str | None = None) -> None:
        """Put unfinished steps back to ``pending``."""
        run = self._leased(run_id, owner)
        for name in names:
            step = run.steps[name]
            step.status, step.ended_at, step.output, step.error = StepStatus.PENDING.value, None, None, None
            step.usage = step.progress = None

    async def restamp_run(self, run_id: str, definition_hash: str,
                          step_rows: Sequence[tuple[str, str]], *, owner: str) -> bool:
        """Give a queued run just taken another definition: its hash and pending steps
        (``False``, nothing changed, if a step of it has started)."""
        run = self._leased(run_id, owner)
        if any(s.status != StepStatus.PENDING.value or s.tries for s in run.steps.values()):
            return False
        self._set(run, definition_hash=definition_hash)
        run.steps = {name: MemoryStep(name, kind, i) for i, (name, kind) in enumerate(step_rows)}
        return True

    async def finish_run(self, run_id: str, status: RunStatus, error: str | None = None, *,
                         owner: str | None = None,
                         then_queue: Sequence[QueuedRun] = ()) -> datetime:
        """Record the run's end and release its lease; queue ``then_queue`` with it (all or
        nothing: a handler's run id that exists already changes nothing)."""
        now = utcnow()
        run = self._leased(run_id, owner)
        self._keep(*self._handlers(then_queue))
        self._set(run, status=status.value, error=clean_text(error), ended_at=now,
                  lease_owner=None, lease_expires_at=None)
        return now

    async def request_cancel(self, run_id: str) -> tuple[RunResult, bool]:
        """Ask a run to stop; a run nobody executes (queued, or running under an expired
        lease or a dead local owner) is cancelled at once, as in :meth:`Store.request_cancel`."""
        from brain._owners import local_owner_gone

        run = self._run(await self.resolve_id(run_id))
        if run.record.status in FINISHED_RUN:
            return run_result(run, with_steps=False), False
        self._set(run, cancel_requested=True)
        now = utcnow()
        r = run.record
        abandoned = r.status == RunStatus.RUNNING.value and (
            r.lease_expires_at is None or r.lease_expires_at < now
            or local_owner_gone(r.lease_owner))
        if r.status in (RunStatus.QUEUED.value, RunStatus.WAITING.value) or abandoned:
            self._set(run, status=RunStatus.CANCELLED.value, error="cancelled", ended_at=now,
                      lease_owner=None, lease_expires_at=None)
            self._drop_timers({run.record.id})
            for step in run.steps.values():
                if step.status in (StepStatus.PENDING.value, StepStatus.RUNNING.value,
                                   StepStatus.WAITING.value):
                    step.status, step.ended_at = StepStatus.CANCELLED.value, now
                    step.error = "cancelled"
        return run_result(run, with_steps=False), True

    async def prune(self, finished_before: datetime) -> int:
        """Delete finished runs that ended before ``finished_before``, fire records claimed
        before it (each trigger's latest is kept) and workers silent since; how many runs."""
        old = [rid for rid, run in self._runs.items()
               if run.record.status in FINISHED_RUN and run.record.ended_at is not None
               and run.record.ended_at < finished_before]
        for rid in old:
            del self._runs[rid]
        self._drop_timers(set(old))
        self._prune_fires_and_workers(finished_before)
        return len(old)

    # --- reading -------------------------------------------------------------

    async def resolve_id(self, run_id: str) -> str:
        """The full id of the one run whose id is or starts with ``run_id``."""
        return self._resolve(run_id)

    async def get_run(self, run_id: str, *, with_steps: bool = True) -> RunResult:
        """One run by id or unique prefix, with its steps in call order."""
        return run_result(self._run(await self.resolve_id(run_id)), with_steps=with_steps)

    async def list_runs(self, *, workflow: str | None = None, status: str | None = None,
                        limit: int = 20, event: str | None = None,
                        offset: int = 0) -> list[RunResult]:
        """The newest runs first, without their steps."""
        runs = [r for r in self._runs.values()
                if (not workflow or r.record.workflow == workflow)
                and (not status or r.record.status == status)
                and (not event or r.record.trigger.event == event)]
        runs.sort(key=lambda r: r.record.created_at, reverse=True)
        return [run_result(r, with_steps=False) for r in runs[offset:offset + limit]]

    async def run_row(self, run_id: str) -> RunRecord | None:
        """The run's own record."""
        run = self._runs.get(run_id)
        return None if run is None else run.record

    async def latest_succeeded_run(self, workflow: str, before: datetime) -> str | None:
        """The latest succeeded run of ``workflow`` that ended by ``before``."""
        done = [r.record for r in self._runs.values()
                if r.record.workflow == workflow and r.record.status == RunStatus.SUCCEEDED.value
                and r.record.ended_at is not None and r.record.ended_at <= before]
        return max(done, key=lambda r: r.ended_at or before).id if done else None

    async def step_outputs(self, run_id: str) -> dict[str, str]:
        """``{step name: output}`` of a run's succeeded steps."""
        run = self._runs.get(run_id)
        if run is None:
            return {}
        return {s.name: s.output or "" for s in run.steps.values()
                if s.status == StepStatus.SUCCEEDED.value}

    async def step_states(self, run_id: str) -> dict[str, tuple[str, int]]:
        """``{step name: (status, tries)}``."""
        run = self._runs.get(run_id)
        return {} if run is None else {s.name: (s.status, s.tries) for s in run.steps.values()}

    async def step_processes(self, run_id: str) -> list[StepProcess]:
        """The process groups a run's steps started (the latest try's of each step)."""
        run = self._runs.get(run_id)
        return [] if run is None else [s.process for s in run.steps.values()
                                       if s.process is not None]

    async def expired_runs(self) -> list[str]:
        """Running runs whose lease expired."""
        now = utcnow()
        return [rid for rid, r in self._runs.items()
                if r.record.status == RunStatus.RUNNING.value
                and r.record.lease_expires_at is not None and r.record.lease_expires_at < now]

