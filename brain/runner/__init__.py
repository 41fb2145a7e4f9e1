"""Running workflows: start a run now, execute a queued one, resume an abandoned one."""

from __future__ import annotations

import contextlib
import os
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from brain._clock import utcnow
from brain._errors import WORKFLOW_CHANGED, LeaseLost, StoreError
from brain._owners import new_owner
from brain.executors import Executor
from brain.results import FINISHED_RUN, RunResult, RunStatus, StepStatus, TriggerData
from brain.runner.engine import (
    RunExecution,
    RunnableWorkflow,
    failure_runs,
    remember_known_secrets,
)
from brain.runner.events import EventHandler, StepEvent
from brain.store import Store
from brain.store.base import RunStore

__all__ = ["WORKFLOW_CHANGED", "EventHandler", "RunnableWorkflow", "StepEvent", "cancel_run",
           "end_leftover_processes", "execute_claimed", "execute_run", "new_owner", "resume_run",
           "run_workflow_now"]



def lease_seconds() -> float:
    """How long a lease lasts without a heartbeat (``BRAIN_LEASE_SECONDS``, default 30)."""
    raw = os.environ.get("BRAIN_LEASE_SECONDS", "30")
    try:
        value = float(raw)
    except ValueError:
        raise StoreError(f"BRAIN_LEASE_SECONDS must be a number of seconds, not {raw!r}") from None
    return max(value, 1.0)


#: Stores given unopened to runs of this process, by how many of those runs use each: the
#: runs open such a store together and the last one to finish closes it.
_borrowers: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def _store_for(store: RunStore | str | None) -> AsyncIterator[RunStore]:
    """The store a run records into, open while the run needs it.

    A URL (or nothing: ``BRAIN_DATABASE_URL``) gets a store of the run's own. A
    store the caller opened stays the caller's. A store given unopened is
    opened by the first run that needs it and closed when the last run using it
    ends, so concurrent runs can share it.
    """
    if store is None or isinstance(store, str):
        own = Store(store)
        await own.open()
        try:
            yield own
        finally:
            await own.close()
        return
    if store.is_open and store not in _borrowers:
        yield store
        return
    _borrowers[store] = _borrowers.get(store, 0) + 1
    try:
        await store.open()
        yield store
    finally:
        _borrowers[store] -= 1
        if not _borrowers[store]:
            del _borrowers[store]
            await store.close()


async def run_workflow_now(wf: RunnableWorkflow, trigger: object = None, *,
                           store: RunStore | str | None = None, on_event: EventHandler | None = None,
                           executors: Mapping[str, Executor] | None = None,
                           previous_outputs: dict[str, str] | None = None) -> RunResult:
    """Record a new run of ``wf``, execute it in this process, and return its result."""
    trig = TriggerData.from_input(trigger)
    remember_known_secrets(wf)  # before the trigger is stored
    async with _store_for(store) as st:
        owner = new_owner()
        run_id = uuid.uuid4().hex
        lease = lease_seconds()
        uses_previous = any(s.previous_refs for s in wf.spec.steps)
        previous = None
        if uses_previous and previous_outputs is None:
            previous = await st.latest_succeeded_run(wf.name, utcnow())
        await st.create_run(run_id=run_id, workflow=wf.name, definition_hash=wf.definition_hash,
                            trigger=trig, step_rows=[(s.name, s.kind) for s in wf.spec.steps],
                            owner=owner, lease_seconds=lease, previous_run_id=previous)
        execution = RunExecution(wf, st, run_id, owner, trigger=trig, previous_run_id=previous,
                                 lease_seconds=lease, executors=executors, on_event=on_event,
                                 previous_outputs=previous_outputs)
        await execution.execute()
        if execution.stalled:
            # The database stalled for longer than a lease, so the work stopped. Unless
            # another executor took the run meanwhile, finish it here: it was accepted.
            resumed = await _resume_after_stall(wf, st, run_id, owner, lease, on_event=on_event,
                                                executors=executors)
            if resumed is not None:
                return resumed
        return await st.get_run(run_id)


async def _resume_after_stall(wf: RunnableWorkflow, store: RunStore, run_id: str, owner: str,
                              lease: float, *,
                              on_event: EventHandler | None,
                              executors: Mapping[str, Executor] | None) -> RunResult | None:
    """Claim the run again once its lease has run out (by the database's records), and
    execute what did not finish; ``None`` if another executor has it."""
    import asyncio

    ours = {owner}  # every owner id this process has held the run under
    for _ in range(3 * (int(lease) + 10)):
        row = await store.run_row(run_id)
        if row is None or row.status != RunStatus.RUNNING.value:
            return None
        if row.lease_expires_at is not None and row.lease_expires_at > utcnow():
            if row.lease_owner not in ours:
                return None  # another executor took it: it finishes the run
            await asyncio.sleep(1)  # ours, not expired yet by the records
            continue
        again = new_owner()
        ours.add(again)
        if not await store.claim_run(run_id, again, lease_seconds()):
            continue
        result = await execute_claimed(wf, store, run_id, again, first_start=False,
                                       on_event=on_event, executors=executors)
        if result.status in FINISHED_RUN:
            return result
    return None


async def execute_run(wf: RunnableWorkflow, store: RunStore, run_id: str, *, owner: str | None = None,
                      on_event: EventHandler | None = None,
                      executors: Mapping[str, Executor] | None = None,
                      abandon_on_cancel: Callable[[], bool] | None = None) -> RunResult | None:
    """Claim a queued run, or a running one whose lease expired, and execute it.

    Steps that already succeeded keep their stored outputs; every other step
    runs (again). A run recorded under another definition of the workflow
    fails with ``workflow changed since the run started``. Returns ``None``
    when the run could not be claimed (another executor has it, or it ended).
    """
    owner = owner or new_owner()
    before = await store.run_row(run_id)
    if before is None or not await store.claim_run(run_id, owner, lease_seconds()):
        return None
    return await execute_claimed(wf, store, run_id, owner, first_start=before.started_at is None,
                                 on_event=on_event, executors=executors,
                                 abandon_on_cancel=abandon_on_cancel)


async def execute_claimed(wf: RunnableWorkflow, store: RunStore, run_id: str, owner: str, *,
                          first_start: bool, on_event: EventHandler | None = None,
                          executors: Mapping[str, Executor] | None = None,
                          abandon_on_cancel: Callable[[], bool] | None = None) -> RunResult:
    """Execute a run this ``owner`` has just claimed (see :func:`execute_run`).

    ``first_start``: the run was queued until now, so ``{previous.X}`` is
    chosen now (and stored, so a resume sees the same values).
    """
    lease = lease_seconds()
    row = await store.run_row(run_id)
    assert row is not None
    if not first_start:
        # Whatever an earlier try of this run left running on this machine (its executor
        # died, or froze past its lease and may wake any moment) ends before anything
        # else happens to the run: no step of it may run beside its next try.
        await end_leftover_processes(store, run_id)
    if row.cancel_requested:
        # Cancelled while nobody executed it (its executor froze or died): it ends here,
        # and none of its steps starts again.
        try:
            await store.end_unfinished_steps(run_id, pending=StepStatus.CANCELLED,
                                             error="cancelled", owner=owner)
            await store.finish_run(run_id, RunStatus.CANCELLED, "cancelled", owner=owner)
        except LeaseLost:
            pass
        return await store.get_run(run_id)
    changed = row.definition_hash != wf.definition_hash or row.workflow != wf.name
    if changed and row.workflow == wf.name and first_start and row.retry_of is None:
        # Queued under another definition of the workflow (a reload or a deploy since, or
        # another machine's version) and never started: it runs the workflow as this
        # executor has it now, like any queued run. Only a run that has started is bound to
        # its definition (the store checks that no step of it has started).
        try:
            changed = not await store.restamp_run(
                run_id, wf.definition_hash, [(s.name, s.kind) for s in wf.spec.steps],
                owner=owner)
        except LeaseLost:
            return await store.get_run(run_id)
    if changed:
        states = await store.step_states(run_id)
        try:
            await store.steps_ended(run_id, [n for n, (status, _) in states.items()
                                             if status != StepStatus.SUCCEEDED.value],
                                    StepStatus.SKIPPED, error=WORKFLOW_CHANGED, owner=owner)
            await store.finish_run(run_id, RunStatus.FAILED, WORKFLOW_CHANGED, owner=owner,
                                   then_queue=failure_runs(wf, row.trigger, run_id,
                                                           WORKFLOW_CHANGED, None, None))
        except LeaseLost:
            pass  # another executor has it now
        return await store.get_run(run_id)
    trigger = row.trigger
    previous = row.previous_run_id
    states = await store.step_states(run_id)
    outputs = await store.step_outputs(run_id)
    unfinished = [n for n, (status, _) in states.items() if status != StepStatus.SUCCEEDED.value]
    # No step has started yet (an executor died between taking the run and recording which
    # run {previous.X} reads): choose now, as a first start does.
    never_started = all(status == StepStatus.PENDING.value and tries == 0
                        for status, tries in states.values())
    try:
        # A retry keeps its original's choice, even "none" (its succeeded steps used it).
        if previous is None and row.retry_of is None and (first_start or never_started) and \
                any(s.previous_refs for s in wf.spec.steps):
            previous = await store.latest_succeeded_run(wf.name, utcnow())
            await store.set_previous_run(run_id, previous, owner=owner)
        await store.reset_steps(run_id, unfinished, owner=owner)
    except LeaseLost:
        return await store.get_run(run_id)
    # The work above may have waited out a busy database: renew the lease now, so the
    # execution's count of the lease's time starts from a renewal, not from the claim.
    held, _ = await store.heartbeat(run_id, owner, lease)
    if not held:
        return await store.get_run(run_id)
    execution = RunExecution(wf, store, run_id, owner, trigger=trigger, previous_run_id=previous,
                             lease_seconds=lease, outputs=outputs,
                             tries={n: t for n, (_, t) in states.items()},
                             executors=executors, on_event=on_event,
                             abandon_on_cancel=abandon_on_cancel)
    await execution.execute()
    return await store.get_run(run_id)


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
    process since is never touched. Processes still
    carrying the run's ``BRAIN_RUN_ID`` are ended too, a net for a group that started
    just before its executor stopped, before its record was written.
    """
    from brain._owners import this_machine
    from brain.executors.base import ProcessGroup
    from brain.executors.process import end_groups, run_process_groups, still_runs

    here = this_machine()
    recorded = {p.pgid for p in await store.step_processes(run_id)
                if p.machine == here and still_runs(ProcessGroup(p.pgid, p.started))}
    return len(await end_groups(recorded | run_process_groups(run_id)))


async def resume_run(wf: RunnableWorkflow, store: RunStore, run_id: str, *,
                     on_event: EventHandler | None = None) -> RunResult | None:
    """Resume a run whose executor died (its lease expired); see :func:`execute_run`.

    Returns ``None`` when the run is finished or still held by a live lease.
    """
    run = await store.get_run(run_id, with_steps=False)
    if run.status in FINISHED_RUN:
        return None
    return await execute_run(wf, store, run.run_id, on_event=on_event)
