"""The store contract, steps: the runner's step writes and the reads a resume needs.

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from store import contract_support as contract
from store.contract_support import OTHER_HASH, finish_step, make_run, new_id

from brain._clock import utcnow
from brain.results import StepStatus
from brain.store.base import StepProcess

store = contract.store
contract_database = contract.contract_database

OWNER = "me:1:a"


async def running_run(store: Any, *steps: str) -> str:
    return await make_run(store, owner=OWNER, steps=steps or ("one", "two", "three"))


# --- step_running and step_finished --------------------------------------------------------------


async def test_step_running_then_step_finished(store: Any) -> None:
    run_id = await running_run(store)
    t0 = utcnow()
    inputs = {"command": "echo hi", "env": {"K": "***"}, "n": [1, 2.5, None, True]}
    await store.step_running(run_id, "one", inputs=inputs, tries=1, started_at=t0, owner=OWNER)
    step = (await store.get_run(run_id)).steps["one"]
    assert (step.status, step.inputs, step.tries) == (StepStatus.RUNNING, inputs, 1)
    assert step.started_at == t0 and step.ended_at is None
    assert step.output is step.error is None
    assert await store.step_states(run_id) == {"one": ("running", 1), "two": ("pending", 0),
                                               "three": ("pending", 0)}
    assert await store.step_outputs(run_id) == {}

    t1 = t0 + timedelta(seconds=2)
    await store.step_finished(run_id, "one", status=StepStatus.SUCCEEDED, tries=2, ended_at=t1,
                              output="hi ✓\nthere", stderr="warning: x", owner=OWNER)
    step = (await store.get_run(run_id)).steps["one"]
    assert (step.status, step.output, step.stderr, step.error, step.tries) == (
        StepStatus.SUCCEEDED, "hi ✓\nthere", "warning: x", None, 2)
    assert step.inputs == inputs  # kept from step_running
    assert (step.started_at, step.ended_at) == (t0, t1)
    assert await store.step_outputs(run_id) == {"one": "hi ✓\nthere"}


async def test_a_quick_step_is_recorded_once_finished(store: Any) -> None:
    run_id = await running_run(store)
    t0 = utcnow()
    await store.step_finished(run_id, "one", status=StepStatus.SUCCEEDED, tries=1, ended_at=t0,
                              output="", inputs={"a": "b"}, started_at=t0, owner=OWNER)
    await store.step_finished(run_id, "two", status=StepStatus.FAILED, tries=3, ended_at=t0,
                              error="command failed with exit code 1", stderr="boom",
                              inputs={"argv": ["false"]})
    await store.step_finished(run_id, "three", status=StepStatus.SUCCEEDED, tries=1,
                              ended_at=t0, output=None, started_at=t0)
    one, two, three = (await store.get_run(run_id)).steps.values()
    assert (one.status, one.output, one.inputs, one.started_at, one.ended_at) == (
        StepStatus.SUCCEEDED, "", {"a": "b"}, t0, t0)
    assert (two.status, two.error, two.stderr, two.tries, two.inputs) == (
        StepStatus.FAILED, "command failed with exit code 1", "boom", 3, {"argv": ["false"]})
    assert two.started_at is None and two.output is None
    assert (three.status, three.output, three.inputs, three.started_at) == (
        StepStatus.SUCCEEDED, None, {}, t0)
    # a succeeded step's output is "" when it printed nothing (or was never given one)
    assert await store.step_outputs(run_id) == {"one": "", "three": ""}
    assert await store.step_states(run_id) == {"one": ("succeeded", 1), "two": ("failed", 3),
                                               "three": ("succeeded", 1)}


async def test_a_step_tried_again_starts_afresh(store: Any) -> None:
    run_id = await running_run(store)
    t0 = utcnow()
    await store.step_finished(run_id, "one", status=StepStatus.FAILED, tries=1, ended_at=t0,
                              error="flaky", inputs={"try": 1}, started_at=t0, owner=OWNER)
    t1 = t0 + timedelta(seconds=1)
    await store.step_running(run_id, "one", inputs={"try": 2}, tries=2, started_at=t1,
                             owner=OWNER)
    step = (await store.get_run(run_id)).steps["one"]
    assert (step.status, step.tries, step.inputs, step.started_at) == (
        StepStatus.RUNNING, 2, {"try": 2}, t1)
    assert step.ended_at is None and step.error is None


# --- several steps at once ---------------------------------------------------------------


async def test_steps_ended_ends_several_steps_at_once(store: Any) -> None:
    run_id = await running_run(store, "one", "two", "three", "four")
    await finish_step(store, run_id, "one", "out", owner=OWNER)
    await store.steps_ended(run_id, ["two", "three"], StepStatus.SKIPPED, owner=OWNER)
    await store.steps_ended(run_id, ["four"], StepStatus.CANCELLED, error="cancelled")
    await store.steps_ended(run_id, [], StepStatus.FAILED, owner=OWNER)  # nothing to do
    await store.steps_ended(run_id, iter(()), StepStatus.FAILED)
    one, two, three, four = (await store.get_run(run_id)).steps.values()
    assert (one.status, one.output) == (StepStatus.SUCCEEDED, "out")
    for step in (two, three):
        assert (step.status, step.error, step.output) == (StepStatus.SKIPPED, None, None)
        assert step.ended_at is not None
    assert (four.status, four.error) == (StepStatus.CANCELLED, "cancelled")
    # a step already ended can be ended again (a skipped one cancelled)
    await store.steps_ended(run_id, iter(["two"]), StepStatus.FAILED, "upstream failed")
    two = (await store.get_run(run_id)).steps["two"]
    assert (two.status, two.error) == (StepStatus.FAILED, "upstream failed")


async def test_end_unfinished_steps(store: Any) -> None:
    for pending, pending_error in ((StepStatus.SKIPPED, None), (StepStatus.CANCELLED, "stop"),
                                   (StepStatus.FAILED, "stop")):
        run_id = await running_run(store, "done", "bad", "busy", "waiting")
        await finish_step(store, run_id, "done", "kept", owner=OWNER)
        await finish_step(store, run_id, "bad", "", status=StepStatus.FAILED, owner=OWNER)
        await store.step_running(run_id, "busy", inputs={}, tries=1, started_at=utcnow(),
                                 owner=OWNER)
        await store.end_unfinished_steps(run_id, pending=pending, error="stop", owner=OWNER)
        done, bad, busy, waiting = (await store.get_run(run_id)).steps.values()
        assert (done.status, done.output, bad.status) == (StepStatus.SUCCEEDED, "kept",
                                                          StepStatus.FAILED)
        assert (busy.status, busy.error) == (StepStatus.CANCELLED, "stop")
        assert (waiting.status, waiting.error) == (pending, pending_error)
        assert busy.ended_at is not None and waiting.ended_at is not None
    # a run with nothing unfinished: nothing to do
    await store.end_unfinished_steps(run_id, pending=StepStatus.SKIPPED, owner=OWNER)


async def test_reset_steps_puts_unfinished_steps_back_to_pending(store: Any) -> None:
    run_id = await running_run(store)
    await finish_step(store, run_id, "one", "kept", owner=OWNER)
    await finish_step(store, run_id, "two", "half", status=StepStatus.FAILED, tries=2, owner=OWNER)
    await store.steps_ended(run_id, ["two"], StepStatus.FAILED, "boom", owner=OWNER)
    await store.step_running(run_id, "three", inputs={}, tries=1, started_at=utcnow(), owner=OWNER)
    await store.reset_steps(run_id, ["two", "three"], owner=OWNER)
    await store.reset_steps(run_id, [], owner=OWNER)
    one, two, three = (await store.get_run(run_id)).steps.values()
    assert (one.status, one.output) == (StepStatus.SUCCEEDED, "kept")
    for step in (two, three):
        assert (step.status, step.output, step.error, step.ended_at) == (
            StepStatus.PENDING, None, None, None)
    # tries are kept: a resumed step's next try is counted on from them
    assert await store.step_states(run_id) == {"one": ("succeeded", 1), "two": ("pending", 2),
                                               "three": ("pending", 1)}
    assert await store.step_outputs(run_id) == {"one": "kept"}


async def test_add_steps_adds_for_each_instances_in_item_order(store: Any) -> None:
    run_id = await running_run(store, "fetch", "review", "save")
    rows = [(f"review[{i}]", "llm", 1) for i in (10, 2, 0, 1)]
    await store.add_steps(run_id, rows, owner=OWNER)
    await store.add_steps(run_id, [], owner=OWNER)
    assert list((await store.get_run(run_id)).steps) == [
        "fetch", "review", "review[0]", "review[1]", "review[2]", "review[10]", "save"]
    step = (await store.get_run(run_id)).steps["review[2]"]
    assert (step.kind, step.status, step.tries) == ("llm", StepStatus.PENDING, 0)
    # adding what a run has already changes nothing (a resume adds them again)
    await finish_step(store, run_id, "review[0]", "seen", owner=OWNER)
    await store.add_steps(run_id, [("review[0]", "shell", 1), ("review[3]", "llm", 1)])
    got = (await store.get_run(run_id)).steps
    assert (got["review[0]"].kind, got["review[0]"].output) == ("llm", "seen")
    assert list(got)[-3:] == ["review[3]", "review[10]", "save"]


# --- restamp_run ------------------------------------------------------------------------------------


async def test_restamp_run_gives_a_just_taken_run_another_definition(store: Any) -> None:
    run_id = await make_run(store, steps=("old", "steps"))
    assert await store.claim_run(run_id, OWNER, contract.LONG)
    assert await store.restamp_run(run_id, OTHER_HASH, [("new", "llm"), ("ones", "step")],
                                   owner=OWNER) is True
    assert (await store.run_row(run_id)).definition_hash == OTHER_HASH
    got = (await store.get_run(run_id)).steps
    assert [(s.name, s.kind, s.status, s.tries) for s in got.values()] == [
        ("new", "llm", StepStatus.PENDING, 0), ("ones", "step", StepStatus.PENDING, 0)]


async def test_restamp_run_changes_nothing_once_a_step_has_started(store: Any) -> None:
    run_id = await running_run(store, "one", "two")
    await store.step_running(run_id, "two", inputs={}, tries=1, started_at=utcnow(), owner=OWNER)
    await store.reset_steps(run_id, ["two"], owner=OWNER)  # pending again, but tried once
    before = await store.get_run(run_id)
    assert await store.restamp_run(run_id, OTHER_HASH, [("x", "shell")], owner=OWNER) is False
    assert await store.get_run(run_id) == before
    assert (await store.run_row(run_id)).definition_hash == contract.HASH


# --- step processes --------------------------------------------------------------------------


async def test_step_processes_keep_each_steps_latest_try(store: Any) -> None:
    run_id = await running_run(store)
    assert await store.step_processes(run_id) == []
    first = StepProcess("one", 4242, 2**40, "host+abcd1234")  # a machine up for long
    await store.step_process(run_id, first, owner=OWNER)
    await store.step_process(run_id, StepProcess("two", 77, 5, "host+abcd1234"))
    again = StepProcess("two", 78, 9, "other+00000000")
    await store.step_process(run_id, again, owner=OWNER)
    found = sorted(await store.step_processes(run_id), key=lambda p: p.step)
    assert found == [first, again]
    assert await store.step_processes(new_id()) == []


async def test_step_writes_touch_only_their_own_run(store: Any) -> None:
    mine, other = await running_run(store), await running_run(store)
    untouched = await store.get_run(other)
    now = utcnow()
    await store.step_running(mine, "one", inputs={"a": 1}, tries=1, started_at=now, owner=OWNER)
    await finish_step(store, mine, "two", "out", owner=OWNER)
    await store.step_process(mine, StepProcess("one", 5, 6, "m"), owner=OWNER)
    await store.steps_ended(mine, ["three"], StepStatus.SKIPPED, owner=OWNER)
    await store.add_steps(mine, [("two[0]", "shell", 1)], owner=OWNER)
    await store.reset_steps(mine, ["two"], owner=OWNER)
    await store.end_unfinished_steps(mine, pending=StepStatus.CANCELLED, owner=OWNER)
    assert await store.get_run(other) == untouched
    assert await store.step_processes(other) == []


async def test_reads_of_an_unknown_run_are_empty(store: Any) -> None:
    unknown = new_id()
    assert await store.step_outputs(unknown) == {}
    assert await store.step_states(unknown) == {}
    assert await store.step_processes(unknown) == []
    assert await store.run_row(unknown) is None
