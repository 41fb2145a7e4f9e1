"""What a :class:`~brain.store.memory.MemoryStore` holds: runs, steps, fires and workers in
dicts, and the helpers its parts share.

Values are kept as the SQL stores give them back: times aware in UTC, inputs
as their JSON would read back, text with lone surrogates replaced.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from brain._clock import utcnow
from brain._errors import LeaseLost, RunNotFound, StoreError
from brain.results import LogLine, RunResult, RunStatus, StepResult, StepStatus, TriggerData, step_order
from brain.store.base import QueuedRun, RunRecord, StepProcess, stored_trigger

_HEX = frozenset("0123456789abcdef")


def as_stored(value: datetime | None) -> datetime | None:
    """A time as the SQL stores read it back: aware, in UTC (a naive one taken as UTC)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def as_json(inputs: dict[str, Any]) -> dict[str, Any]:
    """Inputs as the SQL stores read them back (through their JSON text)."""
    loaded: dict[str, Any] = json.loads(json.dumps(inputs))
    return loaded


@dataclass
class MemoryStep:
    """A step's row."""

    name: str
    kind: str
    position: int
    status: str = StepStatus.PENDING.value
    tries: int = 0
    inputs: dict[str, Any] | None = None
    output: str | None = None
    error: str | None = None
    stderr: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    process: StepProcess | None = None
    waiting_for: dict[str, Any] | None = None
    decision: dict[str, Any] | None = None
    signal: str | None = None
    key: str | None = None
    usage: dict[str, int] | None = None
    progress: dict[str, Any] | None = None


@dataclass
class MemoryRun:
    """A run's row and its steps' rows."""

    record: RunRecord
    steps: dict[str, MemoryStep] = field(default_factory=dict)
    #: Each step's stored log lines, by ``seq``, with when each was written.
    logs: dict[str, dict[int, tuple[LogLine, datetime]]] = field(default_factory=dict)
    trigger_key: str | None = None
    delivery_id: str | None = None
    #: How many of its waits ended (see ``brain.store.waits``).
    wakes: int = 0


class MemoryState:
    """The dicts, and the lookups every part of the memory store uses."""

    def __init__(self, *, opened: bool = False) -> None:
        self._runs: dict[str, MemoryRun] = {}
        #: (workflow, trigger key, fire time) → the run queued for it, if any.
        self._fires: dict[tuple[str, str, datetime], str | None] = {}
        self._workers: dict[str, dict[str, Any]] = {}
        #: (run id, step) → (due time, JSON of its ``WaitEnd``): the timers of waiting steps.
        self._timers: dict[tuple[str, str], tuple[datetime, str]] = {}
        self._open = opened

    def _drop_timers(self, run_ids: Collection[str]) -> None:
        """Forget the timers of the runs ``run_ids`` (cancelled, failed or pruned)."""
        for key in [k for k in self._timers if k[0] in run_ids]:
            del self._timers[key]

    def _run(self, run_id: str) -> MemoryRun:
        run = self._runs.get(run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id!r}")
        return run

    def _set(self, run: MemoryRun, **changes: Any) -> None:
        run.record = replace(run.record, **changes)

    def _leased(self, run_id: str, owner: str | None) -> MemoryRun:
        """The run, checking that ``owner`` (when given) still holds its lease."""
        run = self._run(run_id)
        if owner is not None and run.record.lease_owner != owner:
            raise LeaseLost("this executor no longer holds the run's lease")
        return run

    def _resolve(self, run_id: str) -> str:
        """The full id of the one run whose id is or starts with ``run_id``."""
        if not run_id or len(run_id) > 32 or not _HEX.issuperset(run_id.lower()):
            raise RunNotFound(f"no run {run_id[:40]!r}: run ids are 32 hexadecimal digits "
                              f"(a unique prefix will do)")
        found = [rid for rid in self._runs if rid.startswith(run_id.lower())]
        if not found:
            raise RunNotFound(f"no run {run_id!r}")
        if len(found) > 1:
            raise RunNotFound(f"run id prefix {run_id!r} is ambiguous: give more characters")
        return found[0]

    def _new_run(self, run_id: str, workflow: str, definition_hash: str, trigger: TriggerData,
                 step_rows: Sequence[tuple[str, str]], **record: Any) -> MemoryRun:
        """A queued run (``record`` overrides its fields), not yet kept."""
        record = {"status": RunStatus.QUEUED.value, "error": None, "previous_run_id": None,
                  "created_at": utcnow(), "started_at": None, "ended_at": None,
                  "cancel_requested": False, "lease_owner": None, "lease_expires_at": None,
                  **record}
        return MemoryRun(RunRecord(id=run_id, workflow=workflow, definition_hash=definition_hash,
                                   trigger=stored_trigger(trigger), **record),
                         {name: MemoryStep(name, kind, i)
                          for i, (name, kind) in enumerate(step_rows)})

    def _keep(self, *runs: MemoryRun) -> None:
        """Keep new runs, all or none: a run id that exists already is a :class:`StoreError`
        (as a primary key is to the SQL stores)."""
        ids = [run.record.id for run in runs]
        taken = [i for i in ids if i in self._runs]
        if taken or len(set(ids)) != len(ids):
            raise StoreError(f"run {(taken or ids)[0]} already exists")
        for run in runs:
            self._runs[run.record.id] = run

    def _handlers(self, queued: Sequence[QueuedRun]) -> list[MemoryRun]:
        """Failure handlers' runs, queued (not yet kept)."""
        return [self._new_run(q.run_id, q.workflow, q.definition_hash, q.trigger, q.step_rows,
                              concurrency_key=q.concurrency_key)
                for q in queued]


def run_result(run: MemoryRun, *, with_steps: bool) -> RunResult:
    """A run as the stores return it."""
    r = run.record
    steps = {} if not with_steps else {
        s.name: StepResult(name=s.name, kind=s.kind, status=StepStatus(s.status),
                           inputs=as_json(s.inputs) if s.inputs else {}, output=s.output,
                           error=s.error, tries=s.tries, stderr=s.stderr, started_at=s.started_at,
                           ended_at=s.ended_at, waiting_for=s.waiting_for, decision=s.decision,
                           usage=s.usage, progress=s.progress)
        for s in sorted(run.steps.values(), key=lambda s: step_order(s.name, s.position))}
    return RunResult(run_id=r.id, workflow=r.workflow, status=RunStatus(r.status), error=r.error,
                     trigger=r.trigger, created_at=r.created_at, started_at=r.started_at,
                     ended_at=r.ended_at, previous_run_id=r.previous_run_id, retry_of=r.retry_of,
                     concurrency_key=r.concurrency_key, steps=steps)
