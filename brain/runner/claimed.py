"""Executing a claimed run: a queued one, a resumed one, or one whose end is decided first.

Before any step starts, what an earlier try left is settled: the process groups
it left running on this machine end, a cancel asked for while nobody executed
the run ends it, and a run recorded under another definition of its workflow
fails as changed (a queued one that never started takes the definition loaded
now instead).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set

from brain._clock import utcnow
from brain._errors import WORKFLOW_CHANGED, LeaseLost
from brain._owners import new_owner
from brain.executors import Executor
from brain.results import FINISHED_RUN, RunResult, RunStatus, StepStatus
from brain.runner.context import RunContext, context_for, env_lease_seconds
from brain.runner.engine import RunExecution
from brain.runner.events import EventHandler, LogHandler, RunEvent
from brain.runner.observe import announce_start
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
    runs (again). A run recorded under another definition of the workflow
    fails with ``workflow changed since the run started``. Returns ``None``
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
    how = "started" if first_start else "continued" if woken else "resumed"
    ended = announce_start(context.observers, RunEvent(run_id, wf.name, how, row.trigger.event,
                                                       row.retry_of))
    result = await _execute_claimed(wf, store, row, owner, first_start=first_start, woken=woken,
                                    executors=executors, abandon_on_cancel=abandon_on_cancel,
                                    loaded=loaded, context=context)
    ended(result)
    return result


async def _execute_claimed(wf: RunnableWorkflow, store: RunStore, row: RunRecord, owner: str, *,
                           first_start: bool, woken: bool,
                           executors: Mapping[str, Executor] | None,
                           abandon_on_cancel: Callable[[], bool] | None,
                           loaded: Mapping[str, RunnableWorkflow] | None,
                           context: RunContext) -> RunResult:
    run_id = row.id
    lease = context.settings.lease_seconds
    if not first_start and not woken:
        # Whatever an earlier try of this run left running on this machine (its executor
        # died, or froze past its lease and may wake any moment) ends before anything
        # else happens to the run: no step of it may run beside its next try.
        await end_leftover_processes(store, run_id)
    try:
        if await _ended_before_start(wf, store, row, owner, first_start, loaded):
            return await store.get_run(run_id)
        # Read before the steps: a wait that ends after this is noticed (SPEC §16).
        waits = WaitsFound() if first_start else await WaitsFound.read(store, run_id)
        previous, states = await _reset_for_start(wf, store, row, owner, first_start,
                                                  keep=waits.waiting | set(waits.failed))
    except LeaseLost:
        return await store.get_run(run_id)
    # The work above may have waited out a busy database: renew the lease now, so the
    # execution's count of the lease's time starts from a renewal, not from the claim.
    held, _ = await store.heartbeat(run_id, owner, lease)
    if not held:
        return await store.get_run(run_id)
    execution = RunExecution(wf, store, run_id, owner, trigger=row.trigger,
                             previous_run_id=previous, lease_seconds=lease,
                             outputs=await store.step_outputs(run_id),
                             tries={n: t for n, (_, t) in states.items()},
                             executors=executors, abandon_on_cancel=abandon_on_cancel,
                             loaded=loaded, waits=waits, context=context)
    await execution.execute()
    return await store.get_run(run_id)


async def _ended_before_start(wf: RunnableWorkflow, store: RunStore, row: RunRecord, owner: str,
                              first_start: bool,
                              loaded: Mapping[str, RunnableWorkflow] | None) -> bool:
    """End the run now when it must not run: cancelled while nobody executed it, or
    recorded under another definition; ``True`` when it ended."""
    run_id = row.id
    if row.cancel_requested:
        # Cancelled while nobody executed it (its executor froze or died): it ends here,
        # and none of its steps starts again.
        await store.end_unfinished_steps(run_id, pending=StepStatus.CANCELLED,
                                         error="cancelled", owner=owner)
        await store.finish_run(run_id, RunStatus.CANCELLED, "cancelled", owner=owner)
        return True
    changed = row.definition_hash != wf.definition_hash or row.workflow != wf.name
    if changed and row.workflow == wf.name and first_start and row.retry_of is None:
        # Queued under another definition of the workflow (a reload or a deploy since, or
        # another machine's version) and never started: it runs the workflow as this
        # executor has it now, like any queued run. Only a run that has started is bound to
        # its definition (the store checks that no step of it has started).
        changed = not await store.restamp_run(
            run_id, wf.definition_hash, [(s.name, s.kind) for s in wf.spec.steps], owner=owner)
    if not changed:
        return False
    states = await store.step_states(run_id)
    await store.steps_ended(run_id, [n for n, (status, _) in states.items()
                                     if status != StepStatus.SUCCEEDED.value],
                            StepStatus.SKIPPED, error=WORKFLOW_CHANGED, owner=owner)
    await store.finish_run(run_id, RunStatus.FAILED, WORKFLOW_CHANGED, owner=owner,
                           then_queue=failure_runs(wf, row.trigger, run_id, WORKFLOW_CHANGED,
                                                   None, None, loaded=loaded))
    return True


async def _reset_for_start(wf: RunnableWorkflow, store: RunStore, row: RunRecord, owner: str,
                           first_start: bool, keep: Set[str] = frozenset()
                           ) -> tuple[str | None, dict[str, tuple[str, int]]]:
    """Put the steps that did not succeed back to pending (but those in ``keep``: steps
    that wait, or whose wait ended failed) and choose the run ``{previous.X}`` reads if it
    is chosen now: that run, and each step's status and tries as they were before the
    reset."""
    run_id = row.id
    previous = row.previous_run_id
    states = await store.step_states(run_id)
    # (a pending step has nothing to reset: no end, output or error)
    unfinished = [n for n, (status, _) in states.items() if n not in keep
                  and status not in (StepStatus.SUCCEEDED.value, StepStatus.PENDING.value)]
    # No step has started yet (an executor died between taking the run and recording which
    # run {previous.X} reads): choose now, as a first start does.
    never_started = all(status == StepStatus.PENDING.value and tries == 0
                        for status, tries in states.values())
    # A retry keeps its original's choice, even "none" (its succeeded steps used it).
    if previous is None and row.retry_of is None and (first_start or never_started) and \
            any(s.previous_refs for s in wf.spec.steps):
        previous = await store.latest_succeeded_run(wf.name, utcnow())
        await store.set_previous_run(run_id, previous, owner=owner)
    if unfinished:  # (the lease is checked by the renewal that follows either way)
        await store.reset_steps(run_id, unfinished, owner=owner)
    return previous, states


async def resume_run(wf: RunnableWorkflow, store: RunStore, run_id: str, *,
                     on_event: EventHandler | None = None,
                     context: RunContext | None = None) -> RunResult | None:
    """Resume a run whose executor died (its lease expired); see :func:`execute_run`.

    Returns ``None`` when the run is finished or still held by a live lease.
    """
    run = await store.get_run(run_id, with_steps=False)
    if run.status in FINISHED_RUN:
        return None
    return await execute_run(wf, store, run.run_id, on_event=on_event, context=context)


async def cancel_run(store: RunStore, run_id: str) -> tuple[RunResult, bool]:
    """Ask a run to stop (see ``RunStore.request_cancel``); return it and whether it was
    still queued or running. When the cancel itself ends a running run (its executor died,
    or froze past its lease), the steps that executor left running on this machine are
    ended too: a cancelled run runs nothing more (SPEC §4)."""
    before = await store.run_row(await store.resolve_id(run_id))
    result, active = await store.request_cancel(run_id)
    if active and before is not None and before.status == RunStatus.RUNNING.value \
            and result.status == RunStatus.CANCELLED:
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
