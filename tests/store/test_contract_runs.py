"""The store contract, runs: opening a store, creating and claiming runs, leases and
heartbeats, and that no write goes through under a lost lease.

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from store import contract_support as contract
from store.contract_support import (
    EXPIRED,
    HASH,
    LONG,
    ended_run,
    finish_step,
    make_run,
    new_id,
    taken_over,
)

from brain._clock import utcnow
from brain._errors import LeaseLost, RunNotFound, StoreError
from brain.results import RunStatus, StepStatus, TriggerData
from brain.store.base import QueuedRun

store = contract.store
contract_database = contract.contract_database


# --- opening -----------------------------------------------------------------------------


async def test_a_closed_store_opens_again_on_the_same_data(store: Any) -> None:
    assert store.is_open
    assert isinstance(store.shown_url, str) and store.shown_url
    run_id = await make_run(store)
    await store.close()
    assert not store.is_open
    again = contract.open_again(store)
    await again.open()
    try:
        assert again.is_open
        assert (await again.get_run(run_id)).status == RunStatus.QUEUED
    finally:
        await again.close()


async def test_a_closed_store_refuses_reads_and_writes(store: Any) -> None:
    run_id = await make_run(store)
    await store.close()
    unopened = contract.open_again(store)
    refused = 0
    for call in (lambda: store.get_run(run_id), lambda: make_run(store),
                 lambda: unopened.list_runs()):
        try:
            await call()
        except StoreError as exc:
            assert "not open" in str(exc)
            refused += 1
    assert refused == 3


# --- creating ------------------------------------------------------------------------------


async def test_create_run_records_a_queued_run_with_pending_steps(store: Any) -> None:
    trigger = TriggerData(event="webhook", body='{"a": 1} ünïcode ✓ 日本 🚀', path="/srv/in/ø.txt",
                          headers={"x-github-event": "push", "x-note": "ça va"})
    run_id, previous = new_id(), new_id()
    created = await store.create_run(
        run_id=run_id, workflow="digest", definition_hash=HASH, trigger=trigger,
        step_rows=[("fetch", "shell"), ("think", "llm"), ("save", "step")],
        previous_run_id=previous)

    got = await store.get_run(run_id)
    assert (got.run_id, got.workflow, got.status) == (run_id, "digest", RunStatus.QUEUED)
    assert got.trigger == trigger
    assert got.previous_run_id == previous and got.retry_of is None
    assert got.error is None and got.started_at is None and got.ended_at is None
    assert got.created_at == created and got.created_at.utcoffset() == timedelta(0)
    assert list(got.steps) == ["fetch", "think", "save"]
    assert [s.kind for s in got.steps.values()] == ["shell", "llm", "step"]
    for step in got.steps.values():
        assert (step.status, step.tries, step.inputs) == (StepStatus.PENDING, 0, {})
        assert step.output is step.error is step.stderr is step.started_at is step.ended_at is None

    row = await store.run_row(run_id)
    assert row is not None
    assert (row.id, row.workflow, row.definition_hash, row.status) == (
        run_id, "digest", HASH, "queued")
    assert row.trigger == trigger and row.previous_run_id == previous
    assert row.lease_owner is None and row.lease_expires_at is None
    assert row.cancel_requested is False and row.retry_of is None
    assert row.created_at == created


async def test_create_run_with_an_owner_starts_it_running_under_a_lease(store: Any) -> None:
    before = utcnow()
    run_id = await make_run(store, owner="me:1:a", lease_seconds=LONG)
    got = await store.get_run(run_id)
    assert got.status == RunStatus.RUNNING and got.started_at is not None
    row = await store.run_row(run_id)
    assert row is not None and row.lease_owner == "me:1:a"
    assert row.lease_expires_at is not None and row.lease_expires_at > before
    assert run_id not in await store.expired_runs()


async def test_creating_a_run_id_twice_is_a_store_error_and_changes_nothing(store: Any) -> None:
    run_id = await make_run(store, "first", steps=("a",))
    with pytest.raises(StoreError):
        await make_run(store, "second", run_id=run_id, steps=("b",), owner="me:1:a")
    got = await store.get_run(run_id)
    assert (got.workflow, got.status, list(got.steps)) == ("first", RunStatus.QUEUED, ["a"])
    # a run without steps is fine
    bare = await make_run(store, steps=())
    assert (await store.get_run(bare)).steps == {}
    assert (await store.step_states(bare), await store.step_outputs(bare)) == ({}, {})


# --- claiming and leases -------------------------------------------------------------------


async def test_claim_run_takes_a_queued_run_or_an_abandoned_one(store: Any) -> None:
    queued = await make_run(store)
    assert await store.claim_run(queued, "first:1:a", LONG) is True
    row = await store.run_row(queued)
    assert row is not None
    assert (row.status, row.lease_owner) == ("running", "first:1:a")
    assert row.started_at is not None
    # a live lease belongs to its owner, even against the owner itself claiming again
    assert await store.claim_run(queued, "second:2:b", LONG) is False
    assert await store.claim_run(queued, "first:1:a", LONG) is False
    assert (await store.run_row(queued)).lease_owner == "first:1:a"

    # a running run whose lease ran out (its executor died) is taken over, start time kept
    abandoned = await make_run(store, owner="dead:3:c", lease_seconds=EXPIRED)
    started = (await store.run_row(abandoned)).started_at
    assert abandoned in await store.expired_runs()
    assert await store.claim_run(abandoned, "second:2:b", LONG) is True
    row = await store.run_row(abandoned)
    assert row.lease_owner == "second:2:b" and row.started_at == started
    assert row.lease_expires_at > utcnow()
    assert abandoned not in await store.expired_runs()

    # ended runs and unknown ids are never claimed
    for status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED):
        assert await store.claim_run(await ended_run(store, status), "third:4:d", LONG) is False
    assert await store.claim_run(new_id(), "third:4:d", LONG) is False


async def test_expired_runs_lists_running_runs_whose_lease_ran_out(store: Any) -> None:
    assert await store.expired_runs() == []
    live = await make_run(store, owner="live:1:a")
    gone = await make_run(store, owner="gone:1:b", lease_seconds=EXPIRED)
    await make_run(store)  # queued: no lease at all
    ended = await make_run(store, owner="done:1:c", lease_seconds=EXPIRED)
    await store.finish_run(ended, RunStatus.FAILED, "x")
    assert await store.expired_runs() == [gone]
    assert await store.heartbeat(live, "live:1:a", EXPIRED) == (True, False)
    assert sorted(await store.expired_runs()) == sorted([live, gone])


async def test_heartbeat_renews_only_its_owners_lease(store: Any) -> None:
    run_id = await make_run(store, owner="me:1:a", lease_seconds=60)
    first = (await store.run_row(run_id)).lease_expires_at

    assert await store.heartbeat(run_id, "me:1:a", LONG) == (True, False)
    renewed = (await store.run_row(run_id)).lease_expires_at
    assert renewed > first

    # without lease_seconds it only reads; a stranger renews nothing and is told so
    assert await store.heartbeat(run_id, "me:1:a", None) == (True, False)
    assert await store.heartbeat(run_id, "stranger:2:b", 5 * LONG) == (False, False)
    row = await store.run_row(run_id)
    assert row.lease_expires_at == renewed and row.lease_owner == "me:1:a"

    # an owner whose lease ran out, not yet taken over, can renew it
    assert await store.heartbeat(run_id, "me:1:a", EXPIRED) == (True, False)
    assert await store.expired_runs() == [run_id]
    assert await store.heartbeat(run_id, "me:1:a", LONG) == (True, False)
    assert await store.expired_runs() == []

    # once taken over, the old owner learns the run is not its own any more
    await taken_over(store, run_id)
    assert await store.heartbeat(run_id, "me:1:a", LONG) == (False, False)
    assert (await store.run_row(run_id)).lease_owner == "thief:2:b"


async def test_heartbeat_reports_a_cancel_request_and_an_unknown_run(store: Any) -> None:
    run_id = await make_run(store, owner="me:1:a")
    await store.request_cancel(run_id)
    assert await store.heartbeat(run_id, "me:1:a", LONG) == (True, True)
    assert await store.heartbeat(run_id, "other:1:b", None) == (False, True)
    assert await store.heartbeat(new_id(), "me:1:a", LONG) == (False, True)
    # a queued run is nobody's
    queued = await make_run(store)
    assert await store.heartbeat(queued, "me:1:a", LONG) == (False, False)
    assert (await store.run_row(queued)).lease_expires_at is None
    # a finished run has no lease left to hold
    await store.finish_run(run_id, RunStatus.CANCELLED, "cancelled", owner="me:1:a")
    assert await store.heartbeat(run_id, "me:1:a", LONG) == (False, True)


async def test_set_previous_run(store: Any) -> None:
    run_id = await make_run(store, owner="me:1:a")
    previous = new_id()
    await store.set_previous_run(run_id, previous, owner="me:1:a")
    assert (await store.get_run(run_id)).previous_run_id == previous
    assert (await store.run_row(run_id)).previous_run_id == previous
    await store.set_previous_run(run_id, None)
    assert (await store.get_run(run_id)).previous_run_id is None


# --- writes under a lost lease (SPEC §4: an executor that lost its lease writes nothing) ----


async def test_every_write_by_an_executor_that_lost_its_lease_raises_and_changes_nothing(
        store: Any) -> None:
    from brain.store.base import StepProcess

    run_id = await make_run(store, owner="me:1:a", steps=("one", "two", "three"))
    await finish_step(store, run_id, "one", "mine", owner="me:1:a")
    await taken_over(store, run_id)
    before = await store.get_run(run_id)
    now = utcnow()
    late = QueuedRun(run_id=new_id(), workflow="handler", definition_hash=HASH,
                     trigger=TriggerData(event="failure"), step_rows=[("h", "shell")])
    writes = {
        "step_running": lambda: store.step_running(
            run_id, "two", inputs={}, tries=1, started_at=now, owner="me:1:a"),
        "step_finished (quick)": lambda: store.step_finished(
            run_id, "two", status=StepStatus.SUCCEEDED, tries=1, ended_at=now, output="late",
            inputs={}, started_at=now, owner="me:1:a"),
        "step_finished": lambda: store.step_finished(
            run_id, "two", status=StepStatus.FAILED, tries=1, ended_at=now, error="late",
            owner="me:1:a"),
        "step_process": lambda: store.step_process(
            run_id, StepProcess("two", 4242, 1, "m"), owner="me:1:a"),
        "steps_ended": lambda: store.steps_ended(
            run_id, ["two", "three"], StepStatus.CANCELLED, owner="me:1:a"),
        "reset_steps": lambda: store.reset_steps(run_id, ["one"], owner="me:1:a"),
        "set_previous_run": lambda: store.set_previous_run(run_id, new_id(), owner="me:1:a"),
        "finish_run": lambda: store.finish_run(run_id, RunStatus.SUCCEEDED, owner="me:1:a"),
        "finish_run then_queue": lambda: store.finish_run(
            run_id, RunStatus.FAILED, "boom", owner="me:1:a", then_queue=[late]),
    }
    for name, write in writes.items():
        with pytest.raises(LeaseLost):
            await write()
            pytest.fail(f"{name} wrote under a lost lease")

    after = await store.get_run(run_id)
    assert after.model_dump() == before.model_dump()
    assert after.status == RunStatus.RUNNING and after.steps["one"].output == "mine"
    assert await store.step_processes(run_id) == []
    with pytest.raises(RunNotFound):
        await store.get_run(late.run_id)
    # the new owner's writes go through
    await store.finish_run(run_id, RunStatus.SUCCEEDED, owner="thief:2:b")
    assert (await store.get_run(run_id)).status == RunStatus.SUCCEEDED


async def test_end_unfinished_steps_under_a_lost_lease_raises(store: Any) -> None:
    run_id = await make_run(store, owner="me:1:a")
    await store.step_running(run_id, "one", inputs={}, tries=1, started_at=utcnow(),
                             owner="me:1:a")
    await taken_over(store, run_id)
    with pytest.raises(LeaseLost):
        await store.end_unfinished_steps(run_id, pending=StepStatus.SKIPPED, error="stop",
                                         owner="me:1:a")
    assert {s.status for s in (await store.get_run(run_id)).steps.values()} == {
        StepStatus.RUNNING, StepStatus.PENDING}


async def test_add_steps_under_a_lost_lease_raises_and_adds_nothing(store: Any) -> None:
    run_id = await make_run(store, owner="me:1:a", steps=("one", "two"))
    await taken_over(store, run_id)
    with pytest.raises(LeaseLost):
        await store.add_steps(run_id, [("two[0]", "shell", 1)], owner="me:1:a")
    assert list((await store.get_run(run_id)).steps) == ["one", "two"]


async def test_restamp_run_under_a_lost_lease_raises_and_changes_nothing(store: Any) -> None:
    run_id = await make_run(store, owner="me:1:a", steps=("one",))
    await taken_over(store, run_id)
    with pytest.raises(LeaseLost):
        await store.restamp_run(run_id, "f" * 64, [("x", "shell")], owner="me:1:a")
    assert (await store.run_row(run_id)).definition_hash == HASH
    assert list((await store.get_run(run_id)).steps) == ["one"]


async def test_an_empty_write_under_a_lost_lease_raises_too(store: Any) -> None:
    run_id = await make_run(store, owner="me:1:a")
    await taken_over(store, run_id)
    writes = {
        "steps_ended": lambda: store.steps_ended(run_id, [], StepStatus.SKIPPED, owner="me:1:a"),
        "reset_steps": lambda: store.reset_steps(run_id, [], owner="me:1:a"),
        "add_steps": lambda: store.add_steps(run_id, [], owner="me:1:a"),
    }
    for name, write in writes.items():
        with pytest.raises(LeaseLost):
            await write()
            pytest.fail(f"{name} of nothing returned under a lost lease")
