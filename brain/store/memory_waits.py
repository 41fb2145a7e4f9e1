"""Waiting steps in the :class:`~brain.store.memory.MemoryStore`: the twins of
:mod:`brain.store.waits`, on its dicts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from brain._clock import utcnow
from brain._errors import StepNotFound
from brain.results import RunStatus, StepStatus, WaitEnd, WaitTimer, clean_text
from brain.store.memory_state import MemoryRun, MemoryState, as_json, as_stored
from brain.store.waits import (
    approval_end,
    check_approval,
    key_digest,
    not_decided,
    signal_end,
    signal_key_digests,
)


class MemoryWaits(MemoryState):
    """See :class:`brain.store.waits.StepWaits`."""

    def _end_wait(self, run: MemoryRun, name: str, end: WaitEnd, now: datetime) -> bool:
        step = run.steps.get(name)
        if step is None or step.status != StepStatus.WAITING.value:
            return False
        ok = end.status == StepStatus.SUCCEEDED.value
        step.status, step.ended_at = end.status, now
        step.output = clean_text(end.text) if ok else None
        step.error = None if ok else clean_text(end.text)
        step.decision = None if end.decision is None else as_json(
            {**end.decision, "at": now.isoformat()})
        self._timers.pop((run.record.id, name), None)
        run.wakes += 1
        if run.record.status == RunStatus.WAITING.value:
            self._set(run, status=RunStatus.QUEUED.value)
        return True

    async def step_waiting(self, run_id: str, name: str, *, inputs: dict[str, Any], tries: int,
                           started_at: datetime, waiting_for: dict[str, Any],
                           signal: str | None = None, key: str | None = None,
                           timer: WaitTimer | None = None, owner: str | None = None) -> None:
        """Record a step ``waiting``, with its timer."""
        step = self._leased(run_id, owner).steps[name]
        step.status, step.inputs, step.tries = StepStatus.WAITING.value, as_json(inputs), tries
        step.started_at, step.ended_at, step.error = as_stored(started_at), None, None
        step.output, step.decision, step.waiting_for = None, None, as_json(waiting_for)
        step.signal, step.key = signal, key_digest(key)
        if timer is not None:
            self._timers[(run_id, name)] = (as_stored(timer.due) or timer.due,
                                            timer.end.to_json())

    async def park_run(self, run_id: str, owner: str, wakes: int) -> bool:
        """Let go of a run whose steps all wait (see ``StepWaits.park_run``)."""
        run = self._runs.get(run_id)
        if run is None:
            return False
        r = run.record
        if r.lease_owner != owner or r.status != RunStatus.RUNNING.value or \
                run.wakes != wakes or r.cancel_requested:
            return False
        self._set(run, status=RunStatus.WAITING.value, lease_owner=None, lease_expires_at=None)
        return True

    async def run_wakes(self, run_id: str) -> int:
        """How many waits of the run have ended (``-1``: no such run)."""
        run = self._runs.get(run_id)
        return -1 if run is None else run.wakes

    async def waited_steps(self, run_id: str) -> dict[str, tuple[str, str | None, str | None]]:
        """``{step: (status, output, error)}`` of the run's steps that waited (or wait)."""
        run = self._runs.get(run_id)
        return {} if run is None else {s.name: (s.status, s.output, s.error)
                                       for s in run.steps.values() if s.waiting_for is not None}

    async def fire_due_timers(self, now: datetime | None = None, *, run_id: str | None = None,
                              limit: int = 500) -> list[tuple[str, str]]:
        """Take the due timers and end their steps."""
        now = now or utcnow()
        due = sorted((when, key) for key, (when, _) in self._timers.items()
                     if when <= now and (run_id is None or key[0] == run_id))[:limit]
        ended = []
        for _, key in due:
            _, value = self._timers.pop(key)
            run = self._runs.get(key[0])
            if run is not None and self._end_wait(run, key[1], WaitEnd.from_json(value), now):
                ended.append(key)
        return ended

    async def next_timer(self, run_id: str | None = None) -> datetime | None:
        """When the next timer falls due."""
        times = [when for key, (when, _) in self._timers.items()
                 if run_id is None or key[0] == run_id]
        return min(times) if times else None

    async def decide(self, run_id: str, step: str, *, approved: bool, comment: str | None = None,
                     by: str = "api") -> dict[str, Any]:
        """Approve or reject a waiting approval (see ``StepWaits.decide``)."""
        full = self._resolve(run_id)
        run = self._run(full)
        found = run.steps.get(step)
        if found is None:
            raise StepNotFound(f"run {full[:12]} has no step {step!r}")
        check_approval(full, step, found.kind)
        end = approval_end(approved, comment, by)
        now = utcnow()
        if not self._end_wait(run, step, end, now):
            raise not_decided(full, step, found.status, bool(found.decision))
        return {**(end.decision or {}), "at": now.isoformat()}

    async def send_signal(self, signal: str, key: str | None = None, body: str = "", *,
                          by: str = "api") -> list[tuple[str, str]]:
        """End every step waiting for ``signal`` with ``key``."""
        digests: list[str | None] = [None] if key is None else [*signal_key_digests(key)]
        now = utcnow()
        resumed = []
        for run in list(self._runs.values()):
            for step in list(run.steps.values()):
                if step.kind == "wait_for" and step.signal == signal and step.key in digests \
                        and self._end_wait(run, step.name,
                                           signal_end(signal, step.waiting_for, body, by), now):
                    resumed.append((run.record.id, step.name))
        return resumed

    async def count_waiting(self) -> list[tuple[str, str, int]]:
        """``(workflow, step kind, runs)`` of the waiting runs."""
        counts: dict[tuple[str, str], int] = {}
        for run in self._runs.values():
            if run.record.status != RunStatus.WAITING.value:
                continue
            for kind in {s.kind for s in run.steps.values()
                         if s.status == StepStatus.WAITING.value}:
                key = (run.record.workflow, kind)
                counts[key] = counts.get(key, 0) + 1
        return [(w, k, n) for (w, k), n in sorted(counts.items())]

    async def decisions_waiting(self, limit: int = 100) -> list[dict[str, Any]]:
        """The approval steps waiting for a decision, oldest first."""
        found = [(s.started_at or utcnow(), run, s) for run in self._runs.values()
                 for s in run.steps.values()
                 if s.kind == "approval" and s.status == StepStatus.WAITING.value]
        found.sort(key=lambda item: item[0])
        return [{"run_id": run.record.id, "workflow": run.record.workflow, "step": s.name,
                 "prompt": (s.waiting_for or {}).get("prompt", ""), "since": s.started_at,
                 "timeout_at": (s.waiting_for or {}).get("timeout_at")}
                for _, run, s in found[:limit]]


__all__ = ["MemoryWaits"]
