"""The store contract, how runs end: finish_run (and the runs it queues), request_cancel,
retry_run and prune.

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

from typing import Any

import pytest
from store import contract_support as contract
from store.contract_support import (
    EXPIRED,
    HASH,
    OTHER_HASH,
    dead_local_owner,
    ended_run,
    finish_step,
    live_local_owner,
    make_run,
    new_id,
    tick,
)

from brain._clock import utcnow
from brain._errors import WORKFLOW_CHANGED, RunConflict, RunNotFound, StoreError
from brain.results import RunStatus, StepStatus, TriggerData
from brain.store.base import QueuedRun

store = contract.store
contract_database = contract.contract_database


def handler_run(body: str = "failed run", run_id: str | None = None) -> QueuedRun:
    return QueuedRun(run_id=run_id or new_id(), workflow="on-failure", definition_hash=HASH,
                     trigger=TriggerData(event="failure", body=body),
                     step_rows=[("alert", "shell"), ("page", "llm")])


# --- finish_run --------------------------------------------------------------------------


async def test_finish_run_records_the_end_and_releases_the_lease(store: Any) -> None:
    run_id = await make_run(store, owner="me:1:a")
    ended = await store.finish_run(run_id, RunStatus.FAILED, "step 'x' failed: boom ✗",
                                   owner="me:1:a")
    got = await store.get_run(run_id, with_steps=False)
    assert (got.status, got.error, got.ended_at) == (
        RunStatus.FAILED, "step 'x' failed: boom ✗", ended)
    assert got.steps == {}
    row = await store.run_row(run_id)
    assert row.lease_owner is None and row.lease_expires_at is None
    assert await store.expired_runs() == []

    # without an owner (a CLI or server write) any run can be ended; no error is fine
    queued = await make_run(store)
    await store.finish_run(queued, RunStatus.SUCCEEDED)
    got = await store.get_run(queued)
    assert got.status == RunStatus.SUCCEEDED and got.error is None and got.ended_at is not None


async def test_finish_run_stores_a_lone_surrogate_as_a_replacement_character(store: Any) -> None:
    run_id = await make_run(store, owner="me:1:a")
    await store.finish_run(run_id, RunStatus.FAILED, "bad \ud800 byte", owner="me:1:a")
    assert (await store.get_run(run_id)).error == "bad \ufffd byte"


async def test_finish_run_queues_its_then_queue_runs_with_it(store: Any) -> None:
    run_id = await make_run(store, owner="me:1:a")
    first, second = handler_run("one"), handler_run("two ✓")
    await store.finish_run(run_id, RunStatus.FAILED, "boom", owner="me:1:a",
                           then_queue=[first, second])
    assert (await store.get_run(run_id)).status == RunStatus.FAILED
    for queued in (first, second):
        got = await store.get_run(queued.run_id)
        assert (got.workflow, got.status, got.trigger) == (
            "on-failure", RunStatus.QUEUED, queued.trigger)
        assert [(s.name, s.kind, s.status) for s in got.steps.values()] == [
            ("alert", "shell", StepStatus.PENDING), ("page", "llm", StepStatus.PENDING)]
        assert (await store.run_row(queued.run_id)).definition_hash == HASH
    found = await store.list_runs(status="queued", event="failure")
    assert {r.run_id for r in found} == {first.run_id, second.run_id}


async def test_finish_run_and_its_then_queue_are_all_or_nothing(store: Any) -> None:
    taken = await make_run(store, "other")
    run_id = await make_run(store, owner="me:1:a")
    fresh = handler_run()
    with pytest.raises(StoreError):  # the run id is taken
        await store.finish_run(run_id, RunStatus.FAILED, "boom", owner="me:1:a",
                               then_queue=[fresh, handler_run(run_id=taken)])
    assert (await store.get_run(run_id)).status == RunStatus.RUNNING
    assert (await store.run_row(run_id)).lease_owner == "me:1:a"
    with pytest.raises(RunNotFound):
        await store.get_run(fresh.run_id)


# --- request_cancel ------------------------------------------------------------------------


async def test_cancelling_a_queued_run_cancels_it_at_once(store: Any) -> None:
    run_id = await make_run(store)
    result, active = await store.request_cancel(run_id[:10])  # a unique prefix will do
    assert active is True
    assert result.run_id == run_id and result.status == RunStatus.CANCELLED
    assert result.steps == {}
    got = await store.get_run(run_id)
    assert (got.status, got.error) == (RunStatus.CANCELLED, "cancelled")
    assert got.ended_at is not None
    assert {(s.status, s.error) for s in got.steps.values()} == {(StepStatus.CANCELLED, "cancelled")}
    assert all(s.ended_at is not None for s in got.steps.values())
    assert (await store.run_row(run_id)).cancel_requested is True


async def test_cancelling_a_run_with_a_live_executor_only_asks_it(store: Any) -> None:
    for owner in ("exec:1:a", live_local_owner()):
        run_id = await make_run(store, owner=owner)
        await store.step_running(run_id, "one", inputs={}, tries=1, started_at=utcnow())
        result, active = await store.request_cancel(run_id)
        assert active is True and result.status == RunStatus.RUNNING
        assert await store.heartbeat(run_id, owner, None) == (True, True)
        got = await store.get_run(run_id)
        assert got.status == RunStatus.RUNNING and got.ended_at is None
        assert [s.status for s in got.steps.values()] == ["running", "pending", "pending"]
        row = await store.run_row(run_id)
        assert row.cancel_requested is True and row.lease_owner == owner
        # asking again is the same answer
        assert (await store.request_cancel(run_id))[1] is True


@pytest.mark.parametrize("abandoned", ["expired lease", "dead local owner"])
async def test_cancelling_a_run_nobody_executes_cancels_it_at_once(store: Any,
                                                                   abandoned: str) -> None:
    if abandoned == "expired lease":
        owner, lease = "gone:1:a", EXPIRED
    else:
        owner, lease = dead_local_owner(), contract.LONG
    run_id = await make_run(store, owner=owner, lease_seconds=lease)
    await finish_step(store, run_id, "one", "kept")
    await store.step_running(run_id, "two", inputs={}, tries=1, started_at=utcnow())
    result, active = await store.request_cancel(run_id)
    assert active is True and result.status == RunStatus.CANCELLED
    got = await store.get_run(run_id)
    assert (got.status, got.error) == (RunStatus.CANCELLED, "cancelled")
    assert [(s.status, s.error) for s in got.steps.values()] == [
        ("succeeded", None), ("cancelled", "cancelled"), ("cancelled", "cancelled")]
    assert got.steps["one"].output == "kept"
    row = await store.run_row(run_id)
    assert row.lease_owner is None and row.lease_expires_at is None
    assert await store.expired_runs() == []


async def test_cancelling_an_ended_run_changes_nothing(store: Any) -> None:
    for status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED):
        run_id = await ended_run(store, status, error="why")
        before = await store.get_run(run_id)
        result, active = await store.request_cancel(run_id)
        assert active is False and result.status == status
        assert await store.get_run(run_id) == before
        assert (await store.run_row(run_id)).cancel_requested is False


async def test_cancelling_an_unknown_run_is_run_not_found(store: Any) -> None:
    with pytest.raises(RunNotFound):
        await store.request_cancel(new_id())
    assert issubclass(RunNotFound, StoreError)


# --- retry_run (SPEC §13) -------------------------------------------------------------------


async def test_retry_run_queues_a_new_run_that_keeps_the_succeeded_steps(store: Any) -> None:
    previous = new_id()
    trigger = TriggerData(event="webhook", body="the body ✓", headers={"x-a": "b"})
    original = await make_run(store, owner="me:1:a", steps=("fetch", "think", "save"),
                              trigger=trigger, previous_run_id=previous)
    done_at = utcnow()
    await store.step_finished(original, "fetch", status=StepStatus.SUCCEEDED, tries=2,
                              ended_at=done_at, output="fetched", stderr="note",
                              inputs={"argv": ["curl"]}, started_at=done_at)
    await store.step_finished(original, "think", status=StepStatus.FAILED, tries=3,
                              ended_at=done_at, error="timed out", inputs={"p": 1},
                              started_at=done_at)
    await store.steps_ended(original, ["save"], StepStatus.SKIPPED)
    await store.finish_run(original, RunStatus.FAILED, "step 'think' failed: timed out")

    retry = await store.retry_run(original[:12], definition_hash=HASH)
    assert retry != original
    got = await store.get_run(retry)
    assert (got.workflow, got.status, got.trigger) == ("wf", RunStatus.QUEUED, trigger)
    assert got.retry_of == original and got.previous_run_id == previous
    assert (await store.run_row(retry)).retry_of == original
    fetch, think, save = got.steps.values()
    assert (fetch.status, fetch.output, fetch.stderr, fetch.tries, fetch.inputs) == (
        StepStatus.SUCCEEDED, "fetched", "note", 2, {"argv": ["curl"]})
    assert fetch.started_at == fetch.ended_at == done_at
    for step in (think, save):
        assert (step.status, step.tries, step.output, step.error, step.inputs) == (
            StepStatus.PENDING, 0, None, None, {})
    assert await store.step_outputs(retry) == {"fetch": "fetched"}
    # the original is untouched
    assert (await store.get_run(original)).status == RunStatus.FAILED

    # a cancelled run is retried too, and a retry of a retry points at the retry
    cancelled = await make_run(store)
    await store.request_cancel(cancelled)
    again = await store.retry_run(cancelled)
    assert (await store.get_run(again)).retry_of == cancelled
    await store.request_cancel(again)
    assert (await store.get_run(await store.retry_run(again))).retry_of == again


async def test_only_a_failed_or_cancelled_run_of_the_same_definition_is_retried(store: Any) -> None:
    queued = await make_run(store)
    running = await make_run(store, owner="me:1:a")
    succeeded = await ended_run(store, RunStatus.SUCCEEDED)
    for run_id, says in ((queued, "is still queued"), (running, "is still running"),
                         (succeeded, "succeeded")):
        with pytest.raises(RunConflict, match=says):
            await store.retry_run(run_id)
    failed = await ended_run(store, RunStatus.FAILED)
    with pytest.raises(RunConflict, match=WORKFLOW_CHANGED):
        await store.retry_run(failed, definition_hash=OTHER_HASH)
    with pytest.raises(RunNotFound):
        await store.retry_run(new_id())
    assert await store.list_runs(status="queued") == [await store.get_run(queued, with_steps=False)]


# --- prune --------------------------------------------------------------------------------


async def test_prune_deletes_runs_that_ended_before_the_cutoff(store: Any) -> None:
    old = [await ended_run(store, status, steps=("a", "b"))
           for status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)]
    await tick()
    cutoff = utcnow()
    await tick()
    recent = await ended_run(store, RunStatus.SUCCEEDED)
    running = await make_run(store, owner="me:1:a")
    queued = await make_run(store)
    expired = await make_run(store, owner="gone:1:b", lease_seconds=EXPIRED)

    assert await store.prune(cutoff) == 3
    for run_id in old:
        with pytest.raises(RunNotFound):
            await store.get_run(run_id)
        assert await store.run_row(run_id) is None
        assert await store.step_states(run_id) == {}
    assert {r.run_id for r in await store.list_runs()} == {recent, running, queued, expired}
    assert await store.prune(cutoff) == 0
    # a run that has not ended is never pruned, however old
    await tick()
    assert await store.prune(utcnow()) == 1
    assert {r.run_id for r in await store.list_runs()} == {running, queued, expired}
