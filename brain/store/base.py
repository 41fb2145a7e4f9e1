"""The store interface the runner, CLI and server use, and the plain records it returns.

Two implementations: :class:`brain.store.Store` (SQLite or PostgreSQL, behind
the backends of :mod:`brain.store.backend`) and
:class:`brain.store.memory.MemoryStore` (dicts, for tests).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from brain._secrets import scrub
from brain.results import (
    LogBatch,
    LogLine,
    RunResult,
    RunStatus,
    StepStatus,
    TriggerData,
    WaitTimer,
)


@dataclass(frozen=True)
class RunRecord:
    """A run's own row: what executing or resuming it needs."""

    id: str
    workflow: str
    definition_hash: str
    status: str
    trigger: TriggerData
    error: str | None
    previous_run_id: str | None
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    cancel_requested: bool
    lease_owner: str | None
    lease_expires_at: datetime | None
    #: The run this one retries, if any.
    retry_of: str | None = None
    #: Its concurrency key (SPEC §19), if its workflow has one.
    concurrency_key: str | None = None


@dataclass(frozen=True)
class StepProcess:
    """The process group a step's try started, as recorded: its id, when its leader
    started (clock ticks since boot), and the machine it runs on (``brain._owners.
    this_machine``). A resume on that machine ends the group if its leader still runs."""

    step: str
    pgid: int
    started: int
    machine: str


@dataclass(frozen=True)
class QueuedRun:
    """A run to queue together with another write (a failure handler's, SPEC §14)."""

    run_id: str
    workflow: str
    definition_hash: str
    trigger: TriggerData
    step_rows: Sequence[tuple[str, str]]
    #: Its concurrency key, resolved from the trigger (SPEC §19).
    concurrency_key: str | None = None


def stored_trigger(trigger: TriggerData) -> TriggerData:
    """The trigger as every store records it: any secret value the process knows scrubbed
    from its body, path and header values."""
    return trigger.model_copy(update={
        "body": scrub(trigger.body) or "", "path": scrub(trigger.path),
        "headers": {k: scrub(v) or "" for k, v in trigger.headers.items()}})


class RunStore(Protocol):
    """Every read and write of runs and steps."""

    @property
    def is_open(self) -> bool:
        """Whether the store is open."""
        ...

    @property
    def shown_url(self) -> str:
        """Where the store keeps its data, safe to print."""
        ...

    async def open(self) -> Any:
        """Connect (and check the schema); the store itself."""
        ...

    async def close(self) -> None:
        """Release connections, after every write already queued."""
        ...

    async def create_run(self, *, run_id: str, workflow: str, definition_hash: str,
                         trigger: TriggerData, step_rows: Sequence[tuple[str, str]],
                         owner: str | None = None, lease_seconds: float = 30,
                         previous_run_id: str | None = None) -> datetime:
        """Insert a run and its pending steps; queued, or running under ``owner``'s lease."""
        ...

    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        """Take a queued run, or a running one whose lease expired; ``True`` if taken."""
        ...

    async def set_previous_run(self, run_id: str, previous_run_id: str | None, *,
                               owner: str | None = None) -> None:
        """Record which run ``{previous.X}`` reads from."""
        ...

    async def heartbeat(self, run_id: str, owner: str,
                        lease_seconds: float | None) -> tuple[bool, bool]:
        """Renew the lease; (still ours, cancel requested)."""
        ...

    async def step_running(self, run_id: str, name: str, *, inputs: dict[str, Any],
                           tries: int, started_at: datetime, owner: str | None = None) -> None:
        """Mark a step ``running`` with its resolved inputs."""
        ...

    async def step_finished(self, run_id: str, name: str, *, status: StepStatus, tries: int,
                            ended_at: datetime, output: str | None = None,
                            error: str | None = None, stderr: str | None = None,
                            inputs: dict[str, Any] | None = None,
                            started_at: datetime | None = None,
                            owner: str | None = None,
                            usage: dict[str, int] | None = None) -> None:
        """Record a step's end (``usage``: an LLM step's tokens, SPEC §18)."""
        ...

    async def step_process(self, run_id: str, process: StepProcess, *,
                           owner: str | None = None) -> None:
        """Record the process group a step's try started."""
        ...

    async def steps_ended(self, run_id: str, names: Iterable[str], status: StepStatus,
                          error: str | None = None, *, owner: str | None = None) -> None:
        """Mark several steps ``skipped``, ``cancelled`` or ``failed`` at once."""
        ...

    async def step_output(self, run_id: str, name: str, *, output: str | None,
                          stderr: str | None, owner: str | None = None,
                          usage: dict[str, int] | None = None) -> None:
        """Keep what a step printed (and, an LLM step, the tokens it spent) before it was cut
        off (its status is written after)."""
        ...

    async def append_log(self, run_id: str, step: str, batch: LogBatch, *,
                         owner: str | None = None) -> None:
        """Add to a step's stored log (see :class:`~brain.results.LogBatch`), in one commit."""
        ...

    async def append_logs(self, run_id: str, batches: Sequence[tuple[str, LogBatch]], *,
                          owner: str | None = None) -> None:
        """Store several steps' batches (``(step, batch)``) in one commit."""
        ...

    async def read_log(self, run_id: str, step: str, *, after: int = 0,
                       limit: int = 20_000) -> list[LogLine]:
        """The stored lines of ``step`` whose ``seq`` is greater than ``after``, in order."""
        ...

    async def run_logs(self, run_id: str) -> dict[str, list[LogLine]]:
        """Every stored line of the run, by step."""
        ...

    async def recent_logs(self, since: datetime, limit: int = 20_000
                          ) -> list[tuple[str, str, str, LogLine]]:
        """``(run id, workflow, step, line)`` of the lines stored at ``since`` or later."""
        ...

    async def add_steps(self, run_id: str, rows: Sequence[tuple[str, str, int]], *,
                        owner: str | None = None) -> None:
        """Add pending steps a run does not have yet."""
        ...

    async def end_unfinished_steps(self, run_id: str, *, pending: StepStatus,
                                   error: str | None = None, owner: str | None = None) -> None:
        """End every step still ``running`` or ``pending``."""
        ...

    async def reset_steps(self, run_id: str, names: Iterable[str], *,
                          owner: str | None = None) -> None:
        """Put unfinished steps back to ``pending`` before a resume."""
        ...

    async def restamp_run(self, run_id: str, definition_hash: str,
                          step_rows: Sequence[tuple[str, str]], *, owner: str) -> bool:
        """Give a queued run just taken another definition of its workflow."""
        ...

    async def finish_run(self, run_id: str, status: RunStatus, error: str | None = None, *,
                         owner: str | None = None,
                         then_queue: Sequence[QueuedRun] = ()) -> datetime: ...

    async def request_cancel(self, run_id: str) -> tuple[RunResult, bool]:
        """Ask a run to stop; the run and whether it was still active."""
        ...

    async def prune(self, finished_before: datetime) -> int:
        """Delete finished runs that ended before ``finished_before``; how many."""
        ...

    async def resolve_id(self, run_id: str) -> str:
        """The full id of the one run whose id is or starts with ``run_id``."""
        ...

    async def get_run(self, run_id: str, *, with_steps: bool = True) -> RunResult:
        """One run by id or unique prefix, with its steps in call order."""
        ...

    async def list_runs(self, *, workflow: str | None = None, status: str | None = None,
                        event: str | None = None, offset: int = 0,
                        limit: int = 20) -> list[RunResult]:
        """The newest runs first, without their steps."""
        ...

    async def run_row(self, run_id: str) -> RunRecord | None:
        """The run's own record, or ``None``."""
        ...

    async def latest_succeeded_run(self, workflow: str, before: datetime) -> str | None:
        """The latest succeeded run of ``workflow`` that ended by ``before``."""
        ...

    async def step_outputs(self, run_id: str) -> dict[str, str]:
        """``{step name: output}`` of a run's succeeded steps."""
        ...

    async def step_states(self, run_id: str) -> dict[str, tuple[str, int]]:
        """``{step name: (status, tries)}`` of a run."""
        ...

    async def step_processes(self, run_id: str) -> list[StepProcess]:
        """The process groups a run's steps started."""
        ...

    async def expired_runs(self) -> list[str]:
        """Ids of running runs whose lease expired."""
        ...

    # --- waits (SPEC §16; see brain.store.waits) ---

    async def step_waiting(self, run_id: str, name: str, *, inputs: dict[str, Any], tries: int,
                           started_at: datetime, waiting_for: dict[str, Any],
                           signal: str | None = None, key: str | None = None,
                           timer: WaitTimer | None = None, owner: str | None = None) -> None:
        """Record a step ``waiting`` (what for, and its timer) in one commit."""
        ...

    async def park_run(self, run_id: str, owner: str, wakes: int) -> bool:
        """Let go of a run whose steps all wait, unless a wait ended since ``wakes``."""
        ...

    async def run_wakes(self, run_id: str) -> int:
        """How many waits of the run have ended (``-1``: no such run)."""
        ...

    async def waited_steps(self, run_id: str) -> dict[str, tuple[str, str | None, str | None]]:
        """``{step: (status, output, error)}`` of the run's steps that waited (or wait)."""
        ...

    async def fire_due_timers(self, now: datetime | None = None, *, run_id: str | None = None,
                              limit: int = 500) -> list[tuple[str, str]]:
        """Take the due timers and end their steps; ``(run id, step)`` of those ended."""
        ...

    async def next_timer(self, run_id: str | None = None) -> datetime | None:
        """When the next timer falls due, if any."""
        ...

    async def decide(self, run_id: str, step: str, *, approved: bool, comment: str | None = None,
                     by: str = "api") -> dict[str, Any]:
        """Approve or reject a waiting approval step; the decision stored."""
        ...

    async def send_signal(self, signal: str, key: str | None = None, body: str = "", *,
                          by: str = "api") -> list[tuple[str, str]]:
        """End every step waiting for ``signal`` with ``key``; ``(run id, step)`` of each."""
        ...

    async def count_waiting(self) -> list[tuple[str, str, int]]:
        """``(workflow, step kind, runs)`` of the waiting runs."""
        ...

    async def decisions_waiting(self, limit: int = 100) -> list[dict[str, Any]]:
        """The approval steps waiting for a decision, oldest first."""
        ...
