"""Running workflows in-process (SPEC §1 "Running in-process", §2 "Failure", §3 previous, §4).

Real subprocesses, real SQLite files (one per test, from the conftest): order,
concurrency, retries, halting, what is stored, ``{previous.X}``, secrets, and
calling a workflow from sync and async code.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from support import kill_quietly, read_pid, sql_rows, wait_gone

from brain import RunResult, StepStatus, parallel, secret, shell, step, trigger, workflow
from brain.runner import StepEvent
from brain.store import Store

# Spawns subprocesses in-process: finalise earlier tests' leftovers first (see the conftest).
pytestmark = pytest.mark.usefixtures("collect_garbage_first")

# A shell loop that waits (bounded: about 10 s) for the file named by $WAIT_FOR.
WAIT_FOR_FILE = ('i=0; while [ ! -e "$WAIT_FOR" ]; do i=$((i+1)); '
                 'if [ $i -gt 200 ]; then echo "gave up waiting" >&2; exit 9; fi; sleep 0.05; done')


# --- order and concurrency ---------------------------------------------------------


def test_steps_run_in_call_order(tmp_path: Path):
    log = tmp_path / "order.log"
    env = {"LOG": str(log)}

    @workflow
    def run_order():
        # The first step is the slowest: if steps overlapped, "c" or "b" would land first.
        shell("a", command='sleep 0.3; echo a >> "$LOG"; echo A', env=env)
        shell("b", command='sleep 0.1; echo b >> "$LOG"; echo B', env=env)
        shell("c", command='echo c >> "$LOG"; echo C', env=env)

    r = run_order()
    assert r.status == "succeeded", r.error
    assert log.read_text().split() == ["a", "b", "c"]
    assert list(r.steps) == ["a", "b", "c"]
    a, b, c = (r.steps[n] for n in "abc")
    assert a.ended_at <= b.started_at and b.ended_at <= c.started_at


def test_parallel_siblings_really_run_at_the_same_time(tmp_path: Path):
    """A rendezvous: each sibling waits for the other's file; both succeed only if concurrent."""
    a_file, b_file, log = tmp_path / "a", tmp_path / "b", tmp_path / "log"

    @workflow
    def run_rendezvous():
        shell("before", command='echo before >> "$LOG"', env={"LOG": str(log)})
        with parallel():
            shell("left", command=f'touch "$MINE"; {WAIT_FOR_FILE}; echo left >> "$LOG"; echo met-b',
                  env={"MINE": str(a_file), "WAIT_FOR": str(b_file), "LOG": str(log)},
                  timeout_seconds=30)
            shell("right", command=f'touch "$MINE"; {WAIT_FOR_FILE}; echo right >> "$LOG"; echo met-a',
                  env={"MINE": str(b_file), "WAIT_FOR": str(a_file), "LOG": str(log)},
                  timeout_seconds=30)
        shell("joined", command='echo joined >> "$LOG"', env={"LOG": str(log)})

    r = run_rendezvous()
    assert r.status == "succeeded", r.error
    assert r.steps["left"].output == "met-b"
    assert r.steps["right"].output == "met-a"
    lines = log.read_text().split()
    assert lines[0] == "before" and lines[-1] == "joined"
    assert sorted(lines[1:3]) == ["left", "right"]
    joined = r.steps["joined"]
    assert joined.started_at >= r.steps["left"].ended_at
    assert joined.started_at >= r.steps["right"].ended_at


def test_the_rendezvous_fails_when_steps_run_one_after_another(tmp_path: Path):
    """Control for the test above: without parallel() the first sibling waits in vain."""
    a_file, b_file = tmp_path / "a", tmp_path / "b"
    short_wait = WAIT_FOR_FILE.replace("-gt 200", "-gt 10")

    @workflow
    def run_no_rendezvous():
        shell("left", command=f'touch "$MINE"; {short_wait}',
              env={"MINE": str(a_file), "WAIT_FOR": str(b_file)})
        shell("right", command=f'touch "$MINE"; {short_wait}',
              env={"MINE": str(b_file), "WAIT_FOR": str(a_file)})

    r = run_no_rendezvous()
    assert r.status == "failed"
    assert r.steps["left"].status == "failed"
    assert "exit code 9" in (r.steps["left"].error or "")
    assert r.steps["right"].status == "skipped"
    assert not b_file.exists()


# --- retries -----------------------------------------------------------------------


def test_retries_with_doubling_delay_until_success(tmp_path: Path):
    count, stamps = tmp_path / "count", tmp_path / "stamps"
    events: list[StepEvent] = []

    @workflow
    def run_retry_ok():
        shell("flaky",
              command='date +%s.%N >> "$STAMPS"; n=$(cat "$COUNT" 2>/dev/null || echo 0); '
                      'n=$((n+1)); echo $n > "$COUNT"; '
                      'if [ $n -lt 3 ]; then echo "try $n failed" >&2; exit 1; fi; echo "ok on try $n"',
              env={"COUNT": str(count), "STAMPS": str(stamps)},
              retries=2, retry_delay_seconds=0.05)

    r = run_retry_ok(on_event=events.append)
    flaky = r.steps["flaky"]
    assert r.status == "succeeded", r.error
    assert flaky.status == "succeeded"
    assert flaky.tries == 3
    assert flaky.output == "ok on try 3"
    assert flaky.error is None
    assert count.read_text().strip() == "3"
    assert [(e.status, e.tries) for e in events if e.step == "flaky"] == [
        ("running", 1), ("retrying", 1), ("retrying", 2), ("succeeded", 3)]
    # Delays double: 0.05 s before try 2, 0.1 s before try 3 (lower bounds only).
    t1, t2, t3 = (float(x) for x in stamps.read_text().split())
    assert t2 - t1 >= 0.045
    assert t3 - t2 >= 0.095


def test_retries_exhausted_fail_the_step_with_tries_retries_plus_one(tmp_path: Path):
    count = tmp_path / "count"

    @workflow
    def run_retry_fail():
        shell("always", command='echo x >> "$COUNT"; echo "nope" >&2; exit 2',
              env={"COUNT": str(count)}, retries=2, retry_delay_seconds=0.01)
        shell("next", command="echo next")

    r = run_retry_fail()
    always = r.steps["always"]
    assert always.status == "failed"
    assert always.tries == 3
    assert count.read_text().split() == ["x", "x", "x"]
    assert always.error == "command failed with exit code 2: nope"
    assert r.status == "failed"
    assert r.error == "step 'always' failed: command failed with exit code 2: nope"
    assert r.steps["next"].status == "skipped"
    stored = sql_rows(tmp_path, "SELECT tries, status FROM brain_steps WHERE run_id = ? AND name = ?",
                      r.run_id, "always")
    assert (stored[0]["tries"], stored[0]["status"]) == (3, "failed")


def test_no_retries_by_default(tmp_path: Path):
    count = tmp_path / "count"

    @workflow
    def run_no_retry():
        shell("once", command='echo x >> "$COUNT"; exit 1', env={"COUNT": str(count)})

    r = run_no_retry()
    assert r.steps["once"].tries == 1
    assert count.read_text().split() == ["x"]


# --- failure halts the run -------------------------------------------------------------


def test_failure_halts_the_run_cancels_siblings_and_skips_the_rest(tmp_path: Path):
    pid_file = tmp_path / "sibling.pid"
    later_marker = tmp_path / "later-ran"

    @workflow
    def run_halt():
        shell("first", command="echo one")
        with parallel():
            shell("slow", command='sleep 300 & echo $! > "$PID_FILE"; wait',
                  env={"PID_FILE": str(pid_file)}, timeout_seconds=60)
            shell("bad", command=f'{WAIT_FOR_FILE}; echo "disk on fire" >&2; exit 4',
                  env={"WAIT_FOR": str(pid_file)})
        shell("later", command='touch "$M"', env={"M": str(later_marker)})
        shell("last", command="echo last")

    r = run_halt()
    pid = read_pid(pid_file)
    try:
        assert r.status == "failed"
        assert r.error == "step 'bad' failed: command failed with exit code 4: disk on fire"
        assert r.steps["first"].status == "succeeded"
        assert r.steps["bad"].status == "failed"
        assert r.steps["bad"].error == "command failed with exit code 4: disk on fire"
        assert r.steps["slow"].status == "cancelled"
        assert r.steps["slow"].ended_at is not None
        for name in ("later", "last"):
            assert r.steps[name].status == "skipped"
            assert r.steps[name].tries == 0
            assert r.steps[name].started_at is None
            assert r.steps[name].output is None
        assert not later_marker.exists()
        assert wait_gone(pid), f"the cancelled sibling's process {pid} is still running"
    finally:
        kill_quietly(pid)

    stored = {row["name"]: row["status"] for row in sql_rows(
        tmp_path, "SELECT name, status FROM brain_steps WHERE run_id = ?", r.run_id)}
    assert stored == {"first": "succeeded", "slow": "cancelled", "bad": "failed",
                      "later": "skipped", "last": "skipped"}


# --- what is stored -------------------------------------------------------------------


def test_stored_records_match_the_run_result(tmp_path: Path, db_url: str):
    @workflow
    def run_stored():
        first = shell("first", command=f"printf '%s' {trigger.body}")
        shell("second", argv=["echo", f"got {first}"], stdin="in")
        shell("third", command="echo oops >&2; exit 5")

    r = run_stored(trigger={"body": "hello world", "headers": {"X-Test": "1"}})
    assert isinstance(r, RunResult)
    assert r.workflow == "run_stored"
    assert r.status == "failed"
    assert not r.succeeded
    assert r.started_at is not None and r.ended_at is not None and r.started_at <= r.ended_at
    assert r.steps["first"].inputs == {"command": "printf '%s' 'hello world'"}
    assert r.steps["second"].inputs == {"argv": ["echo", "got hello world"], "stdin": "in"}
    assert r.steps["second"].output == "got hello world"
    assert r.steps["third"].stderr == "oops\n"

    async def load() -> RunResult:
        async with Store(db_url) as s:
            return await s.get_run(r.run_id)

    loaded = asyncio.run(load())
    assert loaded.model_dump() == r.model_dump()
    assert loaded.trigger.headers == {"x-test": "1"}

    run_row = sql_rows(tmp_path, "SELECT * FROM brain_runs WHERE id = ?", r.run_id)[0]
    assert run_row["workflow"] == "run_stored"
    assert run_row["status"] == "failed"
    assert run_row["error"] == r.error
    assert run_row["trigger_event"] == "manual"
    assert run_row["trigger_body"] == "hello world"
    assert json.loads(run_row["trigger_headers"]) == {"x-test": "1"}
    assert run_row["definition_hash"] == run_stored.definition_hash
    assert run_row["started_at"] and run_row["ended_at"] and run_row["created_at"]

    rows = sql_rows(tmp_path, "SELECT * FROM brain_steps WHERE run_id = ? ORDER BY position", r.run_id)
    assert [row["name"] for row in rows] == ["first", "second", "third"]
    for row in rows:
        result = r.steps[row["name"]]
        assert row["kind"] == "shell"
        assert row["status"] == result.status.value
        assert row["tries"] == result.tries == 1
        assert json.loads(row["inputs"]) == result.inputs
        assert row["output"] == result.output
        assert row["error"] == result.error
        assert row["stderr"] == result.stderr
        assert row["started_at"] is not None and row["ended_at"] is not None
    assert rows[0]["output"] == "hello world"
    assert rows[2]["output"] == ""  # a failed step keeps its (empty) stdout too
    assert rows[2]["error"] == "command failed with exit code 5: oops"


def test_store_argument_records_elsewhere(tmp_path: Path):
    other = tmp_path / "other.db"

    @workflow
    def run_other_store():
        shell("s", command="echo stored")

    r = run_other_store(store=f"sqlite+aiosqlite:///{other}")
    assert r.status == "succeeded"
    con = sqlite3.connect(other)
    assert con.execute("SELECT status FROM brain_runs WHERE id = ?", (r.run_id,)).fetchone() == (
        "succeeded",)
    con.close()
    assert not (tmp_path / "brain.db").exists()


# --- {previous.X} -------------------------------------------------------------------


def test_previous_output_comes_from_the_latest_succeeded_run(tmp_path: Path):
    @workflow
    def run_previous():
        cur = shell("cur", command=f"printf '%s' {trigger.body}")
        shell("prev", command=f"printf '[%s]' {cur.previous}")
        shell("self_prev", argv=["printf", "%s+x", "{previous.self_prev}"])
        shell("gate", command=f"test {trigger.body} != fail")

    first = run_previous(trigger={"body": "one"})
    assert first.status == "succeeded", first.error
    assert first.steps["prev"].output == "[]"
    assert first.steps["self_prev"].output == "+x"
    assert first.previous_run_id is None

    second = run_previous(trigger={"body": "two"})
    assert second.status == "succeeded", second.error
    assert second.steps["prev"].output == "[one]"
    assert second.steps["self_prev"].output == "+x+x"
    assert second.previous_run_id == first.run_id

    failed = run_previous(trigger={"body": "fail"})
    assert failed.status == "failed"
    assert failed.steps["prev"].output == "[two]"
    assert failed.previous_run_id == second.run_id

    fourth = run_previous(trigger={"body": "four"})
    assert fourth.status == "succeeded", fourth.error
    assert fourth.steps["prev"].output == "[two]"  # the failed run is not "previous"
    assert fourth.previous_run_id == second.run_id

    stored = {row["id"]: row["previous_run_id"] for row in sql_rows(
        tmp_path, "SELECT id, previous_run_id FROM brain_runs")}
    assert stored == {first.run_id: None, second.run_id: first.run_id,
                      failed.run_id: second.run_id, fourth.run_id: second.run_id}


def test_previous_is_per_workflow():
    @workflow
    def run_prev_a():
        shell("x", command=f"printf '%s|%s' {trigger.body} {{previous.x}}")

    @workflow
    def run_prev_b():
        shell("x", command=f"printf '%s|%s' {trigger.body} {{previous.x}}")

    assert run_prev_a(trigger={"body": "a1"}).steps["x"].output == "a1|"
    r = run_prev_b(trigger={"body": "b1"})
    assert r.steps["x"].output == "b1|"
    assert r.previous_run_id is None
    assert run_prev_a(trigger={"body": "a2"}).steps["x"].output == "a2|a1|"


# --- secrets ----------------------------------------------------------------------------


def test_secret_values_never_reach_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    value = "zq-SECRET-4455-never-stored"
    monkeypatch.setenv("RUN_TEST_SECRET", value)

    @step
    def echo_back(token: str, note: str) -> str:
        return f"{note}:{token}"

    @workflow
    def run_secrets():
        shell("leak", command='echo "value=$TOKEN"; echo "$TOKEN" >&2',
              env={"TOKEN": secret("RUN_TEST_SECRET")})
        echo_back(secret("RUN_TEST_SECRET"), "fn")
        shell("fail", command='echo "failing with $TOKEN" >&2; exit 3',
              env={"TOKEN": secret("RUN_TEST_SECRET")})

    r = run_secrets()
    assert r.steps["leak"].output == "value=***"
    assert r.steps["leak"].inputs["env"] == {"TOKEN": "***"}
    assert r.steps["echo_back"].inputs == {"token": "***", "note": "fn"}
    assert r.steps["echo_back"].output == "fn:***"
    assert r.steps["fail"].status == "failed"
    assert r.error == "step 'fail' failed: command failed with exit code 3: failing with ***"

    rows = sql_rows(tmp_path, "SELECT name, inputs FROM brain_steps WHERE run_id = ?", r.run_id)
    for row in rows:
        assert "***" in row["inputs"]
    files = sorted(tmp_path.glob("brain.db*"))
    assert files
    raw = b"".join(p.read_bytes() for p in files)
    assert raw.count(b"***") >= 3
    assert value.encode() not in raw


# --- how a workflow is called -------------------------------------------------------------


@pytest.mark.asyncio
async def test_sync_call_inside_a_running_event_loop():
    @workflow
    def run_in_loop():
        shell("hi", command=f"printf 'hi %s' {trigger.body}")

    r = run_in_loop(trigger={"body": "loop"})  # from a coroutine: runs on a private loop
    assert r.status == "succeeded", r.error
    assert r.steps["hi"].output == "hi loop"


def test_sync_call_from_a_coroutine_under_asyncio_run():
    @workflow
    def run_nested():
        shell("hi", command=f"printf 'hi %s' {trigger.body}")

    async def main() -> RunResult:
        asyncio.get_running_loop()  # a loop runs in this thread while the workflow is called
        return run_nested(trigger={"body": "nested"})

    r = asyncio.run(main())
    assert r.status == "succeeded", r.error
    assert r.steps["hi"].output == "hi nested"


@pytest.mark.asyncio
async def test_arun_runs_on_the_callers_loop(db_url: str):
    @workflow
    def run_async():
        a = shell("a", command="echo A")
        shell("b", argv=["echo", f"{a}{trigger.body}"])

    r = await run_async.arun(trigger={"body": "!"})
    assert r.status == "succeeded", r.error
    assert r.steps["b"].output == "A!"
    async with Store(db_url) as s:
        stored = await s.get_run(r.run_id)
    assert stored.steps["b"].status == StepStatus.SUCCEEDED
    assert stored.steps["b"].output == "A!"


def test_a_failing_run_does_not_raise_and_trigger_text_is_the_body():
    @workflow
    def run_plain_trigger():
        shell("t", argv=["printf", "%s/%s", "{trigger.event}", "{trigger.body}"])
        shell("boom", command="exit 1")

    r = run_plain_trigger("just text")
    assert r.status == "failed"
    assert r.steps["t"].output == "manual/just text"
    assert r.trigger.body == "just text"
