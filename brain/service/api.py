"""``BrainApi``: the operations on runs and workflows, with their rules, in one place.

Starting a run, cancelling, retrying, deciding an approval, sending a signal, reading runs
and their steps' logs, waiting for a run's end, the workers and the metrics: each is one
method here. The edges only translate: the HTTP routes and the console
(:mod:`brain.server`) turn a request into a call and the answer or error into HTTP; the
``brain`` commands (:mod:`brain.cli`) do the same for a terminal. None of them decides.

A ``BrainApi`` works on a store. The serving process gives it its
:class:`~brain.service.BrainService` too: then new work wakes the service's takers at once,
workflows are looked up among those it has loaded, and a retry is refused for a workflow it
does not serve or whose definition changed. The CLI gives it a store alone: what it queues
or decides is taken by whichever process serves the database.

A new operation (typed parameters, a partial retry, an MCP tool) is one more method, so every
edge gets it with the same rules::

    async with Store() as store:
        api = BrainApi(store)
        new_id, original = await api.retry("3f2a9c")
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from brain._errors import BrainError, RunConflict, RunNotFound, StepNotFound
from brain.dsl.waits import SIGNAL_NAME, SIGNAL_NAME_RULE
from brain.results import FINISHED_RUN, LogLine, RunResult, StepStatus, TriggerData
from brain.store.queue import QueueFull
from brain.store.runs import AlreadyRetried

if TYPE_CHECKING:
    from brain.runner.workflows import RunnableWorkflow
    from brain.service import BrainService
    from brain.store import Store
    from brain.store.base import RunRecord
    from brain.workflow import Workflow

__all__ = ["AlreadyRetried", "BrainApi", "InvalidInput", "QueueFull", "UnknownWorkflow"]

#: The largest signal body taken (as large as a webhook's or an API request's body).
MAX_SIGNAL_BODY = 1024 * 1024
#: How often a wait for a run's end looks at most, when nothing tells it sooner.
_LOOK_AT_MOST_SECONDS = 0.5


class UnknownWorkflow(BrainError, LookupError):
    """No workflow of that name is loaded (HTTP 404)."""


class InvalidInput(BrainError, ValueError):
    """An operation's input breaks its rules (HTTP 400); nothing was changed."""


def _downstream(row: RunRecord, wf: Workflow | None, step: str) -> set[str]:
    """``step`` and the steps downstream of it, in the workflow as loaded (else as the run
    recorded it); :class:`InvalidInput` when it has no such step."""
    from brain.dsl.fingerprint import WorkflowPrint

    graph = wf.fingerprint if wf is not None else (
        WorkflowPrint.parse(row.step_prints) if row.step_prints else None)
    if graph is None:
        raise InvalidInput(f"run {row.id[:12]} was recorded before its steps' graph was kept: "
                           f"retry it whole (without --from)")
    if step not in graph.steps:
        raise InvalidInput(f"workflow {row.workflow!r} has no step {step[:200]!r}; its steps: "
                           f"{', '.join(graph.steps)}")
    return graph.downstream(step)


class BrainApi:
    """The operations on runs and workflows, on one store (and the serving process's
    :class:`~brain.service.BrainService`, when there is one).

    Errors are The Brain's own: :class:`~brain._errors.RunNotFound` (and
    :class:`~brain._errors.StepNotFound`), :class:`UnknownWorkflow`,
    :class:`~brain._errors.RunConflict` (and :class:`AlreadyRetried`), :class:`QueueFull`,
    :class:`InvalidInput`.
    """

    def __init__(self, store: Store, service: BrainService | None = None, *,
                 workflows: Mapping[str, Workflow] | None = None) -> None:
        """``workflows``: the definitions to check against where there is no service (``brain
        retry RUN_ID PATH...`` loads them)."""
        self._store = store
        self._service = service
        self._loaded = workflows or {}

    @property
    def store(self) -> Store:
        """The store the operations work on."""
        return self._store

    @property
    def workflows(self) -> Mapping[str, Workflow]:
        """The loaded workflows by name: the service's, else those given (or none)."""
        return self._service.workflows if self._service is not None else self._loaded

    def workflow(self, name: str) -> Workflow:
        """The loaded workflow ``name``; :class:`UnknownWorkflow` when there is none."""
        wf = self.workflows.get(name)
        if wf is None:
            raise UnknownWorkflow(f"no workflow {name!r}")
        return wf

    def _wake(self) -> None:
        """New work is committed: the service's takers look for it now."""
        if self._service is not None:
            self._service.wake()

    # --- starting and ending runs --------------------------------------------------------

    async def start(self, workflow: str | RunnableWorkflow, trigger: TriggerData | None = None,
                    *, trigger_key: str = "api", delivery_id: str | None = None,
                    params: Mapping[str, Any] | None = None,
                    trace_parent: Mapping[str, str] | None = None) -> tuple[str, bool]:
        """Queue a run of ``workflow`` (a loaded one's name, or the workflow itself) with
        ``trigger`` and ``params``; committed when this returns. ``(run_id, created)``: with
        a ``delivery_id`` seen before, the run queued then and ``False``.

        :class:`UnknownWorkflow` for a name not loaded; :class:`~brain.WorkflowInputError`
        for parameters that do not validate (checked before anything is queued);
        :class:`QueueFull` past the queue limit (``BRAIN_MAX_QUEUED_RUNS``).
        ``trace_parent``: the caller's W3C trace context (``traceparent``, ``tracestate``
        headers), which the run's trace continues when traces are on (SPEC §25)."""
        wf = self.workflow(workflow) if isinstance(workflow, str) else workflow
        trigger = trigger or TriggerData(event="manual")
        valid = wf.spec.params.validate(params)  # before anything is queued
        if self._service is not None:
            run_id, created = await self._service.enqueue(wf, trigger, trigger_key=trigger_key,
                                                          delivery_id=delivery_id, params=valid,
                                                          trace_parent=trace_parent)
        else:
            from brain.runner.queueing import enqueue, new_run, queue_limit

            run_id, created = await enqueue(self._store, new_run(wf, trigger, valid),
                                            trigger_key=trigger_key, max_queued=queue_limit(),
                                            delivery_id=delivery_id)
        assert run_id is not None  # only a schedule's skipped fire has none
        return run_id, created

    async def cancel(self, run_id: str) -> tuple[RunResult, bool]:
        """Ask a run to stop: the run, and whether it was still active (``False``: it had
        ended, nothing changed). A run nobody executes is cancelled at once; a running one
        is stopped by its executor within a second (see ``brain.runner.cancel_run``)."""
        from brain.runner import cancel_run

        return await cancel_run(self._store, run_id)

    async def retry(self, run_id: str, *, from_step: str | None = None) -> tuple[str, str]:
        """Queue a retry of a failed or cancelled run: the new run's id and the original's
        full id. Steps that succeeded keep their outputs; the others run again, on the
        current definition (SPEC §24). ``from_step`` (``brain retry --from``): that step and
        every step downstream of it run again too, and an ended run of any status may be
        retried so.

        :class:`RunConflict` when the run is active or (without ``from_step``) succeeded;
        :class:`AlreadyRetried` (a ``RunConflict``) when another run retries it already
        (retry that one); :class:`InvalidInput` for a step its workflow does not have.
        With a service, :class:`RunConflict` when its workflow is not served here; with its
        workflow loaded (a service's, or given), when a step the retry keeps changed since
        (``workflow changed since the run started: step 'NAME' (...)``); without it, that
        rule is applied when the retry is taken.
        Nothing is queued when any of these is raised."""
        full = await self._store.resolve_id(run_id)
        row = await self._store.run_row(full)
        if row is None:
            raise RunNotFound(f"no run {run_id!r}")
        wf = self.workflows.get(row.workflow)
        if self._service is not None and wf is None:
            raise RunConflict(f"workflow {row.workflow!r} is not served here")
        rerun = None if from_step is None else _downstream(row, wf, from_step)
        if wf is not None:
            from brain.runner.claimed import definition_of, stored_run
            from brain.runner.lifecycle import retry_refusal

            run = stored_run(row, await self._store.step_states(full))
            refused = retry_refusal(run, definition_of(wf), frozenset(rerun or ()))
            if refused is not None:
                raise RunConflict(refused)
        new_id = await self._store.retry_run(full, rerun=rerun)
        self._wake()
        return new_id, full

    # --- code changes under waiting runs (SPEC §24) ---------------------------------------

    async def stale_reason(self, run_id: str, wf: RunnableWorkflow | None = None) -> str | None:
        """Why the waiting run ``run_id`` would fail when it continues on ``wf`` (by default
        its workflow as loaded here): ``workflow changed since the run started: step 'NAME'
        (...)``; ``None`` when it would go on (or does not wait, or its workflow is not
        loaded)."""
        row = await self._store.run_row(await self._store.resolve_id(run_id))
        wf = wf or (self.workflows.get(row.workflow) if row is not None else None)
        if row is None or wf is None or row.status != "waiting":
            return None
        from brain.runner.claimed import definition_of, stored_run
        from brain.runner.lifecycle import changed_since_start

        run = stored_run(row, await self._store.step_states(row.id))
        return changed_since_start(run, definition_of(wf))

    async def stale(self, workflows: Mapping[str, RunnableWorkflow] | None = None, *,
                    page: int = 500) -> list[tuple[RunResult, str]]:
        """Every waiting run (newest first) that the loaded definitions (``workflows``, by
        default this service's) would fail when it continues, each with why (see
        :meth:`stale_reason`); the waiting runs of each workflow are read ``page`` at a
        time."""
        loaded = self.workflows if workflows is None else workflows
        found = []
        for name, wf in loaded.items():
            offset = 0
            while True:
                runs = await self.runs(workflow=name, status="waiting", limit=page,
                                       offset=offset)
                for run in runs:
                    reason = await self.stale_reason(run.run_id, wf)
                    if reason is not None:
                        found.append((run, reason))
                if len(runs) < page:
                    break
                offset += page
        found.sort(key=lambda item: item[0].created_at or datetime.min.replace(tzinfo=UTC),
                   reverse=True)
        return found

    # --- waits -----------------------------------------------------------------------------

    async def decide(self, run_id: str, step: str, *, approved: bool,
                     comment: str | None = None, by: str = "api") -> dict[str, Any]:
        """Approve or reject a waiting approval step, committed when this returns; the run
        continues on an idle executor. The decision: ``run_id`` (full), ``step``,
        ``approved``, ``comment``, ``by``, ``at``. :class:`RunConflict` when the step is
        not waiting or was decided already."""
        full = await self._store.resolve_id(run_id)  # first: a later run may share the prefix
        decision = await self._store.decide(full, step, approved=approved, comment=comment,
                                            by=by)
        self._wake()
        return {"run_id": full, "step": step, **decision}

    async def signal(self, signal: str, key: str | None = None, body: str = "", *,
                     by: str = "api") -> list[tuple[str, str]]:
        """Send ``signal``: every step waiting for it with ``key`` continues, its output
        ``body`` (committed when this returns). The ``(run id, step)`` of each; none when
        nothing waited. :class:`InvalidInput` for a bad name or a body over 1 MiB."""
        self.check_signal(signal, body)
        resumed = await self._store.send_signal(signal, key, body, by=by)
        if resumed:
            self._wake()
        return resumed

    @staticmethod
    def check_signal(signal: str, body: str = "") -> None:
        """:class:`InvalidInput` unless ``signal`` is a signal's name and ``body`` at most
        1 MiB (:meth:`signal` checks it; an edge may check before it opens anything)."""
        if not SIGNAL_NAME.match(signal):
            raise InvalidInput(f"bad signal name {signal[:200]!r}: a signal's name is "
                               f"{SIGNAL_NAME_RULE}")
        if len(body.encode("utf-8", "surrogatepass")) > MAX_SIGNAL_BODY:
            raise InvalidInput(f"the signal's body is larger than "
                               f"{MAX_SIGNAL_BODY // 1024 // 1024} MiB")

    async def decisions_waiting(self, limit: int = 100) -> list[dict[str, Any]]:
        """The approval steps waiting for a decision, oldest first."""
        return await self._store.decisions_waiting(limit)

    # --- reading runs --------------------------------------------------------------------

    async def full_id(self, run_id: str) -> str:
        """The full id of the one run whose id is or starts with ``run_id``."""
        return await self._store.resolve_id(run_id)

    async def run(self, run_id: str, *, with_steps: bool = True) -> RunResult:
        """One run by id or unique prefix, with its steps in call order."""
        return await self._store.get_run(run_id, with_steps=with_steps)

    async def runs(self, *, workflow: str | None = None, status: str | None = None,
                   event: str | None = None, limit: int = 20,
                   offset: int = 0, parent: str | None = None) -> list[RunResult]:
        """Runs, newest first, without their steps: only those of ``workflow``, in
        ``status``, started by ``event``, queued by a step of run ``parent`` (an id or a
        unique prefix) when given; ``limit`` of them after ``offset``."""
        if limit < 1 or offset < 0:
            raise InvalidInput("limit must be at least 1 and offset at least 0")
        if parent is not None:
            parent = await self._store.resolve_id(parent)
        return await self._store.list_runs(workflow=workflow, status=status, event=event,
                                           limit=limit, offset=offset, parent=parent)

    async def wait_for(self, run_id: str, seconds: float) -> RunResult | None:
        """The run (without its steps) once it has ended, or ``None`` after ``seconds``.

        With a service, an execution of this process that ends says so at once; a run
        executed elsewhere is looked at again, more and more rarely (up to every half
        second)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        delay = 0.02
        while True:
            ended = self._service.execution_ended() if self._service is not None else None
            run = await self._store.get_run(run_id, with_steps=False)
            if run.status in FINISHED_RUN:
                return run
            left = deadline - loop.time()
            if left <= 0:
                return None
            await _pause(ended, min(delay, left))
            delay = min(delay * 1.5, _LOOK_AT_MOST_SECONDS)

    async def watch(self, run_id: str, seconds: float) -> AsyncIterator[RunResult]:
        """The run (with its steps) now, then again each time it changed — a step ended,
        retried or began to wait, or the run's status changed — until it has ended
        (the last one given) or ``seconds`` passed.

        Read from the store, so a run executed by any process is followed; with a service,
        a change of this process's executions is noticed at once, else the run is looked
        at again, more and more rarely (up to every half second)::

            async for run in api.watch(run_id, 60):
                print(run.status, [s.status for s in run.steps.values()])
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        delay = 0.02
        last: object = None
        while True:
            changed = self._service.run_changed() if self._service is not None else None
            run = await self._store.get_run(run_id)
            state = (run.status, tuple((s.status, s.tries) for s in run.steps.values()))
            if state != last:
                last = state
                yield run
            if run.status in FINISHED_RUN:
                return
            left = deadline - loop.time()
            if left <= 0:
                return
            await _pause(changed, min(delay, left))
            delay = min(delay * 1.5, _LOOK_AT_MOST_SECONDS)

    async def step_log(self, run_id: str, step: str, *, after: int = 0
                       ) -> tuple[RunResult, StepStatus, list[LogLine]]:
        """A step's stored log lines whose ``seq`` is greater than ``after``, with the run
        and the step's status (read first: a step's last lines are stored before its end).
        :class:`StepNotFound` for a step the run does not have."""
        run = await self._store.get_run(run_id)
        found = run.steps.get(step)
        if found is None:
            raise StepNotFound(f"run {run.run_id} has no step {step!r}")
        return run, found.status, await self.log_lines(run.run_id, step, after=after)

    async def log_lines(self, run_id: str, step: str, *, after: int = 0) -> list[LogLine]:
        """The stored lines of ``step`` of the run ``run_id`` (its full id) whose ``seq`` is
        greater than ``after``, in order (one read's worth: ask again after the last)."""
        return await self._store.read_log(run_id, step, after=after)

    async def clear_cache(self, workflow: str | None = None, step: str | None = None) -> int:
        """Delete cached steps' entries (SPEC §26): every one, a workflow's, or one step's of
        it; how many were deleted."""
        if step is not None and workflow is None:
            raise InvalidInput("a step's cache is cleared with its workflow: give the "
                               "workflow too")
        return await self._store.cache_clear(workflow, step)

    # --- the processes ---------------------------------------------------------------------

    async def workers(self) -> list[dict[str, Any]]:
        """The executor processes sharing the database (``describe_workers`` rows)."""
        from brain.runner import lease_seconds
        from brain.workers import describe_workers

        return describe_workers(await self._store.list_workers(), lease_seconds())

    async def metrics_text(self) -> bytes:
        """The serving process's Prometheus exposition, with the queue depth and the waiting
        runs read from the store. Only a serving process has metrics."""
        if self._service is None:
            raise BrainError("metrics are a serving process's (brain serve, brain worker)")
        return await self._service.metrics.exposition(self._store.count_queued,
                                                      self._store.count_waiting)


async def _pause(woken: Awaitable[Any] | None, seconds: float) -> None:
    """Wait ``seconds``, or less when ``woken`` (a sign of this process's executions) comes
    first: the pause between two looks at a run."""
    if woken is None:
        await asyncio.sleep(seconds)
    else:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken, seconds)
