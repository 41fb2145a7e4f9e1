"""Executing a claimed run: a queued one, a resumed one, or one whose end is decided first.

Before any step starts, what is stored of the run is read and
:mod:`~brain.runner.lifecycle` decides what it does; this module acts on the
decision: the process groups an earlier try left running on this machine end, a
cancel asked for while nobody executed the run ends it, a run recorded under
another definition of its workflow goes on with the loaded one when the steps it
started are unchanged and fails as changed otherwise (SPEC §24; a queued one that never
started takes the definition loaded now), or its unfinished steps are reset and it
executes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from brain._clock import utcnow
from brain._errors import LeaseLost
from brain._owners import new_owner
from brain.executors import Executor
from brain.results import FINISHED_RUN, RunResult, RunStatus, StepStatus
from brain.runner.children import child_ended
from brain.runner.context import RunContext, context_for, env_lease_seconds
from brain.runner.engine import RunExecution
from brain.runner.events import EventHandler, LogHandler, RunEvent
from brain.runner.lifecycle import (
    Action,
    Decision,
    Definition,
    Event,
    StoredRun,
    StoredStep,
    cancel_ends_leftovers,
    event_of,
    may_resume,
    on_taken,
    restamp_refused,
)
from brain.runner.observe import announce_raised, announce_start
from brain.runner.queueing import failure_runs
from brain.runner.waiting import WaitsFound
from brain.runner.workflows import RunnableWorkflow
from brain.store.base import RunRecord, RunStore


def lease_seconds() -> float:
    """How long a lease lasts without a heartbeat (``BRAIN_LEASE_SECONDS``, default 30), read
    now (a run has it in its context's settings)."""
    return env_lease_seconds()


async def execute_run(wf: RunnableWorkflow, store: RunStore, run_id: str, *, owner: str | None = None,
                      on_event: EventHandler | None = None,
                      executors: Mapping[str, Executor] | None = None,
                      abandon_on_cancel: Callable[[], bool] | None = None,
                      loaded: Mapping[str, RunnableWorkflow] | None = None,
                      context: RunContext | None = None) -> RunResult | None:
    """Claim a queued run, or a running one whose lease expired, and execute it.

    Steps that already succeeded keep their stored outputs; every other step
    runs (again). A run recorded under another definition of the workflow goes on with
    the loaded one when every step it started is unchanged, else fails with ``workflow
    changed since the run started: step 'NAME' (...)`` (SPEC §24). Returns ``None``
    when the run could not be claimed (another executor has it, or it ended).
    """
    owner = owner or new_owner()
    context = context_for(context, on_event)
    before = await store.run_row(run_id)
    if before is None or not await store.claim_run(run_id, owner, context.settings.lease_seconds):
        return None
    return await execute_claimed(wf, store, run_id, owner, first_start=before.started_at is None,
                                 executors=executors, abandon_on_cancel=abandon_on_cancel,
                                 loaded=loaded, context=context)


async def execute_claimed(wf: RunnableWorkflow, store: RunStore, run_id: str, owner: str, *,
                          first_start: bool, woken: bool = False,
                          on_event: EventHandler | None = None,
                          on_log: LogHandler | None = None,
                          executors: Mapping[str, Executor] | None = None,
                          abandon_on_cancel: Callable[[], bool] | None = None,
                          loaded: Mapping[str, RunnableWorkflow] | None = None,
                          row: RunRecord | None = None,
                          context: RunContext | None = None) -> RunResult:
    """Execute a run this ``owner`` has just claimed (see :func:`execute_run`).

    ``first_start``: the run was queued until now, so ``{previous.X}`` is
    chosen now (and stored, so a resume sees the same values). ``on_log`` is told of
    steps' new log lines. ``loaded``: the
    workflows as the serving process has them now (failure handlers are queued as
    it has them). ``woken``: the run was let go of with every step left waiting, and taken
    again from the queue once a wait ended (no process of it can be left running).
    ``row``: the run's record, when the caller read it after the claim (it is read here
    otherwise). ``context``: the settings and observers of the run (``on_event`` and
    ``on_log`` are told too): they are told of the execution's start and end
    (``started``, ``resumed`` or ``continued``) and of everything between.
    """
    context = context_for(context, on_event, on_log)
    row = row or await store.run_row(run_id)
    assert row is not None
    event = event_of(first_start=first_start, woken=woken, retry_of=row.retry_of)
    how = "started" if first_start else "continued" if woken else "resumed"
    ended = announce_start(context.observers, RunEvent(run_id, wf.name, how, row.trigger.event,
                                                       row.retry_of, row.trace_context))
    try:
        result = await _execute_claimed(wf, store, row, owner, event, executors=executors,
                                        abandon_on_cancel=abandon_on_cancel, loaded=loaded,
                                        context=context)
    except BaseException:
        await announce_raised(ended, lambda: store.get_run(run_id))
        raise
    ended(result)
    if row.parent_run_id is not None and result.status in FINISHED_RUN:
        await child_ended(store, row.parent_run_id, row.parent_step, context)
    return result


async def _execute_claimed(wf: RunnableWorkflow, store: RunStore, row: RunRecord, owner: str,
                           event: Event, *, executors: Mapping[str, Executor] | None,
                           abandon_on_cancel: Callable[[], bool] | None,
                           loaded: Mapping[str, RunnableWorkflow] | None,
                           context: RunContext) -> RunResult:
    run_id = row.id
    lease = context.settings.lease_seconds
    try:
        decision, run, waits = await _decide(wf, store, row, owner, event)
        if decision.end_leftovers:
            # Whatever an earlier try of this run left running on this machine (its executor
            # died, or froze past its lease and may wake any moment) ends before anything
            # else happens to the run: no step of it may run beside its next try.
            await end_leftover_processes(store, run_id)
        if decision.action is not Action.CONTINUE:
            await _end_before_start(wf, store, row, owner, decision, loaded)
            return await store.get_run(run_id)
        previous = await _prepare(wf, store, row, owner, decision)
    except LeaseLost:
        return await store.get_run(run_id)
    # The work above may have waited out a busy database: renew the lease now, so the
    # execution's count of the lease's time starts from a renewal, not from the claim.
    renewed_at = time.monotonic()  # the lease's time counts from before the renewal
    held, _ = await store.heartbeat(run_id, owner, lease)
    if not held:
        return await store.get_run(run_id)
    execution = RunExecution(wf, store, run_id, owner, trigger=row.trigger,
                             previous_run_id=previous, lease_seconds=lease,
                             outputs=({} if event is Event.STARTED  # nothing of it ran yet
                                      else await store.step_outputs(run_id)),
                             tries={n: s.tries for n, s in run.steps.items()},
                             executors=executors, abandon_on_cancel=abandon_on_cancel,
                             loaded=loaded, waits=waits, context=context, params=row.params,
                             lease_renewed_at=renewed_at)
    await execution.execute()
    return await store.get_run(run_id)


def definition_of(wf: RunnableWorkflow) -> Definition:
    """The workflow as loaded here, as :mod:`~brain.runner.lifecycle` reads it."""
    return Definition(wf.name, wf.definition_hash,
                      reads_previous=any(s.previous_refs for s in wf.spec.steps),
                      child_retries={s.name: s.retries for s in wf.spec.steps
                                     if s.kind == "workflow"},
                      prints=wf.fingerprint, version=wf.version)


def stored_run(row: RunRecord, states: Mapping[str, tuple[str, int]],
               waits: WaitsFound | None = None) -> StoredRun:
    """What is stored of a run (its record, its steps' states, its waits) as plain data."""
    waits = waits or WaitsFound()
    return StoredRun(row.workflow, row.definition_hash, cancel_requested=row.cancel_requested,
                     retry_of=row.retry_of, previous_run_id=row.previous_run_id,
                     steps={n: StoredStep(status, tries) for n, (status, tries) in states.items()},
                     waiting=waits.waiting, failed_waits=frozenset(waits.failed),
                     step_prints=row.step_prints, continued_on=row.continued_on)


async def _decide(wf: RunnableWorkflow, store: RunStore, row: RunRecord, owner: str,
                  event: Event) -> tuple[Decision, StoredRun, WaitsFound]:
    """Read what is stored of the run and decide what it does (see
    :func:`~brain.runner.lifecycle.on_taken`); a queued run under another definition is
    given the loaded one first, when the store agrees."""
    # Read before the steps: a wait that ends after this is noticed (SPEC §16).
    waits = WaitsFound() if event in (Event.STARTED, Event.RETRIED) \
        else await WaitsFound.read(store, row.id)
    run = stored_run(row, await store.step_states(row.id), waits)
    decision = on_taken(event, run, definition_of(wf))
    if decision.action is Action.RESTAMP:
        prints = wf.fingerprint.text
        if await store.restamp_run(row.id, wf.definition_hash,
                                   [(s.name, s.kind) for s in wf.spec.steps], owner=owner,
                                   step_prints=prints, version=wf.version):
            run = replace(stored_run(row, await store.step_states(row.id), waits),
                          definition_hash=wf.definition_hash, step_prints=prints)
            decision = on_taken(event, run, definition_of(wf))
        else:
            decision = restamp_refused(run)
    if decision.action is Action.CONTINUE and waits.failed:
        # A child step tried again (a new child) is no failed wait any more.
        waits = replace(waits, failed={n: e for n, e in waits.failed.items()
                                       if n not in decision.steps})
    return decision, run, waits


async def _end_before_start(wf: RunnableWorkflow, store: RunStore, row: RunRecord, owner: str,
                            decision: Decision,
                            loaded: Mapping[str, RunnableWorkflow] | None) -> None:
    """End a run that must not run (cancelled while nobody executed it, or changed)."""
    run_id, reason = row.id, decision.reason or str(decision.action)
    if decision.action is Action.CANCEL:
        await store.end_unfinished_steps(run_id, pending=StepStatus.CANCELLED, error=reason,
                                         owner=owner)
        await store.finish_run(run_id, RunStatus.CANCELLED, reason, owner=owner)
    elif decision.action is Action.FAIL:
        await store.steps_ended(run_id, list(decision.steps), StepStatus.SKIPPED, error=reason,
                                owner=owner)
        await store.finish_run(run_id, RunStatus.FAILED, reason, owner=owner,
                               then_queue=failure_runs(wf, row.trigger, run_id, reason,
                                                       None, None, loaded=loaded))


async def _prepare(wf: RunnableWorkflow, store: RunStore, row: RunRecord, owner: str,
                   decision: Decision) -> str | None:
    """Act on a ``CONTINUE``: record the loaded definition when the run goes on with it
    after a change, choose the run ``{previous.X}`` reads if it is chosen now, put the
    steps it names back to pending; return the run ``{previous.X}`` reads."""
    previous = row.previous_run_id
    if decision.adopt is not None:  # it goes on with the loaded definition (SPEC §24)
        adopt = decision.adopt
        await store.continue_on(row.id, owner=owner, definition_hash=adopt.definition_hash,
                                step_prints=adopt.step_prints, continued_on=adopt.continued_on,
                                fresh=adopt.fresh, removed=adopt.removed)
    if decision.choose_previous:
        previous = await store.latest_succeeded_run(wf.name, utcnow())
        await store.set_previous_run(row.id, previous, owner=owner)
    if decision.steps:  # (the lease is checked by the renewal that follows either way)
        await store.reset_steps(row.id, decision.steps, owner=owner)
    return previous


async def resume_run(wf: RunnableWorkflow, store: RunStore, run_id: str, *,
                     on_event: EventHandler | None = None,
                     context: RunContext | None = None) -> RunResult | None:
    """Resume a run whose executor died (its lease expired); see :func:`execute_run`.

    Returns ``None`` when the run is finished or still held by a live lease.
    """
    run = await store.get_run(run_id, with_steps=False)
    if not may_resume(run.status):
        return None
    return await execute_run(wf, store, run.run_id, on_event=on_event, context=context)


async def cancel_run(store: RunStore, run_id: str) -> tuple[RunResult, bool]:
    """Ask a run to stop (see ``RunStore.request_cancel``); return it and whether it was
    still queued or running. When the cancel itself ends a running run (its executor died,
    or froze past its lease), the steps that executor left running on this machine are
    ended too: a cancelled run runs nothing more (SPEC §4)."""
    before = await store.run_row(await store.resolve_id(run_id))
    result, active = await store.request_cancel(run_id)
    if cancel_ends_leftovers(None if before is None else before.status, active=active,
                             after=result.status):
        await end_leftover_processes(store, result.run_id)
    return result, active


async def end_leftover_processes(store: RunStore, run_id: str) -> int:
    """End the process groups earlier tries of ``run_id`` left running on this machine,
    and wait until they are gone; return how many there were.

    A group is found by what the runner recorded when it started (its id, its leader's
    start time, the machine), and killed only while its leader still runs with that start
    time (or, the leader gone, a member started after it does), so a pid given to another
    process since is never touched. Processes still carrying the run's ``BRAIN_RUN_ID``
    are ended too, a net for a group that started just before its executor stopped,
    before its record was written.
    """
    from brain._owners import this_machine
    from brain.executors.base import ProcessGroup
    from brain.executors.process import end_groups, run_process_groups, still_runs

    here = this_machine()
    recorded = {p.pgid for p in await store.step_processes(run_id)
                if p.machine == here and still_runs(ProcessGroup(p.pgid, p.started))}
    return len(await end_groups(recorded | run_process_groups(run_id)))
