"""The store contract, the queue: enqueue_run, claim_next, fail_queued, the counts, schedule
fire claims, executors' worker rows and recent_activity (SPEC §5, §9, §14).

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from store import contract_support as contract
from store.contract_support import (
    EXPIRED,
    HASH,
    LONG,
    ended_run,
    make_run,
    new_id,
    tick,
)

from brain._clock import utcnow
from brain._errors import StoreError
from brain.results import RunStatus, StepStatus, TriggerData
from brain.store.base import QueuedRun
from brain.store.queue import QueueFull

store = contract.store
contract_database = contract.contract_database

FIRE = datetime(2030, 1, 2, 3, 4, tzinfo=UTC)


async def enqueue(store: Any, workflow: str = "wf", **options: Any) -> tuple[str | None, bool]:
    return await store.enqueue_run(  # type: ignore[no-any-return]
        run_id=new_id(), workflow=workflow, definition_hash=HASH,
        trigger=options.pop("trigger", TriggerData(event="webhook", body="x")),
        step_rows=[("a", "shell"), ("b", "llm")], **options)


# --- enqueue_run -------------------------------------------------------------------------


async def test_enqueue_run_commits_a_queued_run(store: Any) -> None:
    trigger = TriggerData(event="webhook", body="body ✓", headers={"x-a": "1"})
    run_id, created = await enqueue(store, trigger=trigger, trigger_key="webhook:/hook")
    assert created is True and run_id is not None
    got = await store.get_run(run_id)
    assert (got.workflow, got.status, got.trigger) == ("wf", RunStatus.QUEUED, trigger)
    assert [(s.name, s.kind, s.status) for s in got.steps.values()] == [
        ("a", "shell", StepStatus.PENDING), ("b", "llm", StepStatus.PENDING)]
    assert await store.count_queued() == 1
    assert await store.count_active(trigger_key="webhook:/hook") == 1
    assert await store.count_active(trigger_key="other") == 0


async def test_a_repeated_delivery_id_returns_the_first_run(store: Any) -> None:
    first, created = await enqueue(store, delivery_id="d-1")
    assert created is True
    assert await enqueue(store, delivery_id="d-1") == (first, False)
    assert await store.count_active(workflow="wf") == 1
    # the id is unique per workflow: another workflow's delivery is another run
    other, created = await enqueue(store, "other", delivery_id="d-1")
    assert created is True and other != first
    # still a duplicate once the first run has ended
    await store.finish_run(first, RunStatus.SUCCEEDED)
    assert await enqueue(store, delivery_id="d-1") == (first, False)


async def test_a_repeated_delivery_id_with_a_new_fire_time_returns_the_first_run(
        store: Any) -> None:
    first, _ = await enqueue(store, delivery_id="d-1")
    assert await enqueue(store, delivery_id="d-1", trigger_key="k", fire_time=FIRE) == (
        first, False)
    assert await store.count_active() == 1


async def test_a_schedule_fire_is_queued_once(store: Any) -> None:
    run_id, created = await enqueue(store, trigger_key="cron:0 9 * * *", fire_time=FIRE)
    assert created is True
    assert await enqueue(store, trigger_key="cron:0 9 * * *", fire_time=FIRE) == (None, False)
    assert [r.run_id for r in await store.list_runs()] == [run_id]
    assert await store.last_fire("wf", "cron:0 9 * * *") == FIRE
    assert await store.claim_fire("wf", "cron:0 9 * * *", FIRE) is False
    # the same time of another trigger or workflow is another fire
    assert (await enqueue(store, trigger_key="every:60", fire_time=FIRE))[1] is True
    assert (await enqueue(store, "other", trigger_key="cron:0 9 * * *", fire_time=FIRE))[1]
    assert await store.count_queued() == 3


async def test_the_queue_refuses_runs_over_its_limit(store: Any) -> None:
    assert issubclass(QueueFull, StoreError)
    await enqueue(store, max_queued=2)
    await enqueue(store, max_queued=2)
    with pytest.raises(QueueFull):
        await enqueue(store, max_queued=2)
    assert await store.count_queued() == 2
    await enqueue(store)  # no limit given: no limit
    assert await store.count_queued() == 3


# --- claim_next and the counts behind max_concurrent_runs ---------------------------------


async def test_claim_next_takes_the_oldest_queued_run_of_the_given_workflows(store: Any) -> None:
    assert await store.claim_next(["a"], "exec:1:a", LONG) is None
    made = []
    for workflow in ("a", "b", "a", "c"):
        made.append(await make_run(store, workflow))
        await tick()
    assert await store.claim_next([], "exec:1:a", LONG) is None
    assert await store.claim_next(["c", "a"], "exec:1:a", LONG) == made[0]
    assert await store.claim_next(["c", "a"], "exec:1:a", LONG) == made[2]
    assert await store.claim_next(["c", "a"], "exec:1:b", LONG) == made[3]
    assert await store.claim_next(["c", "a"], "exec:1:b", LONG) is None
    row = await store.run_row(made[0])
    assert (row.status, row.lease_owner) == ("running", "exec:1:a")
    assert row.started_at is not None and row.lease_expires_at > utcnow()
    assert (await store.run_row(made[1])).status == "queued"


async def test_claim_next_leaves_runs_that_are_not_queued(store: Any) -> None:
    await make_run(store, owner="gone:1:a", lease_seconds=EXPIRED)  # resumed by claim_run
    await ended_run(store, RunStatus.FAILED)
    cancelled = await make_run(store)
    await store.request_cancel(cancelled)
    assert await store.claim_next(["wf"], "exec:1:a", LONG) is None


async def test_count_active_counts_queued_and_running_runs(store: Any) -> None:
    assert (await store.count_queued(), await store.count_active()) == (0, 0)
    await enqueue(store, "a", trigger_key="k1")
    await enqueue(store, "a", trigger_key="k2")
    await enqueue(store, "b", trigger_key="k1")
    running = await store.claim_next(["a"], "exec:1:a", LONG)
    await ended_run(store, RunStatus.SUCCEEDED, "a")
    assert await store.count_queued() == 2
    assert await store.count_active() == 3
    assert await store.count_active(workflow="a") == 2
    assert await store.count_active(workflow="a", status="running") == 1
    assert await store.count_active(workflow="a", status="queued") == 1
    assert await store.count_active(workflow="a", status="succeeded") == 1
    assert await store.count_active(trigger_key="k1") == 2
    assert await store.count_active(workflow="b", trigger_key="k2") == 0
    # what an executor checks before taking a run of a workflow with max_concurrent_runs=1
    assert await store.count_active(workflow="a", status="running") >= 1
    await store.finish_run(running, RunStatus.SUCCEEDED, owner="exec:1:a")
    assert await store.count_active(workflow="a", status="running") == 0
    assert await store.claim_next(["a"], "exec:1:a", LONG) is not None


# --- fail_queued -------------------------------------------------------------------------------


async def test_fail_queued_fails_every_queued_run_of_a_workflow(store: Any) -> None:
    assert await store.fail_queued("gone", "workflow not loaded") == []
    first = await make_run(store, "gone", trigger=TriggerData(event="webhook"))
    second = await make_run(store, "gone")
    running = await make_run(store, "gone", owner="exec:1:a")
    other = await make_run(store, "kept")
    handlers: dict[str, QueuedRun] = {}

    def handler(run_id: str, event: str) -> list[QueuedRun]:
        handlers[run_id] = QueuedRun(run_id=new_id(), workflow="on-failure",
                                     definition_hash=HASH,
                                     trigger=TriggerData(event="failure", body=f"{run_id} {event}"),
                                     step_rows=[("alert", "shell")])
        return [handlers[run_id]]

    failed = await store.fail_queued("gone", "workflow not loaded \ud800", handler)
    assert sorted(failed) == sorted([first, second])
    for run_id in (first, second):
        got = await store.get_run(run_id)
        assert (got.status, got.error) == (RunStatus.FAILED, "workflow not loaded \ufffd")
        assert got.ended_at is not None
        assert {(s.status, s.error) for s in got.steps.values()} == {
            (StepStatus.SKIPPED, "workflow not loaded \ufffd")}
        queued = await store.get_run(handlers[run_id].run_id)
        assert (queued.status, queued.workflow) == (RunStatus.QUEUED, "on-failure")
    assert handlers[first].trigger.body == f"{first} webhook"
    assert (await store.get_run(running)).status == RunStatus.RUNNING
    assert (await store.get_run(other)).status == RunStatus.QUEUED
    assert await store.fail_queued("gone", "again") == []


# --- schedule fires --------------------------------------------------------------------------------


async def test_claim_fire_claims_each_fire_time_once(store: Any) -> None:
    assert await store.last_fire("wf", "every:60") is None
    assert await store.claim_fire("wf", "every:60", FIRE) is True
    assert await store.claim_fire("wf", "every:60", FIRE) is False
    assert await store.claim_fire("wf", "every:60", FIRE - timedelta(minutes=1)) is True
    assert await store.last_fire("wf", "every:60") == FIRE
    later = FIRE + timedelta(minutes=1, microseconds=5)
    assert await store.claim_fire("wf", "every:60", later) is True
    last = await store.last_fire("wf", "every:60")
    assert last == later and last.utcoffset() == timedelta(0)
    # per workflow and trigger
    assert await store.claim_fire("other", "every:60", FIRE) is True
    assert await store.last_fire("wf", "every:30") is None
    # a fire time is an instant: the same one written in another offset is the same fire
    bucharest = timezone(timedelta(hours=2))
    assert await store.claim_fire("wf", "every:60", FIRE.astimezone(bucharest)) is False
    assert await store.claim_fire("tz", "every:60", FIRE.astimezone(bucharest)) is True
    assert (await store.last_fire("tz", "every:60")).tzinfo == UTC


async def test_prune_keeps_each_triggers_latest_fire_and_live_workers(store: Any) -> None:
    old = datetime(2001, 1, 1, tzinfo=UTC)
    for key in ("every:60", "cron:* * * * *"):
        for minutes in range(3):
            assert await store.claim_fire("wf", key, old + timedelta(minutes=minutes))
    await store.prune(old + timedelta(days=1))
    for key in ("every:60", "cron:* * * * *"):
        # the older claims are gone (claimable again); the latest is kept: catch-up counts from it
        assert await store.claim_fire("wf", key, old) is True
        assert await store.claim_fire("wf", key, old + timedelta(minutes=2)) is False
        assert await store.last_fire("wf", key) == old + timedelta(minutes=2)


# --- worker rows (SPEC §14) ----------------------------------------------------------------------


async def test_worker_rows(store: Any) -> None:
    assert await store.list_workers() == []
    started = utcnow()
    await store.worker_heartbeat("w1", host="alpha", pid=11, kind="serve", started_at=started,
                                 executing=0)
    await tick()
    await store.worker_heartbeat("w2", host="beta", pid=22, kind="worker", started_at=started,
                                 executing=3)
    found = await store.list_workers()
    assert [w["id"] for w in found] == ["w2", "w1"]  # most recent heartbeat first
    w2 = found[0]
    assert (w2["host"], w2["pid"], w2["kind"], w2["executing"]) == ("beta", 22, "worker", 3)
    assert w2["started_at"] == started and w2["heartbeat_at"] >= started
    await tick()
    await store.worker_heartbeat("w1", host="alpha", pid=11, kind="serve", started_at=started,
                                 executing=2)
    found = await store.list_workers()
    assert [(w["id"], w["executing"]) for w in found] == [("w1", 2), ("w2", 3)]
    await store.forget_worker("w1")
    await store.forget_worker("never-seen")
    assert [w["id"] for w in await store.list_workers()] == ["w2"]
    # a worker silent since the cutoff is pruned with the old runs
    await tick()
    await store.prune(utcnow())
    assert await store.list_workers() == []


# --- leases seen from the service --------------------------------------------------------


async def test_running_leases_and_expire_lease(store: Any) -> None:
    mine = await make_run(store, owner="me:1:a")
    theirs = await make_run(store, owner="them:1:b")
    await make_run(store)
    await ended_run(store, RunStatus.SUCCEEDED)
    assert sorted(await store.running_leases()) == sorted([(mine, "me:1:a"), (theirs, "them:1:b")])
    await store.expire_lease(mine, "someone-else:1:c")  # not its owner: nothing happens
    assert await store.expired_runs() == []
    await store.expire_lease(mine, "me:1:a")
    assert await store.expired_runs() == [mine]
    assert await store.claim_run(mine, "next:1:d", LONG) is True


# --- recent_activity (the console's live updates) --------------------------------------------


async def test_recent_activity(store: Any) -> None:
    assert await store.recent_activity(utcnow()) == []
    old = await ended_run(store, RunStatus.SUCCEEDED, steps=("x",))
    await tick()
    since = utcnow()
    await tick()
    running = await make_run(store, owner="me:1:a", steps=("one", "two"), kind="llm")
    await store.step_running(running, "one", inputs={}, tries=2, started_at=utcnow())
    queued = [await make_run(store, steps=()) for _ in range(3)]
    await tick()
    recent = await ended_run(store, RunStatus.FAILED, steps=("y",))

    found = {r.run_id: (r, steps) for r, steps in await store.recent_activity(since)}
    assert set(found) == {running, recent, *queued}
    assert old not in found
    run, steps = found[running]
    assert run.status == RunStatus.RUNNING and run.steps == {}
    assert steps == {"one": ("llm", "running", 2, None), "two": ("llm", "pending", 0, None)}
    assert found[recent][1] == {"y": ("shell", "pending", 0, None)}
    assert found[queued[0]][1] == {}
    # a limit keeps every running run, and the newest of the others
    limited = [r.run_id for r, _ in await store.recent_activity(since, limit=1)]
    assert sorted(limited) == sorted([running, recent])
