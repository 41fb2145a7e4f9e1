"""What a step printed, whatever its end (SPEC §20): a failed, timed-out or cancelled shell
step keeps its stdout as output and its stderr tail; every step's log, line by line, with
``@step`` functions' prints attributed to their own step even side by side; the kept head
and tail of a flood, on SQLite (in memory and in a file) and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from typing import Any

import pytest

from brain import parallel, shell, step, workflow
from brain.results import LogLine
from brain.runner import LogEvent, cancel_run, run_workflow_now
from brain.store import Store
from brain.store.urls import MEMORY_URL


def texts(lines: list[LogLine], stream: str | None = None) -> list[str]:
    return [ln.text for ln in lines if stream is None or ln.stream == stream]


@pytest.fixture(params=["sqlite-memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite-memory":
        return MEMORY_URL
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'logs.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def store(store_url: str) -> Any:
    async with Store(store_url) as st:
        yield st


async def test_a_failed_step_keeps_its_output_and_stderr(store: Any) -> None:
    @workflow(name="fails_loudly")
    def fails_loudly():
        shell("tests", command="echo collected 3 items; echo 'E assert 1 == 2' >&2; "
                               "echo FAILED test_x; exit 1")

    run = await run_workflow_now(fails_loudly, store=store)
    tests = run.steps["tests"]
    assert tests.status == "failed"
    assert tests.output == "collected 3 items\nFAILED test_x"
    assert tests.stderr == "E assert 1 == 2\n"
    assert tests.error == "command failed with exit code 1: E assert 1 == 2"
    log = await store.read_log(run.run_id, "tests")
    assert texts(log, "stdout") == ["collected 3 items", "FAILED test_x"]
    assert texts(log, "stderr") == ["E assert 1 == 2"]
    assert all(ln.t >= 0 for ln in log)


async def test_a_timed_out_step_keeps_what_it_printed(store: Any) -> None:
    @workflow(name="times_out")
    def times_out():
        shell("slow", command="echo started; echo 'warming up' >&2; sleep 30; echo never",
              timeout_seconds=1)

    run = await run_workflow_now(times_out, store=store)
    slow = run.steps["slow"]
    assert (slow.status, slow.error) == ("failed", "timed out after 1 s")
    assert (slow.output, slow.stderr) == ("started", "warming up\n")
    assert texts(await store.read_log(run.run_id, "slow")) == ["started", "warming up"]


async def test_a_cancelled_step_keeps_what_it_printed(store: Any) -> None:
    @workflow(name="gets_cancelled")
    def gets_cancelled():
        shell("long", command="echo part one; echo 'err so far' >&2; sleep 60")

    seen = asyncio.Event()

    def on_log(event: LogEvent) -> None:
        if "part one" in texts(list(event.lines)):
            seen.set()

    running = asyncio.ensure_future(run_workflow_now(gets_cancelled, store=store, on_log=on_log))
    await asyncio.wait_for(seen.wait(), 30)
    (run_id,) = [r.run_id for r in await store.list_runs(workflow="gets_cancelled")]
    await cancel_run(store, run_id)
    run = await asyncio.wait_for(running, 30)
    long = run.steps["long"]
    assert (run.status, long.status, long.error) == ("cancelled", "cancelled", "cancelled")
    assert (long.output, long.stderr) == ("part one", "err so far\n")
    assert texts(await store.read_log(run_id, "long")) == ["part one", "err so far"]


async def test_a_step_cut_off_by_a_failing_sibling_keeps_what_it_printed() -> None:
    @workflow(name="sibling_fails")
    def sibling_fails():
        with parallel():
            shell("long", command="echo halfway; sleep 60")
            shell("breaks", command="sleep 0.5; exit 3")

    async with Store(MEMORY_URL) as store:
        run = await run_workflow_now(sibling_fails, store=store)
    long = run.steps["long"]
    assert long.status == "cancelled" and long.error is not None
    assert long.error.startswith("cancelled because step 'breaks' failed")
    assert long.output == "halfway"


async def test_side_by_side_steps_print_into_their_own_logs() -> None:
    """Two sync ``@step``s in threads and two async ones, running at once, each printing
    and logging between the others' lines: every line lands in its own step's log."""
    barrier = threading.Barrier(2, timeout=20)
    turns = asyncio.Event()

    @step
    def left() -> str:
        for i in range(20):
            print(f"left {i}")
            if i == 5:
                barrier.wait()  # both are inside their step now
        print("left err", file=sys.stderr)
        logging.getLogger("user.left").warning("left warned")
        return "L"

    @step
    def right() -> str:
        for i in range(20):
            print(f"right {i}")
            if i == 5:
                barrier.wait()
        return "R"

    @step
    async def ping() -> str:
        for i in range(5):
            print(f"ping {i}")
            turns.set()
            await asyncio.sleep(0.01)
        return "p"

    @step
    async def pong() -> str:
        await turns.wait()
        for i in range(5):
            print(f"pong {i}")
            await asyncio.sleep(0.01)
        return "q"

    @workflow(name="side_by_side")
    def side_by_side():
        with parallel():
            left()
            right()
            ping()
            pong()

    async with Store(MEMORY_URL) as store:
        run = await run_workflow_now(side_by_side, store=store)
        assert run.status == "succeeded"
        logs = await store.run_logs(run.run_id)
    assert texts(logs["left"], "stdout") == [f"left {i}" for i in range(20)]
    assert texts(logs["left"], "stderr") == ["left err"]
    assert texts(logs["left"], "log") == ["WARNING user.left: left warned"]
    assert texts(logs["right"]) == [f"right {i}" for i in range(20)]
    assert texts(logs["ping"]) == [f"ping {i}" for i in range(5)]
    assert texts(logs["pong"]) == [f"pong {i}" for i in range(5)]


async def test_print_outside_a_step_still_reaches_the_terminal(capsys: Any) -> None:
    @step
    def noisy() -> str:
        print("inside")
        return "x"

    @workflow(name="print_outside")
    def print_outside():
        noisy()

    async with Store(MEMORY_URL) as store:
        run = await run_workflow_now(print_outside, store=store)
        assert texts(await store.read_log(run.run_id, "noisy")) == ["inside"]
    print("outside")
    out = capsys.readouterr().out
    assert "outside" in out and "inside" not in out


async def test_a_flood_keeps_its_head_and_tail_and_says_what_was_dropped(store: Any) -> None:
    @workflow(name="floods")
    def floods():
        shell("flood", command="i=0; while [ $i -lt 20000 ]; do echo \"line $i of the flood\"; "
                               "i=$((i+1)); done; echo done >&2")

    run = await run_workflow_now(floods, store=store)
    assert run.status == "succeeded"
    log = await store.read_log(run.run_id, "flood")
    kept = [ln for ln in log if ln.stream != "brain"]
    notes = [ln.text for ln in log if ln.stream == "brain"]
    assert kept[0].text == "line 0 of the flood"
    assert texts(kept, "stdout")[-1] == "line 19999 of the flood"
    assert texts(kept, "stderr") == ["done"]  # in the tail: its place is when it came
    size = sum(len(ln.text) + 1 for ln in kept)
    assert 64 * 1024 < size <= (8 + 64) * 1024
    (note,) = notes
    dropped = 20001 - len(kept)
    # (a line cut at a gap is counted both dropped and kept: the count is about right)
    said = int(note.split()[1].replace(",", ""))
    assert abs(said - dropped) <= max(2, dropped // 100) and note.endswith(" KiB) dropped …")
    seqs = [ln.seq for ln in log]
    assert seqs == sorted(seqs)
    # the note sits between the head and the tail (stderr's "done" may come first in the
    # tail: its reader can get it before the last of stdout's pipe is read)
    at = [ln.stream for ln in log].index("brain")
    before = [ln.text for ln in log[:at] if ln.stream == "stdout"]
    after = [ln.text for ln in log[at + 1:] if ln.stream == "stdout"]
    assert before[-1].startswith("line ") and after[0].startswith("line ")
    assert int(after[0].split()[1]) > int(before[-1].split()[1]) + 1


async def test_what_a_steps_own_thread_prints_is_scrubbed_where_it_goes(
        capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread the function starts itself does not carry the step's context: its lines
    go where they would without The Brain, secrets scrubbed all the same."""
    from brain import secret

    monkeypatch.setenv("THREAD_SECRET", "thr-secret-value-0042")

    @step
    def spawns(key: str) -> str:
        thread = threading.Thread(target=lambda: print(f"from a thread: {key}"))
        thread.start()
        thread.join()
        print(f"from the step: {key}")
        return "ok"

    @workflow(name="own_thread")
    def own_thread():
        spawns(secret("THREAD_SECRET"))

    async with Store(MEMORY_URL) as store:
        run = await run_workflow_now(own_thread, store=store)
        assert texts(await store.read_log(run.run_id, "spawns")) == ["from the step: ***"]
    out = capsys.readouterr().out
    assert "from a thread: ***" in out and "thr-secret-value-0042" not in out


async def test_a_step_that_ended_keeps_its_last_lines_when_a_cancel_cuts_their_write() -> None:
    """Step ``a``'s program has exited 0 and its last lines are being stored (slowly: a busy
    database) when a failing sibling cancels it: the lines, and its output, are kept, and
    the run's end is written after them (found by the review round)."""

    class SlowFinalWrite(Store):
        async def append_logs(self, run_id: str, batches: Any, *,
                              owner: str | None = None) -> None:
            if any(step == "a" and any("a done" in ln.text for ln in batch.lines)
                   for step, batch in batches):
                await asyncio.sleep(1.0)
            await super().append_logs(run_id, batches, owner=owner)

    @workflow(name="final_write_cut")
    def final_write_cut():
        with parallel():
            shell("a", command="echo a start; sleep 0.2; echo a done")
            shell("b", command="sleep 0.6; exit 3")

    async with SlowFinalWrite(MEMORY_URL) as store:
        run = await run_workflow_now(final_write_cut, store=store)
        log = texts(await store.read_log(run.run_id, "a"))
    assert run.status == "failed"
    assert log == ["a start", "a done"]
    assert run.steps["a"].output == "a start\na done"
