"""Child runs (SPEC §22): a ``workflow`` step queues one child run per try and waits for it.

A try queues its child and records the step ``waiting`` for it in one commit
(``Store.start_child``; a try started again finds its child instead of queuing a
second). The step then waits like any wait (:mod:`brain.runner.waiting`): the run is let
go of when nothing but waits is left, holding no executor slot. The child's end ends
the step's wait in the store, in the transaction that ends the child, and wakes the
parent.

Who executes the child: a service of this process serving its workflow is woken to
take it from the queue (its own limits apply); otherwise this process executes it at
once, beside the parent (``brain run``, ``wf()``, ``brain.testing``), and counts that
execution as the parent's work, so the parent is not let go of while its child runs here.
A child that ends in this process hands its end to the parent's room at once
(:func:`child_ended`), instead of the room's next look.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from brain._clock import utcnow
from brain.results import FINISHED_RUN, StepStatus, TriggerData, WaitEnd, WaitTimer
from brain.runner.record import Outcome

if TYPE_CHECKING:
    from brain.dsl.model import WorkflowStepSpec
    from brain.executors.child import ChildRequest
    from brain.runner.context import RunContext
    from brain.runner.plan import Plan
    from brain.runner.record import Recorder
    from brain.runner.waiting import WaitRoom
    from brain.runner.workflows import RunnableWorkflow
    from brain.store.base import RunStore

log = logging.getLogger("brain.runner")

#: The rooms of the runs this process executes now, by run id, with their event loops: a
#: child that ends here hands its end to its parent's room at once.
_ROOMS: dict[str, tuple[asyncio.AbstractEventLoop, WaitRoom]] = {}
#: The child executions this process runs (kept referenced until they end).
_TASKS: set[asyncio.Task[Any]] = set()
@contextlib.contextmanager
def room_open(run_id: str, room: WaitRoom) -> Any:
    """While a run executes here, its children's ends reach its room at once."""
    _ROOMS[run_id] = (asyncio.get_running_loop(), room)
    try:
        yield
    finally:
        if _ROOMS.get(run_id, (None, None))[1] is room:
            del _ROOMS[run_id]


async def child_ended(store: RunStore, parent_run_id: str, step: str | None,
                      context: RunContext) -> None:
    """A child of ``parent_run_id`` (queued by ``step``) ended in this process: its parent's
    room, if the parent executes here, reads the step's end now; the services of this
    process look at the queue now (a parent let go of is queued again by the end)."""
    context.queues.wake_all()
    found = _ROOMS.get(parent_run_id)
    if found is None or step is None:
        return
    loop, room = found
    if loop is _running_loop():
        await _hand_over(store, room, parent_run_id, step)
        return

    def hand_over() -> None:
        task = asyncio.ensure_future(_hand_over(store, room, parent_run_id, step))
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)

    with contextlib.suppress(RuntimeError):  # that loop has closed
        loop.call_soon_threadsafe(hand_over)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def _hand_over(store: RunStore, room: WaitRoom, run_id: str, step: str) -> None:
    with contextlib.suppress(Exception):  # a busy database: the room's next look finds it
        state = await store.waited_step(run_id, step)
        room.hand_over(step, state)


class ChildSteps:
    """The child steps of one execution (see the module)."""

    def __init__(self, store: RunStore, run_id: str, owner: str, plan: Plan, recorder: Recorder,
                 room: WaitRoom, context: RunContext,
                 loaded: Mapping[str, RunnableWorkflow] | None) -> None:
        self.store = store
        self.run_id = run_id
        self.owner = owner
        self.plan = plan
        self.recorder = recorder
        self.room = room
        self.context = context
        self.loaded = loaded

    async def run(self, spec: WorkflowStepSpec, request: ChildRequest, inputs: dict[str, Any],
                  tries: int, started: datetime) -> Outcome:
        """Every try of a child step (``tries``: those before), each with a child run of its
        own, to the step's final status."""
        name = spec.name
        child = self.loaded.get(request.workflow.name, request.workflow) if self.loaded \
            else request.workflow
        attempt = 0
        while True:
            attempt += 1
            tries += 1
            status, output, error = await self._try(spec, child, request.params, inputs, tries,
                                                    started)
            if status == StepStatus.SUCCEEDED.value:
                self.plan.succeeded(name, output or "")
                self.recorder.emit(name, status)
                return Outcome(name, True)
            if not status:  # it could not even start
                return Outcome(name, False, error or "failed")
            if attempt > spec.retries:
                self.recorder.emit(name, status, error=error)
                return Outcome(name, False, error or status)
            self.recorder.emit(name, "retrying", tries, error)
            await asyncio.sleep(spec.retry_delay_seconds * 2 ** (attempt - 1))
            started = utcnow()

    async def _try(self, spec: WorkflowStepSpec, child: RunnableWorkflow,
                   params: dict[str, Any], inputs: dict[str, Any], tries: int,
                   started: datetime) -> tuple[str, str | None, str | None]:
        """One try: queue (or find) its child, wait for the step's end; ``("", None, error)``
        when the child cannot be queued (too deep)."""
        from brain.executors.waits import WaitRequest, iso
        from brain.runner.queueing import new_run

        name = spec.name
        waiting_for: dict[str, Any] = {"kind": "run", "workflow": child.name}
        timer = None
        if spec.timeout_seconds is not None:
            due = utcnow() + timedelta(seconds=spec.timeout_seconds)
            waiting_for["timeout_at"] = iso(due)
            timer = WaitTimer(due, WaitEnd(StepStatus.FAILED.value,
                                           f"timed out after {spec.timeout_seconds:g} s"))
        tracer = self.context.tracer
        queued = new_run(child, TriggerData(event="manual"), params=params,
                         trace_context=tracer.child_trace(self.run_id, name) if tracer else None)
        self.room.ended.pop(name, None)  # an earlier try's end
        started_child = await self.store.start_child(
            self.run_id, name, tries, queued, inputs=inputs, started_at=started,
            waiting_for=waiting_for, timer=timer, owner=self.owner)
        if started_child is None:
            from brain.store.children import MAX_DEPTH

            error = (f"child runs nest at most {MAX_DEPTH} deep: workflow {child.name!r} "
                     f"would run at depth {MAX_DEPTH + 1}")
            await self.recorder.finished(name, StepStatus.FAILED, tries=tries, error=error,
                                         inputs=inputs, started_at=started)
            return "", None, error
        child_id, _ = started_child
        self.recorder.waiting(name, tries, WaitRequest(
            "run", timer.due if timer else None, timer.end if timer else None,
            shown={**waiting_for, "run_id": child_id}))
        self._execute(child, child_id)
        return await self.room.wait(name)

    def _execute(self, child: RunnableWorkflow, child_id: str) -> None:
        """Have the child executed: by a service of this process serving its workflow
        (woken now), else here, at once."""
        queue = self.context.queues.serving(child)
        wake = getattr(queue, "wake", None)
        if wake is not None:
            wake()
            return
        task = asyncio.ensure_future(execute_child(child, self.store, child_id, self.context,
                                                   room=self.room))
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)


async def execute_child(child: RunnableWorkflow, store: RunStore, child_id: str,
                        context: RunContext, *, room: WaitRoom | None = None) -> None:
    """Execute a queued child run in this process, unless another executor took it first,
    until it ends (waiting for it in the foreground while its own steps wait). While it
    executes it counts as work of its parent's ``room``."""
    from brain._owners import new_owner
    from brain.runner.claimed import execute_claimed
    from brain.runner.now import until_ended

    try:
        owner = new_owner()
        if not await store.claim_run(child_id, owner, context.settings.lease_seconds):
            return
        # (its end reaches the room before this counts as work no more: see child_ended)
        with room.working() if room is not None else contextlib.nullcontext():
            result = await execute_claimed(child, store, child_id, owner, first_start=True,
                                           context=context)
        if result.status not in FINISHED_RUN:
            await until_ended(child, store, child_id, on_wait=_quiet, context=context)
    except asyncio.CancelledError:
        raise
    except Exception:  # the run's own record says what happened; a resume finishes it
        log.exception("child run %s stopped by an internal error", child_id)


def _quiet(*_: Any) -> None:
    """A child's waits are told by its parent's (its run shows them)."""
