"""Running a workflow now, in this process: the run is recorded, executed and returned."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from brain._clock import utcnow
from brain._owners import new_owner
from brain.executors import Executor
from brain.results import FINISHED_RUN, RunResult, StepResult, StepStatus, TriggerData
from brain.runner.claimed import definition_of, execute_claimed
from brain.runner.context import RunContext, StoreLoans, context_for
from brain.runner.engine import RunExecution
from brain.runner.events import EventHandler, LogHandler, RunEvent, StepEvent
from brain.runner.lifecycle import (
    Action,
    Event,
    StoredRun,
    after_execution,
    on_look,
    on_stall_look,
    on_taken,
)
from brain.runner.observe import RunObserver, announce_raised, announce_start
from brain.runner.queueing import new_run
from brain.runner.waiting import fire_when_due
from brain.runner.workflows import RunnableWorkflow
from brain.store.base import RunStore


@contextlib.asynccontextmanager
async def _store_for(store: RunStore | str | None, loans: StoreLoans) -> AsyncIterator[RunStore]:
    """The store a run records into, open while the run needs it.

    A PostgreSQL URL (or ``BRAIN_DATABASE_URL`` naming one) gets the store this
    process keeps for it (:mod:`brain.store.kept`: connections and schema check paid
    once, not per run); any other URL a store of the run's own. A store the caller
    opened stays the caller's. A store given unopened is opened by the first run
    that needs it and closed when the last run using it ends, so concurrent runs can
    share it (``loans`` counts them: the context's).
    """
    if store is None or isinstance(store, str):
        from brain.store.kept import store_for_url

        async with store_for_url(store) as own:
            yield own
        return
    if loans.owned_by_caller(store):
        yield store
        return
    async with loans.borrow(store) as borrowed:
        yield borrowed


async def run_workflow_now(wf: RunnableWorkflow, trigger: object = None, *,
                           store: RunStore | str | None = None, on_event: EventHandler | None = None,
                           on_log: LogHandler | None = None,
                           executors: Mapping[str, Executor] | None = None,
                           previous_outputs: dict[str, str] | None = None,
                           on_wait: WaitHandler | None = None,
                           context: RunContext | None = None,
                           params: Mapping[str, Any] | None = None) -> RunResult:
    """Record a new run of ``wf``, execute it in this process, and return its result.

    ``params`` are validated first (:class:`~brain.WorkflowInputError`, and nothing is
    recorded, when they do not validate).

    ``on_event`` is told of every step's change of status, ``on_log`` of new lines of
    steps' logs (as they are stored). A run whose steps wait (SPEC §16) is waited for
    here, in the foreground (see :func:`until_ended`); ``on_wait`` is told what it waits
    for (by default, a log line). ``context``: the run's settings and observers (read
    from the environment now when not given; ``on_event``/``on_log`` are told too).
    """
    context = context_for(context, on_event, on_log)
    trig = TriggerData.from_input(trigger)
    # validated before anything is opened or recorded
    run = new_run(wf, trig, params, trace_context=context.new_trace())
    context.secrets.protect(wf)  # before the trigger is stored
    async with _store_for(store, context.loans) as st:
        owner = new_owner()
        run_id = run.run_id
        lease = context.settings.lease_seconds
        decided = on_taken(Event.STARTED, StoredRun(wf.name, wf.definition_hash),
                           definition_of(wf))
        previous = None
        if decided.choose_previous and previous_outputs is None:
            previous = await st.latest_succeeded_run(wf.name, utcnow())
        leased_at = time.monotonic()  # the lease's time counts from before it was taken
        await st.create_run(run_id=run_id, workflow=run.workflow,
                            definition_hash=run.definition_hash, trigger=run.trigger,
                            step_rows=run.step_rows, owner=owner, lease_seconds=lease,
                            previous_run_id=previous, params=run.params,
                            step_prints=run.step_prints, version=run.version,
                            trace_context=run.trace_context)
        execution = RunExecution(wf, st, run_id, owner, trigger=trig, previous_run_id=previous,
                                 lease_seconds=lease, executors=executors,
                                 previous_outputs=previous_outputs, context=context,
                                 params=run.params, lease_renewed_at=leased_at)
        ended = announce_start(context.observers, RunEvent(run_id, wf.name, "started",
                                                           trig.event,
                                                           trace_context=run.trace_context))
        try:
            await execution.execute()
            result = await st.get_run(run_id)
        except BaseException:
            await announce_raised(ended, lambda: st.get_run(run_id))
            raise
        ended(result)
        then = after_execution(parked=execution.parked, stalled=execution.stalled)
        if then.action is Action.PARK:
            return await until_ended(wf, st, run_id, executors=executors, on_wait=on_wait,
                                     context=context)
        if then.action is Action.TAKE:
            # The database stalled for longer than a lease, so the work stopped. Unless
            # another executor took the run meanwhile, finish it here: it was accepted.
            resumed = await _resume_after_stall(wf, st, run_id, owner, lease,
                                                executors=executors, context=context)
            if resumed is not None:
                return resumed
            result = await st.get_run(run_id)
        if result.status not in FINISHED_RUN:
            # Another executor holds the run now (this one lost its lease to it): it is still
            # this call's run, so its end is waited for here (taken again if that one dies).
            return await until_ended(wf, st, run_id, executors=executors, on_wait=on_wait,
                                     context=context)
        return result


#: Told of a waiting run's waiting steps, each time the set of them changes.
WaitHandler = Callable[[RunResult, list[StepResult]], None]
#: How often a run waited for in the foreground looks at its state.
FOREGROUND_LOOK_SECONDS = 0.25

log = logging.getLogger("brain.runs")


def log_waiting(run: RunResult, steps: list[StepResult]) -> None:
    """The default :data:`WaitHandler`: a log line per waiting step."""
    for step in steps:
        log.warning("run %s of %s %s", run.run_id, run.workflow, waiting_text(run.run_id, step))


def waiting_text(run_id: str, step: StepResult) -> str:
    """What a waiting step waits for, and how to end the wait, in one line."""
    what = step.waiting_for or {}
    kind = what.get("kind")
    timeout = f" (times out at {what['timeout_at']})" if what.get("timeout_at") else ""
    if kind == "sleep":
        return f"sleeps in step {step.name!r} until {what.get('until')}"
    if kind == "run":
        return (f"waits in step {step.name!r} for child run {what.get('run_id')} of "
                f"{what.get('workflow')}{timeout}")
    if kind == "approval":
        prompt = " ".join(str(what.get("prompt", "")).split())
        shown = prompt if len(prompt) <= 80 else prompt[:77] + "..."
        return (f"waits for a decision in step {step.name!r}: {shown!r}{timeout}; decide with "
                f"`brain approve {run_id} {step.name}` (or --reject)")
    key = what.get("key")  # from a run's input: quoted, so the line is safe to copy
    send = f"brain signal {what.get('signal')}" + (
        "" if key is None else f" --key {shlex.quote(str(key))}")
    return f"waits in step {step.name!r} for signal {what.get('signal')!r}{timeout}; send it " \
           f"with `{send} --body TEXT`"


async def until_ended(wf: RunnableWorkflow, store: RunStore, run_id: str, *,
                      on_event: EventHandler | None = None, on_log: LogHandler | None = None,
                      executors: Mapping[str, Executor] | None = None,
                      on_wait: WaitHandler | None = None,
                      context: RunContext | None = None) -> RunResult:
    """Wait in the foreground for a run that waits, until it ends: its due timers are
    fired here, and once a wait has ended the run is taken again and executed here —
    unless a serving process takes it first (then this only watches)."""
    context = context_for(context, on_event, on_log)
    told: frozenset[str] = frozenset()
    tell = on_wait or log_waiting
    while True:
        if context.observers and told:  # waits that ended while nobody executed the run
            told = await _tell_ended(store, run_id, told, context.observers)
        row = await store.run_row(run_id)
        if row is None:
            return await store.get_run(run_id)
        look = on_look(row.status, lease_expired=row.lease_expires_at is None
                       or row.lease_expires_at < utcnow())
        if look.action is Action.NOTHING:  # it ended
            return await store.get_run(run_id)
        if look.action is Action.TAKE:
            # Woken from its waits, or its executor since died (a server that took it):
            # taken here, unless someone else takes it first.
            owner = new_owner()
            if await store.claim_run(run_id, owner, context.settings.lease_seconds):
                await execute_claimed(wf, store, run_id, owner, first_start=False,
                                      woken=look.event is Event.WOKEN, executors=executors,
                                      context=context)
                continue
        if look.action is Action.PARK:
            run = await store.get_run(run_id)
            waiting = [s for s in run.steps.values() if s.status == StepStatus.WAITING]
            names = frozenset(s.name for s in waiting)
            if waiting and names != told:
                told = names
                tell(run, waiting)
        fired, wait = await fire_when_due(store, run_id=run_id)
        if not fired:
            await asyncio.sleep(min(FOREGROUND_LOOK_SECONDS, wait or FOREGROUND_LOOK_SECONDS))


async def _tell_ended(store: RunStore, run_id: str, told: frozenset[str],
                      observers: RunObserver) -> frozenset[str]:
    """Tell ``observers`` of the steps in ``told`` (waiting when last looked at) that ended
    since; return those still waiting (so each is told once)."""
    ended = {name: state for name, state in (await store.waited_steps(run_id)).items()
             if name in told and state[0] != StepStatus.WAITING.value}
    run = await store.get_run(run_id) if ended else None
    kinds = {s.name: s.kind for s in run.steps.values()} if run is not None else {}
    for name, (status, _, error) in ended.items():
        observers.step_ended(StepEvent(run_id, name, kinds.get(name, ""), status, 1, error, None,
                                       workflow=run.workflow if run is not None else ""))
    return told - set(ended)


async def _resume_after_stall(wf: RunnableWorkflow, store: RunStore, run_id: str, owner: str,
                              lease: float, *, executors: Mapping[str, Executor] | None,
                              context: RunContext) -> RunResult | None:
    """Claim the run again once its lease has run out (by the database's records), and
    execute what did not finish; ``None`` if another executor has it."""
    ours = {owner}  # every owner id this process has held the run under
    for _ in range(3 * (int(lease) + 10)):
        row = await store.run_row(run_id)
        if row is None:
            return None
        look = on_stall_look(row.status, ours=row.lease_owner in ours, lease_expired=not (
            row.lease_expires_at is not None and row.lease_expires_at > utcnow()))
        if look.action is Action.NOTHING:  # ended, or another executor took it and ends it
            return None
        if look.action is Action.WATCH:
            await asyncio.sleep(1)  # ours, not expired yet by the records
            continue
        again = new_owner()
        ours.add(again)
        if not await store.claim_run(run_id, again, lease):
            continue
        result = await execute_claimed(wf, store, run_id, again, first_start=False,
                                       executors=executors, context=context)
        if result.status in FINISHED_RUN:
            return result
    return None
