"""The memory store's queue, schedule fires, retries, workers and activity: the methods of
:class:`brain.store.Store` beyond the :class:`~brain.store.base.RunStore` protocol, so code
under test with ``brain_db`` can use them as it would use a real store."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from brain._clock import utcnow
from brain._errors import WORKFLOW_CHANGED, RunConflict, StoreError
from brain.results import (
    FINISHED_RUN,
    RunResult,
    RunStatus,
    StepState,
    StepStatus,
    TriggerData,
    clean_text,
)
from brain.store.backend import utc
from brain.store.base import QueuedRun
from brain.store.memory_state import MemoryRun, MemoryState, MemoryStep, run_result
from brain.store.queue import QueueFull

_ACTIVE = (RunStatus.QUEUED.value, RunStatus.RUNNING.value)


class MemoryQueue(MemoryState):
    """The queue's reads and writes on the memory store's dicts."""

    #: (when counted, count), as :class:`brain.store.queue.RunQueue` keeps it.
    _queued_cache: tuple[float, int] | None = None

    @property
    def notifies(self) -> bool:
        """A memory store is one process's: nothing queued elsewhere to hear of."""
        return False

    async def watch_queued(self, on_queued: Callable[[], None]) -> None:
        """Nothing to watch (see :meth:`brain.store.queue.RunQueue.watch_queued`)."""

    async def enqueue_run(self, *, run_id: str, workflow: str, definition_hash: str,
                          trigger: TriggerData, step_rows: Sequence[tuple[str, str]],
                          trigger_key: str | None = None, delivery_id: str | None = None,
                          fire_time: datetime | None = None,
                          max_queued: int | None = None,
                          concurrency_key: str | None = None) -> tuple[str | None, bool]:
        """Queue a run (and claim its schedule fire); see :meth:`brain.store.Store.enqueue_run`."""
        if max_queued is not None and await self._queued_estimate() >= max_queued:
            raise QueueFull(f"{max_queued} runs are already queued")
        if delivery_id is not None:
            for run in self._runs.values():
                if run.record.workflow == workflow and run.delivery_id == delivery_id:
                    return run.record.id, False
        fire = None if fire_time is None else (workflow, trigger_key or "", utc(fire_time))
        if fire is not None and fire in self._fires:
            return None, False
        run = self._new_run(run_id, workflow, definition_hash, trigger, step_rows,
                            concurrency_key=concurrency_key)
        run.trigger_key, run.delivery_id = trigger_key, delivery_id
        try:
            self._keep(run)
        except StoreError:
            if fire is not None:  # as in the SQL stores: any conflict fails the claim
                return None, False
            raise
        if fire is not None:
            self._fires[fire] = run_id
        return run_id, True

    async def enqueue_runs(self, runs: Sequence[QueuedRun], *, trigger_key: str | None = None,
                           max_queued: int | None = None) -> list[str]:
        """Queue several runs, all or none; see :meth:`brain.store.Store.enqueue_runs`."""
        if not runs:
            return []
        if max_queued is not None and await self._queued_estimate(0) + len(runs) > max_queued:
            raise QueueFull(f"{len(runs)} more runs would take the queue over {max_queued}")
        made = self._handlers(runs)
        for run in made:
            run.trigger_key = trigger_key
        self._keep(*made)
        if self._queued_cache is not None:
            self._queued_cache = (self._queued_cache[0], self._queued_cache[1] + len(runs))
        return [q.run_id for q in runs]

    async def claim_fire(self, workflow: str, trigger_key: str, fire_time: datetime) -> bool:
        """Claim a fire without a run; ``False`` if it was claimed before."""
        fire = (workflow, trigger_key, utc(fire_time))
        if fire in self._fires:
            return False
        self._fires[fire] = None
        return True

    async def last_fire(self, workflow: str, trigger_key: str) -> datetime | None:
        """The latest claimed fire time of a schedule, if any."""
        times = [t for w, k, t in self._fires if (w, k) == (workflow, trigger_key)]
        return max(times) if times else None

    async def _queued_estimate(self, adding: int = 1) -> int:
        now = time.monotonic()
        cached = self._queued_cache
        if cached is not None and now - cached[0] < 0.2:
            self._queued_cache = (cached[0], cached[1] + adding)
            return int(cached[1])
        count = await self.count_queued()
        self._queued_cache = (now, count + adding)
        return count

    async def count_queued(self) -> int:
        """How many runs wait in the queue."""
        return sum(r.record.status == RunStatus.QUEUED.value for r in self._runs.values())

    async def count_active(self, *, workflow: str | None = None, trigger_key: str | None = None,
                           status: str | None = None) -> int:
        """Queued and running runs (or only ``status``), optionally of one workflow/trigger."""
        return sum((r.record.status == status if status else r.record.status in _ACTIVE)
                   and (workflow is None or r.record.workflow == workflow)
                   and (trigger_key is None or r.trigger_key == trigger_key)
                   for r in self._runs.values())

    async def claim_next(self, workflows: Sequence[str], owner: str,
                         lease_seconds: float) -> str | None:
        """Take the oldest queued run of one of ``workflows``; its id, or ``None``."""
        taken = await self.take_next(workflows, owner, lease_seconds)
        return None if taken is None else taken[0]

    async def take_next(self, workflows: Sequence[str], owner: str, lease_seconds: float,
                        limits: Mapping[str, tuple[int, bool]] | None = None
                        ) -> tuple[str, bool] | None:
        """:meth:`claim_next`, and whether the run is one that waited and was woken; under
        ``limits`` as :meth:`brain.store.queue.RunQueue.take_next` says."""
        queued = sorted((r for r in self._runs.values() if r.record.status ==
                         RunStatus.QUEUED.value and r.record.workflow in workflows),
                        key=lambda r: r.record.created_at)
        run = next((r for r in queued if self._under_limit(r, limits or {})), None)
        if run is None:
            return None
        now = utcnow()
        self._set(run, status=RunStatus.RUNNING.value, lease_owner=owner,
                  started_at=run.record.started_at or now,
                  lease_expires_at=now + timedelta(seconds=lease_seconds))
        return run.record.id, bool(run.wakes)

    def _under_limit(self, run: MemoryRun, limits: Mapping[str, tuple[int, bool]]) -> bool:
        """Whether taking ``run`` keeps its group within its workflow's limit."""
        limit = limits.get(run.record.workflow)
        if limit is None:
            return True
        key = run.record.concurrency_key or ""
        running = [r for r in self._runs.values() if r.record.workflow == run.record.workflow
                   and r.record.status == RunStatus.RUNNING.value
                   and (not limit[1] or (r.record.concurrency_key or "") == key)]
        return len(running) < limit[0]

    async def fail_queued(self, workflow: str, error: str,
                          handlers: Callable[[str, str], Sequence[QueuedRun]] | None = None
                          ) -> list[str]:
        """Fail every queued run of ``workflow``, skip their steps, queue their handlers."""
        now, message = utcnow(), clean_text(error)
        failed: list[str] = []
        for run in [r for r in self._runs.values() if r.record.workflow == workflow
                    and r.record.status == RunStatus.QUEUED.value]:
            queued = self._handlers(handlers(run.record.id, run.record.trigger.event)
                                    if handlers else ())
            self._keep(*queued)
            self._set(run, status=RunStatus.FAILED.value, error=message, ended_at=now)
            for step in run.steps.values():
                if step.status in (StepStatus.PENDING.value, StepStatus.RUNNING.value,
                                   StepStatus.WAITING.value):
                    step.status, step.error, step.ended_at = StepStatus.SKIPPED.value, message, now
            self._drop_timers({run.record.id})
            failed.append(run.record.id)
        return failed

    async def running_leases(self) -> list[tuple[str, str | None]]:
        """``(run id, lease owner)`` of every running run."""
        return [(r.record.id, r.record.lease_owner) for r in self._runs.values()
                if r.record.status == RunStatus.RUNNING.value]

    async def expire_lease(self, run_id: str, owner: str | None) -> None:
        """End ``owner``'s lease on a run now."""
        run = self._runs.get(run_id)
        if run is not None and run.record.status == RunStatus.RUNNING.value \
                and run.record.lease_owner == owner:
            self._set(run, lease_expires_at=utcnow() - timedelta(seconds=1))

    async def retry_run(self, run_id: str, *, definition_hash: str | None = None) -> str:
        """Queue a run that retries a failed or cancelled one, keeping its succeeded steps;
        see :meth:`brain.store.Store.retry_run`."""
        full = self._resolve(run_id)
        original = self._run(full)
        status = original.record.status
        if status not in (RunStatus.FAILED.value, RunStatus.CANCELLED.value):
            verb = "is still " if status not in FINISHED_RUN else ""
            raise RunConflict(f"run {full[:12]} {verb}{status}: only a failed or "
                              f"cancelled run can be retried")
        if definition_hash is not None and definition_hash != original.record.definition_hash:
            raise RunConflict(WORKFLOW_CHANGED)
        r = original.record
        retry = self._new_run(uuid.uuid4().hex, r.workflow, r.definition_hash, r.trigger, (),
                              previous_run_id=r.previous_run_id, retry_of=full,
                              concurrency_key=r.concurrency_key)
        retry.trigger_key = "retry"
        for old in original.steps.values():
            retry.steps[old.name] = (
                MemoryStep(**{**old.__dict__, "error": None, "process": None})
                if old.status == StepStatus.SUCCEEDED.value
                else MemoryStep(old.name, old.kind, old.position))
        self._keep(retry)
        return retry.record.id

    async def worker_heartbeat(self, worker_id: str, *, host: str, pid: int, kind: str,
                               started_at: datetime, executing: int) -> None:
        """Say this executor process is alive (its row is created on the first beat)."""
        row = self._workers.setdefault(worker_id, {
            "id": worker_id, "host": host, "pid": pid, "kind": kind,
            "started_at": utc(started_at)})
        row.update(heartbeat_at=utcnow(), executing=executing)

    async def forget_worker(self, worker_id: str) -> None:
        """Remove a worker's row."""
        self._workers.pop(worker_id, None)

    async def forget_silent_workers(self, before: datetime) -> None:
        """Remove the rows of workers silent since ``before``."""
        for worker_id in [i for i, w in self._workers.items() if w["heartbeat_at"] < before]:
            del self._workers[worker_id]

    async def list_workers(self) -> list[dict[str, Any]]:
        """Every executor process that has a row, most recent heartbeat first, with
        ``leased``: how many runs are still running under its lease."""
        leased = Counter(r.record.lease_owner for r in self._runs.values()
                         if r.record.status == RunStatus.RUNNING.value)
        return sorted(({**w, "leased": leased[w["id"]]} for w in self._workers.values()),
                      key=lambda w: w["heartbeat_at"], reverse=True)

    def _prune_fires_and_workers(self, before: datetime) -> None:
        """Drop fire records claimed before ``before`` but each trigger's latest, and the
        rows of workers silent since."""
        latest: dict[tuple[str, str], datetime] = {}
        for w, k, t in self._fires:
            latest[(w, k)] = max(t, latest.get((w, k), t))
        for fire in [f for f in self._fires if f[2] < before and f[2] < latest[f[:2]]]:
            del self._fires[fire]
        for worker_id in [i for i, w in self._workers.items() if w["heartbeat_at"] < before]:
            del self._workers[worker_id]

    async def recent_activity(self, ended_after: datetime, limit: int = 500
                              ) -> list[tuple[RunResult, dict[str, StepState]]]:
        """Runs running now, the newest ``limit`` queued or ended after ``ended_after``, each
        with ``{step: (kind, status, tries, progress)}``."""
        runs = list(self._runs.values())
        found = [r for r in runs if r.record.status == RunStatus.RUNNING.value]
        found += sorted((r for r in runs if r.record.status == RunStatus.QUEUED.value
                         or (r.record.ended_at is not None and r.record.ended_at > ended_after)),
                        key=lambda r: r.record.created_at, reverse=True)[:limit]
        return [(run_result(r, with_steps=False),
                 {s.name: (s.kind, s.status, s.tries,
                           None if s.progress is None else json.dumps(s.progress))
                  for s in r.steps.values()}) for r in found]
