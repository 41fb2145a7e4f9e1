"""The store contract, step logs: lines added in batches (the tail's oldest dropped, the
note on what was dropped written in place), read back by step and by run, and the lines
stored lately; and what a step cut off by a cancel printed.

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from store import contract_support as contract
from store.contract_support import make_run, taken_over, tick

from brain._clock import utcnow
from brain._errors import LeaseLost
from brain.results import LogBatch, LogLine, RunStatus, StepStatus

store = contract.store
contract_database = contract.contract_database

OWNER = "me:1:a"


def lines(*texts: str, first: int = 1, stream: str = "stdout") -> tuple[LogLine, ...]:
    return tuple(LogLine(first + i, stream, 0.25 * i, text) for i, text in enumerate(texts))


async def test_lines_are_added_and_read_back_in_order(store: Any) -> None:
    run_id = await make_run(store, owner=OWNER)
    assert await store.read_log(run_id, "one") == []
    await store.append_log(run_id, "one", LogBatch(lines("a", "b ✓", "")), owner=OWNER)
    await store.append_log(run_id, "one", LogBatch(lines("c", first=4, stream="stderr")),
                           owner=OWNER)
    await store.append_log(run_id, "two", LogBatch(lines("x")), owner=OWNER)
    await store.append_log(run_id, "two", LogBatch(), owner=OWNER)  # nothing: no write
    got = await store.read_log(run_id, "one")
    assert [(ln.seq, ln.stream, ln.text) for ln in got] == [
        (1, "stdout", "a"), (2, "stdout", "b ✓"), (3, "stdout", ""), (4, "stderr", "c")]
    assert got[1].t == pytest.approx(0.25)
    assert [ln.text for ln in await store.read_log(run_id, "one", after=2)] == ["", "c"]
    assert [ln.text for ln in await store.read_log(run_id, "one", after=1, limit=2)] == [
        "b ✓", ""]
    assert await store.read_log(run_id, "one", after=4) == []
    assert {step: [ln.text for ln in found]
            for step, found in (await store.run_logs(run_id)).items()} == {
        "one": ["a", "b ✓", "", "c"], "two": ["x"]}


async def test_the_tail_moves_on_and_the_note_is_written_in_place(store: Any) -> None:
    run_id = await make_run(store, owner=OWNER)
    await store.append_log(run_id, "one", LogBatch(lines("h1", "h2", "t1", "t2", "t3")),
                           owner=OWNER)
    note = LogLine(3, "brain", 1.0, "… 2 lines dropped …")
    # h1 h2 | note | t1 t2 t3 (seq 3..5 were the tail's first lines: 3 and 4 go)
    await store.append_log(run_id, "one", LogBatch(lines("t4", first=6), drop=(3, 4),
                                                  note=note), owner=OWNER)
    later = LogLine(3, "brain", 2.0, "… 3 lines dropped …")
    await store.append_log(run_id, "one", LogBatch(lines("t5", first=7), drop=(5, 5),
                                                  note=later), owner=OWNER)
    got = await store.read_log(run_id, "one")
    assert [(ln.seq, ln.text) for ln in got] == [
        (1, "h1"), (2, "h2"), (3, "… 3 lines dropped …"), (6, "t4"), (7, "t5")]


async def test_recent_logs_are_the_lines_stored_since(store: Any) -> None:
    run_id = await make_run(store, "logged", owner=OWNER)
    await store.append_log(run_id, "one", LogBatch(lines("old")), owner=OWNER)
    await tick()
    since = utcnow()
    await tick()
    await store.append_log(run_id, "one", LogBatch(lines("new", "newer", first=2)), owner=OWNER)
    await store.append_log(run_id, "two", LogBatch(lines("other")), owner=OWNER)
    found = await store.recent_logs(since)
    assert [(r, w, s, ln.text) for r, w, s, ln in found] == [
        (run_id, "logged", "one", "new"), (run_id, "logged", "one", "newer"),
        (run_id, "logged", "two", "other")]
    assert await store.recent_logs(utcnow() + timedelta(seconds=5)) == []
    assert len(await store.recent_logs(since, limit=1)) == 1


async def test_a_log_is_written_only_under_the_lease(store: Any) -> None:
    run_id = await make_run(store, owner=OWNER)
    await taken_over(store, run_id)
    with pytest.raises(LeaseLost):
        await store.append_log(run_id, "one", LogBatch(lines("late")), owner=OWNER)
    with pytest.raises(LeaseLost):
        await store.step_output(run_id, "one", output="late", stderr=None, owner=OWNER)
    assert await store.read_log(run_id, "one") == []
    assert (await store.get_run(run_id)).steps["one"].output is None


async def test_what_a_cut_off_step_printed_is_kept_with_its_end(store: Any) -> None:
    run_id = await make_run(store, owner=OWNER)
    await store.step_output(run_id, "one", output="so far", stderr="err tail\n", owner=OWNER)
    await store.steps_ended(run_id, ["one"], StepStatus.CANCELLED, "cancelled", owner=OWNER)
    step = (await store.get_run(run_id)).steps["one"]
    assert (step.status, step.output, step.stderr, step.error) == (
        StepStatus.CANCELLED, "so far", "err tail\n", "cancelled")


async def test_prune_deletes_the_logs_of_the_runs_it_deletes(store: Any) -> None:
    old = await make_run(store, owner=OWNER)
    await store.append_log(old, "one", LogBatch(lines("goes")), owner=OWNER)
    await store.finish_run(old, RunStatus.SUCCEEDED, owner=OWNER)
    assert [ln.text for ln in await store.read_log(old, "one")] == ["goes"]
    await tick()
    cutoff = utcnow()
    kept = await make_run(store, owner=OWNER)
    await store.append_log(kept, "one", LogBatch(lines("stays")), owner=OWNER)
    assert await store.prune(cutoff) == 1
    assert [ln.text for ln in await store.read_log(kept, "one")] == ["stays"]
    assert await store.recent_logs(cutoff - timedelta(days=1)) != []
    assert all(r != old for r, _, _, _ in await store.recent_logs(cutoff - timedelta(days=1)))
    assert await store.read_log(old, "one") == []


async def test_a_line_is_written_in_place_of_one_with_its_seq(store: Any) -> None:
    """An execution that died before its step's try was counted, and the one that resumed
    it, number their lines alike: the later line wins, and no write of it fails."""
    run_id = await make_run(store, owner=OWNER)
    await store.append_log(run_id, "one", LogBatch(lines("dead 1", "dead 2")), owner=OWNER)
    await store.append_log(run_id, "one", LogBatch(lines("resumed 1", first=2,
                                                         stream="stderr")), owner=OWNER)
    got = await store.read_log(run_id, "one")
    assert [(ln.seq, ln.stream, ln.text) for ln in got] == [
        (1, "stdout", "dead 1"), (2, "stderr", "resumed 1")]


async def test_several_steps_batches_are_stored_in_one_call(store: Any) -> None:
    run_id = await make_run(store, owner=OWNER)
    await store.append_logs(run_id, [("one", LogBatch(lines("a", "b"))),
                                     ("two", LogBatch()),
                                     ("three", LogBatch(lines("c")))], owner=OWNER)
    await store.append_logs(run_id, [], owner=OWNER)
    assert {step: texts for step, texts in
            ((s, [ln.text for ln in found]) for s, found in (await store.run_logs(run_id)).items())
            } == {"one": ["a", "b"], "three": ["c"]}
    await taken_over(store, run_id)
    with pytest.raises(LeaseLost):
        await store.append_logs(run_id, [("one", LogBatch(lines("late", first=3)))],
                                owner=OWNER)
    assert len(await store.read_log(run_id, "one")) == 2
