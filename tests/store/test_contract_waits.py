"""The store contract, waiting steps (SPEC §16): a step recorded ``waiting`` with its timer,
its run let go of (``park_run``), and the wait ended exactly once, by a timer, a decision or
a signal, which wakes the run; cancelling a waiting run, retrying one, and ``take_next``
telling a woken run from a fresh one.

Every test runs on SQLite and PostgreSQL (see ``contract_support``), but
the last three, which race two stores over one PostgreSQL database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store import contract_support as contract
from store.contract_support import (
    EXPIRED,
    HASH,
    LONG,
    make_run,
    new_id,
    taken_over,
    tick,
)

from brain._clock import utcnow
from brain._errors import LeaseLost, RunConflict, RunNotFound, StepNotFound
from brain.results import RunStatus, StepStatus, TriggerData, WaitEnd, WaitTimer
from brain.store import Store

store = contract.store
contract_database = contract.contract_database

OWNER = "me:1:a"
#: When the tests' timers fall due, and a moment before and after.
DUE = datetime(2030, 1, 1, 9, tzinfo=UTC)
BEFORE, AFTER = DUE - timedelta(seconds=1), DUE + timedelta(seconds=1)
WOKE = WaitEnd(StepStatus.SUCCEEDED.value, DUE.isoformat())
TIMED_OUT = WaitEnd(StepStatus.FAILED.value, "no decision within 4h")
BY_TIMEOUT = WaitEnd(StepStatus.SUCCEEDED.value, "false",
                     {"approved": False, "comment": None, "by": "timeout"})


async def running_run(store: Any, *steps: tuple[str, str], workflow: str = "wf") -> str:
    """A run executed by ``OWNER``, its ``steps`` (name, kind) pending."""
    run_id = new_id()
    await store.create_run(run_id=run_id, workflow=workflow, definition_hash=HASH,
                           trigger=TriggerData(), step_rows=list(steps or [("nap", "sleep")]),
                           owner=OWNER, lease_seconds=LONG)
    return run_id


def waiting_for(kind: str, *, due: datetime | None = DUE, signal: str | None = None,
                key: str | None = None, prompt: str = "Go?") -> dict[str, Any]:
    """What a step of ``kind`` says it waits for (``StepResult.waiting_for``)."""
    at = None if due is None else due.isoformat()
    if kind == "sleep":
        return {"kind": "sleep", "until": at}
    if kind == "approval":
        return {"kind": "approval", "prompt": prompt, "timeout_at": at}
    return {"kind": "signal", "signal": signal, "key": key, "timeout_at": at}


async def wait(store: Any, run_id: str, name: str = "nap", *, kind: str = "sleep",
               due: datetime | None = DUE, end: WaitEnd = WOKE, signal: str | None = None,
               key: str | None = None, started_at: datetime | None = None,
               prompt: str = "Go?", owner: str | None = OWNER) -> dict[str, Any]:
    """Record step ``name`` waiting (with a timer ending it ``end`` at ``due``, unless
    ``due`` is ``None``); what it waits for."""
    what = waiting_for(kind, due=due, signal=signal, key=key, prompt=prompt)
    await store.step_waiting(run_id, name, inputs={"step": name}, tries=1,
                             started_at=started_at or utcnow(), waiting_for=what,
                             signal=signal, key=key,
                             timer=None if due is None else WaitTimer(due, end), owner=owner)
    return what


async def park(store: Any, run_id: str) -> None:
    """Let go of a run whose steps all wait (its executor, ``OWNER``, is done with it)."""
    assert await store.park_run(run_id, OWNER, await store.run_wakes(run_id)) is True


def without_at(decision: dict[str, Any] | None) -> dict[str, Any] | None:
    assert decision is not None
    at = decision.get("at")
    assert isinstance(at, str) and datetime.fromisoformat(at).tzinfo is not None
    return {k: v for k, v in decision.items() if k != "at"}


# --- step_waiting ---------------------------------------------------------------------------


async def test_step_waiting_records_a_waiting_step_and_its_timer(store: Any) -> None:
    run_id = await running_run(store, ("plan", "shell"), ("nap", "sleep"))
    other = await running_run(store)
    t0 = utcnow()
    what = await wait(store, run_id, started_at=t0)
    got = await store.get_run(run_id)
    assert got.status == RunStatus.RUNNING  # the run waits only once it is parked
    nap = got.steps["nap"]
    assert (nap.status, nap.waiting_for, nap.inputs, nap.tries, nap.started_at) == (
        StepStatus.WAITING, what, {"step": "nap"}, 1, t0)
    assert nap.output is nap.error is nap.decision is nap.ended_at is None
    assert got.steps["plan"].waiting_for is None
    assert await store.step_states(run_id) == {"plan": ("pending", 0), "nap": ("waiting", 1)}
    assert await store.step_outputs(run_id) == {}
    assert await store.waited_steps(run_id) == {"nap": ("waiting", None, None)}
    assert await store.waited_steps(other) == {}
    assert await store.next_timer() == DUE
    assert await store.next_timer(run_id) == DUE
    assert await store.next_timer(other) is None
    # waiting again (a resumed execution) replaces the step's timer
    later = DUE + timedelta(hours=1)
    await wait(store, run_id, due=later)
    assert await store.next_timer(run_id) == later
    # a step that waits for no timer (an approval without timeout) has none
    await wait(store, other, due=None)
    assert (await store.get_run(other)).steps["nap"].status == StepStatus.WAITING
    assert await store.next_timer(other) is None


async def test_step_waiting_under_a_lost_lease_changes_nothing(store: Any) -> None:
    run_id = await running_run(store)
    await taken_over(store, run_id)
    with pytest.raises(LeaseLost):
        await wait(store, run_id)
    assert (await store.get_run(run_id)).steps["nap"].status == StepStatus.PENDING
    assert await store.next_timer() is None
    # the thief may
    await wait(store, run_id, owner="thief:2:b")
    assert (await store.get_run(run_id)).steps["nap"].status == StepStatus.WAITING


async def test_a_due_time_is_an_instant(store: Any) -> None:
    run_id = await running_run(store)
    bucharest = timezone(timedelta(hours=2))
    await wait(store, run_id, due=DUE.astimezone(bucharest))
    found = await store.next_timer()
    assert found == DUE and found.utcoffset() == timedelta(0)
    assert await store.fire_due_timers(BEFORE.astimezone(bucharest)) == []
    assert await store.fire_due_timers(AFTER.astimezone(timezone(timedelta(hours=-5)))) == [
        (run_id, "nap")]


# --- park_run and run_wakes -------------------------------------------------------------------


async def test_park_run_lets_go_of_a_run_whose_steps_all_wait(store: Any) -> None:
    run_id = await running_run(store)
    await wait(store, run_id)
    assert await store.run_wakes(run_id) == 0
    assert await store.park_run(run_id, OWNER, 0) is True
    row = await store.run_row(run_id)
    assert (row.status, row.lease_owner, row.lease_expires_at) == ("waiting", None, None)
    got = await store.get_run(run_id)
    assert got.status == RunStatus.WAITING and got.ended_at is None
    assert got.steps["nap"].status == StepStatus.WAITING
    assert got.steps["nap"].waiting_for == waiting_for("sleep")
    assert [r.run_id for r in await store.list_runs(status="waiting")] == [run_id]
    # a waiting run is no longer running: nobody parks it again, claims it or renews a lease
    assert await store.park_run(run_id, OWNER, 0) is False
    assert await store.take_next(["wf"], "exec:1:b", LONG) is None
    assert await store.claim_run(run_id, "exec:1:b", LONG) is False
    ours, _ = await store.heartbeat(run_id, OWNER, LONG)
    assert ours is False
    assert await store.running_leases() == []
    assert await store.expired_runs() == []
    row = await store.run_row(run_id)
    assert (row.status, row.lease_owner, row.lease_expires_at) == ("waiting", None, None)


async def test_park_run_changes_nothing_unless_everything_is_as_the_owner_saw_it(
        store: Any) -> None:
    async def unchanged(run_id: str, owner: str, wakes: int) -> None:
        before = (await store.run_row(run_id), await store.get_run(run_id))
        assert await store.park_run(run_id, owner, wakes) is False
        assert (await store.run_row(run_id), await store.get_run(run_id)) == before

    # another owner's lease
    run_id = await running_run(store)
    await wait(store, run_id)
    await unchanged(run_id, "other:1:z", 0)
    await taken_over(store, run_id)
    await unchanged(run_id, OWNER, 0)
    assert await store.park_run(run_id, "thief:2:b", 0) is True
    # a wait ended since the owner read the wakes
    run_id = await running_run(store, ("a", "sleep"), ("b", "sleep"))
    await wait(store, run_id, "a", due=BEFORE)
    await wait(store, run_id, "b", due=AFTER)
    wakes = await store.run_wakes(run_id)
    assert await store.fire_due_timers(DUE, run_id=run_id) == [(run_id, "a")]
    await unchanged(run_id, OWNER, wakes)
    assert await store.park_run(run_id, OWNER, wakes + 1) is True
    # a cancel was asked for (the executor, alive, stops the run itself)
    run_id = await running_run(store)
    await wait(store, run_id)
    _, active = await store.request_cancel(run_id)
    assert active is True and (await store.run_row(run_id)).cancel_requested
    await unchanged(run_id, OWNER, 0)
    # a run that is not running: queued, ended, unknown
    queued = await make_run(store)
    await unchanged(queued, OWNER, 0)
    ended = await running_run(store)
    await store.finish_run(ended, RunStatus.SUCCEEDED, owner=OWNER)
    await unchanged(ended, OWNER, 0)
    assert await store.park_run(new_id(), OWNER, 0) is False


async def test_run_wakes_counts_the_waits_that_ended(store: Any) -> None:
    assert await store.run_wakes(new_id()) == -1
    run_id = await running_run(store, ("a", "sleep"), ("go", "approval"), ("ci", "wait_for"))
    assert await store.run_wakes(run_id) == 0
    await wait(store, run_id, "a", due=BEFORE)
    await wait(store, run_id, "go", kind="approval", due=AFTER, end=BY_TIMEOUT)
    await wait(store, run_id, "ci", kind="wait_for", signal="ci", key="k", due=None)
    assert await store.run_wakes(run_id) == 0
    await store.fire_due_timers(DUE)
    assert await store.run_wakes(run_id) == 1
    await store.decide(run_id, "go", approved=True)
    assert await store.run_wakes(run_id) == 2
    await store.send_signal("ci", "k", "done")
    assert await store.run_wakes(run_id) == 3
    # nothing left to end: nothing counted
    await store.fire_due_timers(AFTER + timedelta(days=1))
    await store.send_signal("ci", "k", "again")
    assert await store.run_wakes(run_id) == 3


# --- ending a wait ----------------------------------------------------------------------------


async def test_a_timer_ends_its_step_and_wakes_the_parked_run_into_the_queue(store: Any) -> None:
    run_id = await running_run(store, ("nap", "sleep"), ("after", "shell"))
    what = await wait(store, run_id)
    await park(store, run_id)
    assert await store.fire_due_timers(AFTER) == [(run_id, "nap")]
    got = await store.get_run(run_id)
    assert got.status == RunStatus.QUEUED
    nap = got.steps["nap"]
    assert (nap.status, nap.output, nap.error, nap.ended_at) == (
        StepStatus.SUCCEEDED, DUE.isoformat(), None, AFTER)
    assert nap.decision is None and nap.waiting_for == what
    assert got.steps["after"].status == StepStatus.PENDING
    assert await store.step_outputs(run_id) == {"nap": DUE.isoformat()}
    assert await store.waited_steps(run_id) == {"nap": ("succeeded", DUE.isoformat(), None)}
    assert await store.run_wakes(run_id) == 1
    assert await store.next_timer() is None  # the timer is gone
    assert await store.fire_due_timers(AFTER) == []
    assert await store.run_wakes(run_id) == 1
    assert await store.count_queued() == 1


async def test_a_timer_that_fails_its_step_stores_the_error(store: Any) -> None:
    run_id = await running_run(store, ("go", "approval"))
    await wait(store, run_id, "go", kind="approval", end=TIMED_OUT)
    await park(store, run_id)
    assert await store.fire_due_timers(DUE) == [(run_id, "go")]  # due at "now" is due
    go = (await store.get_run(run_id)).steps["go"]
    assert (go.status, go.output, go.error, go.decision) == (
        StepStatus.FAILED, None, "no decision within 4h", None)
    assert await store.waited_steps(run_id) == {"go": ("failed", None, "no decision within 4h")}
    assert (await store.get_run(run_id)).status == RunStatus.QUEUED
    # a timeout that gives the default decides the approval "by timeout"
    run_id = await running_run(store, ("go", "approval"))
    await wait(store, run_id, "go", kind="approval", end=BY_TIMEOUT)
    assert await store.fire_due_timers(AFTER) == [(run_id, "go")]
    go = (await store.get_run(run_id)).steps["go"]
    assert (go.status, go.output) == (StepStatus.SUCCEEDED, "false")
    assert without_at(go.decision) == {"approved": False, "comment": None, "by": "timeout"}
    with pytest.raises(RunConflict):
        await store.decide(run_id, "go", approved=True)


async def test_a_wait_that_ends_while_its_run_runs_leaves_the_run_running(store: Any) -> None:
    run_id = await running_run(store, ("nap", "sleep"), ("ci", "wait_for"))
    await wait(store, run_id, "nap")
    await wait(store, run_id, "ci", kind="wait_for", signal="ci", due=None)
    before = await store.run_row(run_id)
    assert await store.send_signal("ci", None, "green") == [(run_id, "ci")]
    assert await store.fire_due_timers(AFTER) == [(run_id, "nap")]
    row = await store.run_row(run_id)
    assert (row.status, row.lease_owner, row.lease_expires_at) == (
        "running", OWNER, before.lease_expires_at)
    assert await store.run_wakes(run_id) == 2
    assert await store.count_queued() == 0


async def test_fire_due_timers_takes_only_the_due_timers(store: Any) -> None:
    first, second, later = [await running_run(store) for _ in range(3)]
    await wait(store, first, due=BEFORE)
    await wait(store, second, due=DUE)
    await wait(store, later, due=AFTER)
    for run_id in (first, second, later):
        await park(store, run_id)
    assert await store.next_timer() == BEFORE
    assert await store.fire_due_timers(BEFORE - timedelta(microseconds=1)) == []
    assert sorted(await store.fire_due_timers(DUE)) == sorted([(first, "nap"), (second, "nap")])
    # the timer not yet due is untouched
    assert await store.next_timer() == AFTER
    got = await store.get_run(later)
    assert (got.status, got.steps["nap"].status) == (RunStatus.WAITING, StepStatus.WAITING)
    assert await store.run_wakes(later) == 0
    assert await store.fire_due_timers(AFTER) == [(later, "nap")]
    assert await store.next_timer() is None


async def test_fire_due_timers_of_one_run_and_a_limit(store: Any) -> None:
    mine = await running_run(store, ("a", "sleep"), ("b", "sleep"), ("c", "sleep"))
    other = await running_run(store)
    for name, due in (("a", BEFORE), ("b", DUE), ("c", AFTER)):
        await wait(store, mine, name, due=due)
    await wait(store, other, due=BEFORE - timedelta(hours=1))
    assert await store.next_timer() == BEFORE - timedelta(hours=1)
    assert await store.next_timer(mine) == BEFORE
    assert await store.fire_due_timers(AFTER, run_id=mine, limit=1) == [(mine, "a")]
    assert await store.next_timer(other) == BEFORE - timedelta(hours=1)  # not taken
    assert sorted(await store.fire_due_timers(AFTER, run_id=mine)) == [(mine, "b"), (mine, "c")]
    assert await store.next_timer(mine) is None
    assert await store.fire_due_timers(AFTER, run_id=new_id()) == []
    assert await store.fire_due_timers(AFTER) == [(other, "nap")]


async def test_a_timer_whose_step_no_longer_waits_is_dropped(store: Any) -> None:
    run_id = await running_run(store, ("nap", "sleep"), ("later", "shell"))
    await wait(store, run_id)
    # the executor ended the run's unfinished steps (a definition change, say)
    await store.end_unfinished_steps(run_id, pending=StepStatus.SKIPPED, error="stop",
                                     owner=OWNER)
    nap = (await store.get_run(run_id)).steps["nap"]
    assert (nap.status, nap.error) == (StepStatus.CANCELLED, "stop")
    assert nap.ended_at is not None
    assert (await store.get_run(run_id)).steps["later"].status == StepStatus.SKIPPED
    assert await store.fire_due_timers(AFTER) == []
    assert await store.next_timer() is None  # taken all the same: it fires no more
    assert (await store.get_run(run_id)).steps["nap"].status == StepStatus.CANCELLED
    assert await store.run_wakes(run_id) == 0
    assert (await store.run_row(run_id)).status == "running"


# --- decide ---------------------------------------------------------------------------------


async def test_decide_approves_a_waiting_approval(store: Any) -> None:
    run_id = await running_run(store, ("go", "approval"), ("apply", "shell"))
    what = await wait(store, run_id, "go", kind="approval", end=BY_TIMEOUT)
    await park(store, run_id)
    decision = await store.decide(run_id[:10], "go", approved=True, comment="ship it ✓",
                                  by="console")
    assert without_at(decision) == {"approved": True, "comment": "ship it ✓", "by": "console"}
    got = await store.get_run(run_id)
    go = got.steps["go"]
    assert (go.status, go.output, go.error) == (StepStatus.SUCCEEDED, "true", None)
    assert go.decision == decision and go.waiting_for == what
    assert go.ended_at is not None
    assert got.status == RunStatus.QUEUED
    assert await store.run_wakes(run_id) == 1
    assert await store.next_timer() is None  # its timeout is gone
    assert await store.fire_due_timers(AFTER) == []
    assert (await store.get_run(run_id)).steps["go"].output == "true"


async def test_decide_rejects(store: Any) -> None:
    run_id = await running_run(store, ("go", "approval"))
    await wait(store, run_id, "go", kind="approval", due=None)
    decision = await store.decide(run_id, "go", approved=False, by="cli")
    assert without_at(decision) == {"approved": False, "comment": None, "by": "cli"}
    go = (await store.get_run(run_id)).steps["go"]
    assert (go.status, go.output, go.decision) == (StepStatus.SUCCEEDED, "false", decision)
    assert (await store.get_run(run_id)).status == RunStatus.RUNNING  # never parked
    assert await store.run_wakes(run_id) == 1


async def test_a_second_decision_is_a_conflict(store: Any) -> None:
    run_id = await running_run(store, ("go", "approval"))
    await wait(store, run_id, "go", kind="approval")
    await park(store, run_id)
    first = await store.decide(run_id, "go", approved=True, comment="yes")
    with pytest.raises(RunConflict, match="already decided"):
        await store.decide(run_id, "go", approved=False, comment="no")
    go = (await store.get_run(run_id)).steps["go"]
    assert (go.output, go.decision) == ("true", first)
    assert await store.run_wakes(run_id) == 1


async def test_decide_refuses_what_it_cannot_decide(store: Any) -> None:
    run_id = await running_run(store, ("go", "approval"), ("nap", "sleep"), ("later", "approval"))
    await wait(store, run_id, "go", kind="approval")
    await wait(store, run_id, "nap")
    with pytest.raises(RunNotFound):
        await store.decide(new_id(), "go", approved=True)
    with pytest.raises(StepNotFound):
        await store.decide(run_id, "nope", approved=True)
    with pytest.raises(RunConflict, match="not waiting"):  # an approval not reached yet
        await store.decide(run_id, "later", approved=True)
    with pytest.raises(RunConflict) as not_an_approval:
        await store.decide(run_id, "nap", approved=True)
    assert "already decided" not in str(not_an_approval.value)
    got = await store.get_run(run_id)
    assert [s.status for s in got.steps.values()] == [
        StepStatus.WAITING, StepStatus.WAITING, StepStatus.PENDING]
    assert await store.run_wakes(run_id) == 0
    # an approval that ended without a decision (its run cancelled) is not waiting either
    parked = await running_run(store, ("go", "approval"))
    await wait(store, parked, "go", kind="approval")
    await park(store, parked)
    await store.request_cancel(parked)
    with pytest.raises(RunConflict, match="not waiting"):
        await store.decide(parked, "go", approved=True)
    assert (await store.get_run(parked)).steps["go"].decision is None


# --- send_signal --------------------------------------------------------------------------------


async def test_send_signal_ends_every_step_waiting_for_it_with_the_same_key(store: Any) -> None:
    a, b = [await running_run(store, ("ci", "wait_for"), ("ci2", "wait_for")) for _ in range(2)]
    c = await running_run(store, ("ci", "wait_for"), ("ci2", "sleep"))
    runs = [a, b, c]
    await wait(store, a, "ci", kind="wait_for", signal="ci", key="abc", due=None)
    await wait(store, a, "ci2", kind="wait_for", signal="deploy", key="abc", due=None)
    await wait(store, b, "ci", kind="wait_for", signal="ci", key="abc", end=TIMED_OUT)
    await wait(store, b, "ci2", kind="wait_for", signal="ci", key=None, due=None)
    await wait(store, c, "ci", kind="wait_for", signal="ci", key="other", due=None)
    # a step of another kind is never ended by a signal, whatever it was recorded with
    await wait(store, c, "ci2", kind="sleep", signal="ci", key="abc")
    for run_id in runs:
        await park(store, run_id)

    assert await store.send_signal("ci", "nope", "x") == []
    resumed = await store.send_signal("ci", "abc", "body ✓\n{\"a\": 1}", by="cli")
    assert sorted(resumed) == sorted([(a, "ci"), (b, "ci")])
    for run_id in (a, b):
        got = await store.get_run(run_id)
        ci = got.steps["ci"]
        assert (ci.status, ci.output, ci.error) == (StepStatus.SUCCEEDED, "body ✓\n{\"a\": 1}",
                                                    None)
        assert without_at(ci.decision) == {"signal": "ci", "key": "abc", "by": "cli"}
        assert got.status == RunStatus.QUEUED
        assert await store.run_wakes(run_id) == 1
    assert await store.next_timer(b) is None  # b's timeout went with its wait
    assert (await store.get_run(a)).steps["ci2"].status == StepStatus.WAITING
    assert (await store.get_run(b)).steps["ci2"].status == StepStatus.WAITING
    got = await store.get_run(c)
    assert [s.status for s in got.steps.values()] == [StepStatus.WAITING] * 2
    assert got.status == RunStatus.WAITING and await store.run_wakes(c) == 0
    # sent again: nothing waits for it any more
    assert await store.send_signal("ci", "abc", "again") == []
    assert (await store.get_run(a)).steps["ci"].output == "body ✓\n{\"a\": 1}"
    # no key matches only the steps that wait without one
    assert await store.send_signal("ci", None) == [(b, "ci2")]
    assert (await store.get_run(b)).steps["ci2"].output == ""
    assert await store.send_signal("ci", "other", "o") == [(c, "ci")]
    assert await store.send_signal("deploy", "abc", "d") == [(a, "ci2")]
    assert await store.run_wakes(b) == 2


# --- what waits -------------------------------------------------------------------------------


async def test_count_waiting_counts_waiting_runs_by_workflow_and_kind(store: Any) -> None:
    assert await store.count_waiting() == []
    both = await running_run(store, ("nap", "sleep"), ("go", "approval"), ("x", "shell"))
    await wait(store, both, "nap")
    await wait(store, both, "go", kind="approval", due=None)
    await park(store, both)
    for _ in range(2):
        run_id = await running_run(store, ("go", "approval"))
        await wait(store, run_id, "go", kind="approval", due=None)
        await park(store, run_id)
    other = await running_run(store, ("ci", "wait_for"), workflow="other")
    await wait(store, other, "ci", kind="wait_for", signal="s", due=None)
    await park(store, other)
    # a run whose step waits but that still runs (not parked) is not counted
    running = await running_run(store)
    await wait(store, running)
    assert sorted(await store.count_waiting()) == [
        ("other", "wait_for", 1), ("wf", "approval", 3), ("wf", "sleep", 1)]
    # a woken run is queued, no longer waiting (though its approval still waits)
    assert sorted(await store.fire_due_timers(AFTER)) == sorted([(both, "nap"),
                                                                (running, "nap")])
    assert (await store.run_row(running)).status == "running"
    assert sorted(await store.count_waiting()) == [("other", "wait_for", 1), ("wf", "approval", 2)]


async def test_decisions_waiting_lists_the_waiting_approvals_oldest_first(store: Any) -> None:
    assert await store.decisions_waiting() == []
    t0 = utcnow()
    found = []
    for n in range(3):
        run_id = await running_run(store, ("go", "approval"), ("nap", "sleep"),
                                   workflow=f"wf{n}")
        await wait(store, run_id, "go", kind="approval", prompt=f"Apply plan {n}?",
                   due=None if n == 1 else DUE, started_at=t0 - timedelta(minutes=n))
        await wait(store, run_id, "nap")
        found.append(run_id)
    await park(store, found[0])  # parked or not, an approval waits for a decision
    listed = await store.decisions_waiting()
    assert listed == [
        {"run_id": found[n], "workflow": f"wf{n}", "step": "go", "prompt": f"Apply plan {n}?",
         "since": t0 - timedelta(minutes=n), "timeout_at": None if n == 1 else DUE.isoformat()}
        for n in (2, 1, 0)]
    assert [d["run_id"] for d in await store.decisions_waiting(limit=2)] == [found[2], found[1]]
    await store.decide(found[1], "go", approved=True)
    assert [d["run_id"] for d in await store.decisions_waiting()] == [found[2], found[0]]


# --- take_next ---------------------------------------------------------------------------------


async def test_take_next_says_whether_a_run_was_woken(store: Any) -> None:
    assert await store.take_next([], "exec:1:b", LONG) is None
    assert await store.take_next(["wf"], "exec:1:b", LONG) is None
    parked = await running_run(store)
    started = (await store.run_row(parked)).started_at
    assert started is not None
    await wait(store, parked)
    await park(store, parked)
    await tick()
    fresh = await make_run(store)
    assert await store.take_next(["wf"], "exec:1:b", LONG) == (fresh, False)
    assert await store.take_next(["wf"], "exec:1:b", LONG) is None  # still waiting
    await store.fire_due_timers(AFTER)
    assert await store.take_next(["other"], "exec:1:b", LONG) is None
    assert await store.take_next(["other", "wf"], "exec:1:b", LONG) == (parked, True)
    row = await store.run_row(parked)
    assert (row.status, row.lease_owner, row.started_at) == ("running", "exec:1:b", started)
    assert row.lease_expires_at is not None and row.lease_expires_at > utcnow()
    # the step that ended keeps its record for the new executor
    assert await store.step_outputs(parked) == {"nap": DUE.isoformat()}
    # claim_next is take_next without the flag
    again = await running_run(store)
    await wait(store, again)
    await park(store, again)
    assert await store.claim_next(["wf"], "exec:1:b", LONG) is None
    await store.fire_due_timers(AFTER)
    assert await store.claim_next(["wf"], "exec:1:b", LONG) == again


# --- cancel, end_unfinished_steps, retry_run -------------------------------------------------------


async def test_cancelling_a_waiting_run_cancels_it_at_once(store: Any) -> None:
    run_id = await running_run(store, ("done", "shell"), ("nap", "sleep"), ("go", "approval"),
                               ("ci", "wait_for"), ("after", "shell"))
    await store.step_finished(run_id, "done", status=StepStatus.SUCCEEDED, tries=1,
                              ended_at=utcnow(), output="kept", owner=OWNER)
    await wait(store, run_id, "nap")
    await wait(store, run_id, "go", kind="approval", due=AFTER, end=TIMED_OUT)
    await wait(store, run_id, "ci", kind="wait_for", signal="ci", key="k", due=None)
    await park(store, run_id)
    result, active = await store.request_cancel(run_id)
    assert active is True and result.status == RunStatus.CANCELLED
    got = await store.get_run(run_id)
    assert (got.status, got.error) == (RunStatus.CANCELLED, "cancelled")
    assert got.ended_at is not None
    assert {n: s.status for n, s in got.steps.items()} == {
        "done": StepStatus.SUCCEEDED, "nap": StepStatus.CANCELLED, "go": StepStatus.CANCELLED,
        "ci": StepStatus.CANCELLED, "after": StepStatus.CANCELLED}
    assert got.steps["nap"].ended_at is not None
    row = await store.run_row(run_id)
    assert (row.lease_owner, row.lease_expires_at) == (None, None)
    # nothing ends its waits any more, nothing wakes it
    assert await store.next_timer() is None
    assert await store.fire_due_timers(AFTER + timedelta(days=1)) == []
    assert await store.send_signal("ci", "k", "late") == []
    assert await store.run_wakes(run_id) == 0
    assert await store.count_waiting() == []
    assert await store.decisions_waiting() == []
    assert (await store.get_run(run_id)).steps == got.steps
    assert await store.take_next(["wf"], "exec:1:b", LONG) is None
    assert await store.request_cancel(run_id) == (result, False)


async def test_cancelling_a_run_whose_executor_is_gone_ends_its_waits_too(store: Any) -> None:
    run_id = await make_run(store, owner=OWNER, lease_seconds=EXPIRED, steps=("nap",),
                            kind="sleep")
    await wait(store, run_id)  # its executor died while the step waited, before parking it
    result, active = await store.request_cancel(run_id)
    assert active is True and result.status == RunStatus.CANCELLED
    assert (await store.get_run(run_id)).steps["nap"].status == StepStatus.CANCELLED
    assert await store.next_timer() is None
    assert await store.fire_due_timers(AFTER) == []
    assert await store.run_wakes(run_id) == 0


async def test_failing_a_woken_queued_run_ends_the_waits_it_still_has(store: Any) -> None:
    run_id = await running_run(store, ("nap", "sleep"), ("go", "approval"))
    await wait(store, run_id, "nap")
    await wait(store, run_id, "go", kind="approval", due=AFTER, end=TIMED_OUT)
    await park(store, run_id)
    assert await store.fire_due_timers(DUE) == [(run_id, "nap")]  # woken, "go" still waits
    assert await store.fail_queued("wf", "workflow not loaded") == [run_id]
    got = await store.get_run(run_id)
    assert got.status == RunStatus.FAILED
    assert got.steps["nap"].status == StepStatus.SUCCEEDED
    assert got.steps["go"].status != StepStatus.WAITING
    assert await store.decisions_waiting() == []
    assert await store.next_timer() is None
    with pytest.raises(RunConflict):
        await store.decide(run_id, "go", approved=True)
    assert await store.run_wakes(run_id) == 1


async def test_end_unfinished_steps_cancels_waiting_steps(store: Any) -> None:
    run_id = await running_run(store, ("go", "approval"), ("next", "shell"))
    await wait(store, run_id, "go", kind="approval", due=None)
    await store.end_unfinished_steps(run_id, pending=StepStatus.FAILED, error="halted",
                                     owner=OWNER)
    go, after = (await store.get_run(run_id)).steps.values()
    assert (go.status, go.error, go.output, go.decision) == (
        StepStatus.CANCELLED, "halted", None, None)
    assert (after.status, after.error) == (StepStatus.FAILED, "halted")
    assert await store.waited_steps(run_id) == {"go": ("cancelled", None, "halted")}
    with pytest.raises(RunConflict, match="not waiting"):
        await store.decide(run_id, "go", approved=True)


async def test_retry_run_keeps_the_waits_that_succeeded(store: Any) -> None:
    run_id = await running_run(store, ("go", "approval"), ("nap", "sleep"), ("ci", "wait_for"))
    what = await wait(store, run_id, "go", kind="approval", prompt="Ship?")
    await wait(store, run_id, "nap", end=TIMED_OUT)
    await wait(store, run_id, "ci", kind="wait_for", signal="ci", due=None)
    decision = await store.decide(run_id, "go", approved=True, comment="ok")
    assert await store.fire_due_timers(AFTER) == [(run_id, "nap")]
    await store.finish_run(run_id, RunStatus.FAILED, "step 'nap' failed: no decision within 4h",
                           owner=OWNER)
    retry = await store.retry_run(run_id)
    got = await store.get_run(retry)
    go, nap, ci = got.steps.values()
    assert (go.status, go.output, go.decision, go.waiting_for) == (
        StepStatus.SUCCEEDED, "true", decision, what)
    for step in (nap, ci):  # the failed wait and the cancelled one come back pending
        assert (step.status, step.output, step.error, step.decision, step.tries) == (
            StepStatus.PENDING, None, None, None, 0)
    assert await store.run_wakes(retry) == 0
    # the retry is a fresh run: nothing woke it
    assert await store.take_next(["wf"], "exec:1:b", LONG) == (retry, False)
    assert await store.waited_steps(retry) == {"go": ("succeeded", "true", None)}


# --- every ending of one wait, in any order: at most one wins -----------------------------------

ENDERS = st.sampled_from([("timer", True), ("timer", False), ("decide", True),
                          ("decide", False), ("signal", "k"), ("signal", "other"),
                          ("signal", None), ("cancel", None)])


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(kind=st.sampled_from(["approval", "wait_for"]), parked=st.booleans(),
       timed_out=st.sampled_from([TIMED_OUT, BY_TIMEOUT]),
       enders=st.lists(ENDERS, max_size=7))
async def test_a_wait_ends_once_whatever_ends_it(store: Any, kind: str, parked: bool,
                                                 timed_out: WaitEnd,
                                                 enders: list[tuple[str, Any]]) -> None:
    """A waiting step (with a timer) met by timers due and not, decisions, signals with its
    key and others, and cancels, in any order: the first ender that applies ends it, no
    other, and only that one wakes the run."""
    run_id = await running_run(store, ("w", kind))
    signal = f"sig-{run_id}"  # the store is shared by the examples: a signal of its own
    await wait(store, run_id, "w", kind=kind, signal=signal, key="k", end=timed_out)
    if parked:
        await park(store, run_id)
    # the model: the step waits until the first ender that applies ends it
    won: tuple[str, str | None, str | None, dict[str, Any] | None] | None = None
    cancelled, run_status = False, "waiting" if parked else "running"
    successes = 0
    for what, arg in enders:
        waiting = won is None and not cancelled
        if what == "timer":
            ended = await store.fire_due_timers(AFTER if arg else BEFORE, run_id=run_id)
            assert ended == ([(run_id, "w")] if arg and waiting else [])
            if ended:
                ok = timed_out.status == "succeeded"
                won = (timed_out.status, timed_out.text if ok else None,
                       None if ok else timed_out.text, timed_out.decision)
        elif what == "decide":
            if waiting and kind == "approval":
                decision = await store.decide(run_id, "w", approved=arg, by="api")
                ended = [(run_id, "w")]
                won = ("succeeded", "true" if arg else "false", None, without_at(decision))
            else:
                with pytest.raises(RunConflict):
                    await store.decide(run_id, "w", approved=arg)
                ended = []
        elif what == "signal":
            ended = await store.send_signal(signal, arg, f"body {arg}", by="api")
            if waiting and kind == "wait_for" and arg == "k":
                assert ended == [(run_id, "w")]
                won = ("succeeded", f"body {arg}", None,
                       {"signal": signal, "key": "k", "by": "api"})
            else:
                assert ended == []
        else:
            ended = []
            result, _ = await store.request_cancel(run_id)
            if run_status in ("waiting", "queued"):
                run_status, cancelled = "cancelled", cancelled or waiting
            assert result.status == run_status
        if ended:
            successes += 1
            if run_status == "waiting":
                run_status = "queued"
        assert await store.run_wakes(run_id) == successes <= 1
        assert (await store.run_row(run_id)).status == run_status

    step = (await store.get_run(run_id)).steps["w"]
    if won is not None:
        status, output, error, decision = won
        assert (step.status, step.output, step.error) == (status, output, error)
        assert (None if step.decision is None else without_at(step.decision)) == decision
    else:
        assert step.status == (StepStatus.CANCELLED if cancelled else StepStatus.WAITING)
        assert step.output is step.decision is None
    assert (await store.next_timer(run_id) is None) == (step.status != StepStatus.WAITING)


# --- two servers taking the same due timers (PostgreSQL) --------------------------------------


async def test_two_servers_end_each_due_timer_exactly_once(pg_url: str) -> None:
    workflow = f"timers-{new_id()[:8]}"
    due = utcnow() - timedelta(minutes=1)
    setup = await Store(pg_url).open()
    try:
        ours = []
        for _ in range(100):
            run_id = await running_run(setup, workflow=workflow)
            await wait(setup, run_id, due=due)
            await park(setup, run_id)
            ours.append((run_id, "nap"))
    finally:
        await setup.close()

    servers: Sequence[Store] = [await Store(pg_url).open() for _ in range(2)]
    try:
        taken: list[list[tuple[str, str]]] = [[], []]
        for _ in range(30):
            rounds = await asyncio.gather(*(s.fire_due_timers(limit=9) for s in servers))
            for got, more in zip(taken, rounds, strict=True):
                got.extend(more)
            if not any(rounds):
                break
        everything = taken[0] + taken[1]
        assert len(everything) == len(set(everything))  # nothing ended twice
        mine = [t for t in everything if t in set(ours)]
        assert sorted(mine) == sorted(ours)  # every one ended
        assert all(taken), "both servers took some (else the race was not run)"
        store = servers[0]
        for run_id, _ in ours:
            assert await store.run_wakes(run_id) == 1
        assert {r.status for r in await store.list_runs(workflow=workflow, limit=1000)} == {
            RunStatus.QUEUED}
        assert all([await store.next_timer(run_id) is None for run_id, _ in ours])
    finally:
        for server in servers:
            await server.close()


@pytest.fixture
def empty_pg(fresh_pg_url: str) -> str:
    """A PostgreSQL database of the test's own at the current schema (its rows come back in
    the order they were written)."""
    from support import upgraded_schema

    asyncio.run(upgraded_schema(fresh_pg_url))
    return fresh_pg_url


async def warmed(url: str) -> Store:
    """An open store whose pooled connection is already made (its first transaction does not
    wait for a connection)."""
    opened = await Store(url).open()
    await opened.send_signal(f"warm-up-{new_id()}")
    return opened


async def test_decisions_racing_their_timeouts_end_each_approval_once(empty_pg: str) -> None:
    due = utcnow() - timedelta(minutes=1)
    setup = await Store(empty_pg).open()
    try:
        runs = []
        for n in range(60):
            run_id = await running_run(setup, ("go", "approval"))
            await wait(setup, run_id, "go", kind="approval", due=due + timedelta(seconds=n),
                       end=TIMED_OUT)
            await park(setup, run_id)
            runs.append(run_id)
    finally:
        await setup.close()
    server, api = await warmed(empty_pg), await warmed(empty_pg)
    decided: dict[str, bool] = {}

    async def decide_all() -> None:
        await asyncio.sleep(0.02)  # the server has taken its batch: it works through it
        for run_id in reversed(runs):  # the approvals it comes to last, first
            try:
                await api.decide(run_id, "go", approved=True)
                decided[run_id] = True
            except RunConflict:
                decided[run_id] = False

    try:
        fired, _ = await asyncio.gather(server.fire_due_timers(), decide_all())
        by_timer = {run_id for run_id, _ in fired}
        for run_id in runs:
            assert decided[run_id] != (run_id in by_timer), run_id  # exactly one ended it
            assert await server.run_wakes(run_id) == 1
            go = (await server.get_run(run_id)).steps["go"]
            assert go.status == (StepStatus.SUCCEEDED if decided[run_id] else StepStatus.FAILED)
    finally:
        await server.close()
        await api.close()


async def test_two_servers_taking_timers_of_the_same_runs_end_each_once(empty_pg: str) -> None:
    """Runs with two timers each, the earlier half of the timers written in one order and
    the later half in another: each server's batch holds one timer of every run."""
    base = utcnow() - timedelta(hours=1)
    n = 40
    setup = await Store(empty_pg).open()
    try:
        runs = [await running_run(setup, ("a", "sleep"), ("b", "sleep")) for _ in range(n)]
        for i in range(0, n, 2):
            x, y = runs[i], runs[i + 1]
            for run_id, name, at in ((x, "a", i), (y, "b", n + i), (y, "a", i + 1),
                                     (x, "b", n + i + 1)):
                await wait(setup, run_id, name, due=base + timedelta(seconds=at))
        for run_id in runs:
            await park(setup, run_id)
    finally:
        await setup.close()
    servers = [await warmed(empty_pg) for _ in range(2)]
    try:
        taken = await asyncio.gather(*(s.fire_due_timers(limit=n) for s in servers))
        assert sorted(t for got in taken for t in got) == sorted(
            (r, name) for r in runs for name in ("a", "b"))
        for run_id in runs:
            assert await servers[0].run_wakes(run_id) == 2
    finally:
        for server in servers:
            await server.close()
