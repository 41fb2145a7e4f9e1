"""What each consumer of the store needs of it: one small interface each.

:class:`brain.store.Store` has them all (mypy checks it, at the foot of
:mod:`brain.store.store`; ``tests/store/test_interfaces.py`` checks that they
name every method consumers call). A consumer is typed with the narrowest that
serves it:

- :class:`OpenableStore` — open, close, and the URL safe to print;
- :class:`RecordStore` — the runner's record: the writes a run's execution makes (its
  steps, their logs and waits, its lease and its end);
- :class:`ClaimStore` — claiming runs and the queue: taking, queueing, firing schedules,
  cancelling and retrying;
- :class:`WaitStore` — waits: what the runner reads of them, timers, decisions, signals;
- :class:`ReadStore` — reading runs back: by id or prefix, in lists, logs, activity;
- :class:`HousekeepingStore` — worker rows, pruning, the schema upgrade;
- :class:`CostStore` — cached steps' entries and rate limits' uses (SPEC §26);
- :class:`RunStore` — all of them (what ``wf.run(store=...)`` takes).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

if TYPE_CHECKING:
    from brain.dsl.cost import Limit as RateLimit
    from brain.results import (
        LogBatch,
        LogLine,
        RunResult,
        RunStatus,
        StepState,
        StepStatus,
        TriggerData,
        WaitTimer,
    )
    from brain.store.base import QueuedRun, RunRecord, StepProcess
    from brain.store.cache import CachedOutput
    from brain.store.children import ChildRun
    from brain.store.queue import Limit


@runtime_checkable
class OpenableStore(Protocol):
    """A store's life: open it, close it, say where it is."""

    @property
    def is_open(self) -> bool:
        """Whether the store is open."""
        ...

    @property
    def shown_url(self) -> str:
        """Where the store keeps its data, safe to print."""
        ...

    async def open(self) -> Self:
        """Connect (and check the schema); the store itself."""
        ...

    async def close(self) -> None:
        """Release connections, after every write already queued."""
        ...


@runtime_checkable
class RecordStore(Protocol):
    """The runner's record: every write a run's execution makes, under its owner's lease."""

    async def create_run(self, *, run_id: str, workflow: str, definition_hash: str,
                         trigger: TriggerData, step_rows: Sequence[tuple[str, str]],
                         owner: str | None = None, lease_seconds: float = 30,
                         previous_run_id: str | None = None,
                         params: Mapping[str, Any] | None = None,
                         step_prints: str | None = None,
                         version: str | None = None,
                         trace_context: str | None = None) -> datetime:
        """Insert a run and its pending steps; queued, or running under ``owner``'s lease;
        ``params``: its validated parameters (SPEC §21); ``trace_context``: its trace's
        (SPEC §25)."""
        ...

    async def set_previous_run(self, run_id: str, previous_run_id: str | None, *,
                               owner: str | None = None) -> None:
        """Record which run ``{previous.X}`` reads from."""
        ...

    async def heartbeat(self, run_id: str, owner: str,
                        lease_seconds: float | None) -> tuple[bool, bool]:
        """Renew the lease; (still ours, cancel requested)."""
        ...

    async def restamp_run(self, run_id: str, definition_hash: str,
                          step_rows: Sequence[tuple[str, str]], *, owner: str,
                          step_prints: str | None = None, version: str | None = None) -> bool:
        """Give a queued run just taken another definition of its workflow."""
        ...

    async def continue_on(self, run_id: str, *, owner: str, definition_hash: str,
                          step_prints: str, continued_on: Sequence[str],
                          fresh: Sequence[tuple[str, str, int]],
                          removed: Sequence[str]) -> None:
        """A run goes on with another definition of its workflow after a change (SPEC §24)."""
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
                            usage: dict[str, int] | None = None,
                            cached: dict[str, Any] | None = None) -> None:
        """Record a step's end (``usage``: an LLM step's tokens; ``cached``: a cache hit's
        saved usage and source)."""
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
        """Keep what a step printed (and an LLM step's tokens) before it was cut off."""
        ...

    async def step_waiting(self, run_id: str, name: str, *, inputs: dict[str, Any], tries: int,
                           started_at: datetime, waiting_for: dict[str, Any],
                           signal: str | None = None, key: str | None = None,
                           timer: WaitTimer | None = None, owner: str | None = None) -> None:
        """Record a step ``waiting`` (what for, and its timer) in one commit."""
        ...

    async def start_child(self, parent_run_id: str, step: str, tries: int, child: QueuedRun, *,
                          inputs: Mapping[str, Any], started_at: datetime,
                          waiting_for: Mapping[str, Any], timer: WaitTimer | None = None,
                          owner: str | None = None,
                          max_depth: int = 16) -> tuple[str, bool] | None:
        """Queue a step's child run and record the step waiting for it, in one commit
        (SPEC §22); ``(child id, queued now)``, ``None`` when too deep."""
        ...

    async def park_run(self, run_id: str, owner: str, wakes: int) -> bool:
        """Let go of a run whose steps all wait, unless a wait ended since ``wakes``."""
        ...

    async def append_log(self, run_id: str, step: str, batch: LogBatch, *,
                         owner: str | None = None) -> None:
        """Add to a step's stored log, in one commit."""
        ...

    async def append_logs(self, run_id: str, batches: Sequence[tuple[str, LogBatch]], *,
                          owner: str | None = None) -> None:
        """Store several steps' batches (``(step, batch)``) in one commit."""
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

    async def finish_run(self, run_id: str, status: RunStatus, error: str | None = None, *,
                         owner: str | None = None,
                         then_queue: Sequence[QueuedRun] = (),
                         output: str | None = None) -> datetime:
        """Record the run's end and release its lease; queue ``then_queue`` with it;
        ``output``: what its workflow returned (JSON text, SPEC §21)."""
        ...


@runtime_checkable
class ClaimStore(Protocol):
    """Claiming runs and the queue: what triggers, executors and the run controls use."""

    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        """Take a queued run, or a running one whose lease expired; ``True`` if taken."""
        ...

    async def claim_next(self, workflows: Sequence[str], owner: str,
                         lease_seconds: float) -> str | None:
        """Take the oldest queued run of one of ``workflows``; its id, or ``None``."""
        ...

    async def take_next(self, workflows: Sequence[str], owner: str, lease_seconds: float,
                        limits: Mapping[str, Limit] | None = None) -> tuple[str, bool] | None:
        """Take the next run the limits allow; its id and whether it was woken."""
        ...

    async def enqueue_run(self, *, run_id: str, workflow: str, definition_hash: str,
                          trigger: TriggerData, step_rows: Sequence[tuple[str, str]],
                          trigger_key: str | None = None, delivery_id: str | None = None,
                          fire_time: datetime | None = None,
                          max_queued: int | None = None,
                          concurrency_key: str | None = None,
                          params: Mapping[str, Any] | None = None,
                          step_prints: str | None = None,
                          version: str | None = None,
                          trace_context: str | None = None) -> tuple[str | None, bool]:
        """Commit a queued run; ``(run_id, created)``."""
        ...

    async def enqueue_runs(self, runs: Sequence[QueuedRun], *, trigger_key: str | None = None,
                           max_queued: int | None = None) -> list[str]:
        """Commit several queued runs, all or none; their ids."""
        ...

    async def claim_fire(self, workflow: str, trigger_key: str, fire_time: datetime) -> bool:
        """Claim a schedule's fire without a run."""
        ...

    async def last_fire(self, workflow: str, trigger_key: str) -> datetime | None:
        """The latest claimed fire time of a schedule, if any."""
        ...

    async def count_queued(self) -> int:
        """How many runs wait in the queue."""
        ...

    async def count_active(self, *, workflow: str | None = None, trigger_key: str | None = None,
                           status: str | None = None) -> int:
        """Queued and running runs (or only ``status``), optionally of one workflow/trigger."""
        ...

    async def fail_queued(self, workflow: str, error: str,
                          handlers: Callable[[str, str], Sequence[QueuedRun]] | None = None
                          ) -> list[str]:
        """Fail every queued run of a workflow no longer loaded; their ids."""
        ...

    async def running_leases(self) -> list[tuple[str, str | None]]:
        """``(run id, lease owner)`` of every running run."""
        ...

    async def expire_lease(self, run_id: str, owner: str | None) -> None:
        """End ``owner``'s lease on a run now (its process is known to be gone)."""
        ...

    @property
    def notifies(self) -> bool:
        """Whether :meth:`watch_queued` hears of runs other processes queue."""
        ...

    async def watch_queued(self, on_queued: Callable[[], None]) -> None:
        """Call ``on_queued`` whenever any process queues a run."""
        ...

    async def request_cancel(self, run_id: str) -> tuple[RunResult, bool]:
        """Ask a run to stop; the run and whether it was still active."""
        ...

    async def retry_run(self, run_id: str, *, definition_hash: str | None = None,
                        rerun: Collection[str] | None = None) -> str:
        """Queue a new run that retries a failed or cancelled one; its id."""
        ...


@runtime_checkable
class WaitStore(Protocol):
    """Waits: what the runner reads of them, their timers, decisions and signals."""

    async def run_wakes(self, run_id: str) -> int:
        """How many waits of the run have ended (``-1``: no such run)."""
        ...

    async def waited_steps(self, run_id: str) -> dict[str, tuple[str, str | None, str | None]]:
        """``{step: (status, output, error)}`` of the run's steps that waited (or wait)."""
        ...

    async def waited_step(self, run_id: str, name: str) -> tuple[str, str | None, str | None]:
        """``(status, output, error)`` of one step that waited (or waits)."""
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


@runtime_checkable
class ReadStore(Protocol):
    """Reading runs back: one, a page of them, what a resume needs, logs, activity."""

    async def resolve_id(self, run_id: str) -> str:
        """The full id of the one run whose id is or starts with ``run_id``."""
        ...

    async def get_run(self, run_id: str, *, with_steps: bool = True) -> RunResult:
        """One run by id or unique prefix, with its steps in call order."""
        ...

    async def list_runs(self, *, workflow: str | None = None, status: str | None = None,
                        limit: int = 20, event: str | None = None,
                        offset: int = 0, parent: str | None = None) -> list[RunResult]:
        """The newest runs first, without their steps (``parent``: only its children)."""
        ...

    async def children_of(self, run_id: str) -> list[ChildRun]:
        """The child runs a run's steps queued, oldest first (SPEC §22)."""
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

    async def recent_activity(self, ended_after: datetime, limit: int = 500
                              ) -> list[tuple[RunResult, dict[str, StepState]]]:
        """Runs running now and those queued or ended lately, with their steps' states."""
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


@runtime_checkable
class HousekeepingStore(Protocol):
    """Worker rows, pruning old runs, and the schema upgrade of ``brain db upgrade``."""

    async def worker_heartbeat(self, worker_id: str, *, host: str, pid: int, kind: str,
                               started_at: datetime, executing: int) -> None:
        """Say this executor process is alive."""
        ...

    async def forget_worker(self, worker_id: str) -> None:
        """Remove a worker's row (it stopped cleanly)."""
        ...

    async def forget_silent_workers(self, before: datetime) -> None:
        """Remove the rows of workers silent since ``before``."""
        ...

    async def list_workers(self) -> list[dict[str, Any]]:
        """Every executor process that has a row, most recent heartbeat first."""
        ...

    async def prune(self, finished_before: datetime) -> int:
        """Delete finished runs that ended before ``finished_before``; how many."""
        ...

    async def upgrade_schema(self) -> tuple[str | None, str]:
        """Create or upgrade the schema; the revisions before and after."""
        ...


@runtime_checkable
class CostStore(Protocol):
    """LLM cost (SPEC §26): cached steps' entries and the uses of named rate limits, shared
    by every process on the database."""

    async def cache_get(self, key: str) -> CachedOutput | None:
        """The unexpired entry under ``key``, or ``None``."""
        ...

    async def cache_put(self, key: str, *, workflow: str, step: str, kind: str,
                        output: str | None, stderr: str | None,
                        usage: dict[str, int] | None, run_id: str | None,
                        expire_seconds: float) -> None:
        """Store a succeeded step's output under ``key`` for ``expire_seconds``."""
        ...

    async def cache_clear(self, workflow: str | None = None, step: str | None = None) -> int:
        """Delete entries (of a workflow, of its step); how many."""
        ...

    async def limit_take(self, name: str, limit: RateLimit, tokens: int, hold: float
                         ) -> tuple[str | None, float]:
        """Room for one request in limit ``name``: ``(use id, 0)`` or ``(None, wait)``."""
        ...

    async def limit_settle(self, uses: Sequence[str], per: float,
                           tokens: Sequence[int | None]) -> None:
        """The requests of ``uses`` were answered (with the tokens each spent)."""
        ...

    async def limit_pause(self, name: str, seconds: float) -> None:
        """Let no request of limit ``name`` out for ``seconds``, in every process."""
        ...


@runtime_checkable
class RunStore(OpenableStore, RecordStore, ClaimStore, WaitStore, ReadStore, HousekeepingStore,
               CostStore, Protocol):
    """Every interface at once: what a workflow run given ``store=`` may use. A consumer
    that needs less is typed with the narrower one."""
