"""SPEC §16, run for real: sleeps, approvals and signals, on SQLite files.

An in-process run (``wf.arun(store=URL)``) waits in the foreground; the decision or
the signal comes from another task (through its own store on the same file) or from
another process (``brain approve``, ``brain signal``, ``brain cancel``). A run that
is let go of while it waits (its executor died, or it was retried) is continued by
the runner's public entry points (``execute_run``, ``resume_run``) or a ``brain
worker``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support import kill_group_quietly, pid_gone, resume_once_expired, wait_for, write_source

from brain import approval, for_each, parallel, shell, sleep, trigger, when, workflow
from brain import wait_for as wait_for_signal
from brain.loader import load_file
from brain.results import RunResult, RunStatus, StepResult, StepStatus
from brain.runner import StepEvent, execute_run
from brain.store import Store

# Spawns subprocesses in-process: finalise earlier tests' leftovers first (see the conftest).
pytestmark = pytest.mark.usefixtures("collect_garbage_first")

SECONDS = 30.0  # the bound of every wait for something to happen (never reached when it works)


# --- helpers -------------------------------------------------------------------------------


class Waits:
    """An ``on_wait`` handler: each time what the run waits for changes, the run (as it
    was then) and the names of its waiting steps, to be awaited in order."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[RunResult, list[str]]] = asyncio.Queue()
        self.told: list[list[str]] = []

    def __call__(self, run: RunResult, steps: list[StepResult]) -> None:
        names = sorted(s.name for s in steps)
        self.told.append(names)
        self.queue.put_nowait((run, names))

    async def next(self, running: asyncio.Task[RunResult]) -> tuple[RunResult, list[str]]:
        """What the run waits for next; fails if the run ends first (or never waits)."""
        getter = asyncio.ensure_future(self.queue.get())
        done, _ = await asyncio.wait([getter, running], timeout=SECONDS,
                                     return_when=asyncio.FIRST_COMPLETED)
        if getter in done:
            return getter.result()
        getter.cancel()
        if running in done:
            result = running.result()
            raise AssertionError(f"the run ended {result.status} ({result.error}) instead of "
                                 f"waiting: {statuses(result)}")
        raise AssertionError("the run never waited")


class Events:
    """An ``on_event`` handler keeping ``(step, status)`` in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, event: StepEvent) -> None:
        self.seen.append((event.step, event.status))

    def of(self, step: str) -> list[str]:
        return [status for name, status in self.seen if name == step]


def statuses(result: RunResult) -> dict[str, str]:
    return {name: str(s.status) for name, s in result.steps.items()}


@pytest.fixture
async def other(db_url: str) -> AsyncIterator[Store]:
    """A store of its own on the test's database: the 'other side' that decides."""
    async with Store(db_url) as store:
        yield store


def start(wf: Any, db_url: str, trigger_value: object = None, *,
          on_event: Any = None) -> tuple[asyncio.Task[RunResult], Waits]:
    """Run ``wf`` in the foreground in a task; what it waits for is told to the Waits."""
    waits = Waits()
    task = asyncio.create_task(wf.arun(trigger_value, store=db_url, on_wait=waits,
                                       on_event=on_event))
    return task, waits


async def ended(task: asyncio.Task[RunResult]) -> RunResult:
    return await asyncio.wait_for(task, SECONDS)


async def brain_cli(brain_cmd: list[str], *args: str) -> tuple[int, str, str]:
    """Run the real ``brain`` command (this test's BRAIN_DATABASE_URL) without blocking."""
    proc = await asyncio.create_subprocess_exec(*brain_cmd, *args, stdout=subprocess.PIPE,
                                                stderr=subprocess.PIPE, env=dict(os.environ))
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def utc_time(text: str | None) -> datetime:
    """An ISO 8601 time in UTC, as a wake time is written."""
    assert text is not None
    when_ = datetime.fromisoformat(text)
    assert when_.utcoffset() == timedelta(0), text
    assert text.endswith("+00:00"), text
    return when_


# --- sleep -----------------------------------------------------------------------------------


async def test_a_sleep_outputs_its_utc_wake_time_and_later_steps_read_it(db_url: str) -> None:
    @workflow(name="napping")
    def napping():
        shell("before", argv=["echo", "start"])
        with parallel():
            nap = sleep("nap", 1)
            at = sleep("at", until=trigger.body)
        shell("after", argv=["echo", f"woke {nap} / {at}"])

    # A wake time given with an offset of its own, one to two seconds from now.
    wake_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    given = (wake_at + timedelta(hours=5, minutes=30)).replace(tzinfo=None).isoformat() + "+05:30"
    events = Events()
    task, waits = start(napping, db_url, {"body": given}, on_event=events)
    run, waiting = await waits.next(task)
    assert run.status == RunStatus.WAITING
    # (On a slow start, the wake time given may be past already when the step starts.)
    assert "nap" in waiting and set(waiting) <= {"at", "nap"}
    assert run.steps["after"].status == StepStatus.PENDING
    if "at" in waiting:
        assert run.steps["at"].waiting_for == {"kind": "sleep", "until": wake_at.isoformat()}
    result = await ended(task)

    assert result.status == RunStatus.SUCCEEDED, result.error
    nap = result.steps["nap"]
    woke = utc_time(nap.output)
    assert nap.started_at is not None and nap.ended_at is not None
    assert nap.started_at + timedelta(seconds=1) - timedelta(milliseconds=5) <= woke
    assert woke <= nap.ended_at + timedelta(milliseconds=5)  # it never ends before its time
    assert nap.inputs == {"until": nap.output}
    assert (nap.status, nap.tries, nap.error) == (StepStatus.SUCCEEDED, 1, None)
    at = result.steps["at"]
    assert at.output == wake_at.isoformat()  # the same instant, in UTC
    assert at.ended_at is not None and at.ended_at >= wake_at - timedelta(milliseconds=5)
    after = result.steps["after"]
    assert after.output == f"woke {nap.output} / {wake_at.isoformat()}"
    assert after.started_at is not None and after.started_at >= wake_at - timedelta(milliseconds=5)
    assert events.of("nap") == ["waiting", "succeeded"]


@pytest.mark.parametrize("until", ["2020-01-01T09:00:00+02:00", "2020-01-01T07:00:00Z"])
async def test_a_time_already_past_continues_at_once(db_url: str, until: str) -> None:
    @workflow(name="past")
    def past():
        then = sleep("then", until=trigger.body)
        literal = sleep("literal", until="1999-12-31T23:00:00-01:00")
        zero = sleep("zero", 0)
        shell("after", argv=["echo", f"{then} {literal} {zero}"])

    events = Events()
    task, waits = start(past, db_url, {"body": until}, on_event=events)
    result = await ended(task)
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert waits.told == []  # never said it waits
    assert not any(status == "waiting" for _, status in events.seen)
    assert result.steps["then"].output == "2020-01-01T07:00:00+00:00"
    assert result.steps["literal"].output == "2000-01-01T00:00:00+00:00"
    assert result.steps["after"].output.startswith(
        "2020-01-01T07:00:00+00:00 2000-01-01T00:00:00+00:00 ")
    utc_time(result.steps["zero"].output)
    async with Store(db_url) as store:
        assert await store.next_timer() is None
        assert await store.list_runs(status="waiting") == []


@pytest.mark.parametrize(("body", "says"), [
    ("next tuesday", "is not an ISO 8601 time"),
    ("2030-01-01T09:00:00", "has no offset"),
    ("", "is not an ISO 8601 time"),
])
async def test_a_bad_resolved_until_fails_the_step(db_url: str, body: str, says: str) -> None:
    @workflow(name="bad_until")
    def bad_until():
        sleep("at", until=trigger.body)
        shell("after", argv=["echo", "never"])

    task, waits = start(bad_until, db_url, {"body": body})
    result = await ended(task)
    assert result.status == RunStatus.FAILED
    at = result.steps["at"]
    assert at.status == StepStatus.FAILED
    assert at.error is not None and says in at.error and "until=" in at.error
    assert at.tries == 1
    assert result.steps["after"].status != StepStatus.SUCCEEDED
    assert waits.told == []


# --- approval --------------------------------------------------------------------------------


@pytest.mark.parametrize("approve", [True, False])
async def test_an_approval_outputs_true_or_false_and_feeds_when(
        db_url: str, other: Store, approve: bool) -> None:
    @workflow(name="gated")
    def gated():
        plan = shell("plan", argv=["echo", "3 to add"])
        ok = approval("go", prompt=f"Apply this plan?\n\n{plan}")
        with when(ok):
            shell("apply", argv=["echo", "applied"])
        shell("rollback", argv=["echo", "rolled back"], when=~ok)
        shell("report", argv=["echo", f"decided {ok}"])

    task, waits = start(gated, db_url)
    run, waiting = await waits.next(task)
    assert waiting == ["go"]
    go = run.steps["go"]
    assert go.status == StepStatus.WAITING
    assert go.waiting_for == {"kind": "approval", "prompt": "Apply this plan?\n\n3 to add"}
    assert go.inputs == {"prompt": "Apply this plan?\n\n3 to add"}
    row = await other.run_row(run.run_id)
    assert row is not None and row.status == "waiting" and row.lease_owner is None

    decision = await other.decide(run.run_id, "go", approved=approve, comment="looked fine",
                                  by="cli")
    assert decision["approved"] is approve
    result = await ended(task)
    assert result.status == RunStatus.SUCCEEDED, result.error
    go = result.steps["go"]
    assert go.output == ("true" if approve else "false")
    assert (go.status, go.tries) == (StepStatus.SUCCEEDED, 1)
    assert go.decision is not None
    assert {k: go.decision[k] for k in ("approved", "comment", "by")} == {
        "approved": approve, "comment": "looked fine", "by": "cli"}
    assert go.decision["at"]
    applied, rolled = (StepStatus.SUCCEEDED, StepStatus.SKIPPED) if approve else \
        (StepStatus.SKIPPED, StepStatus.SUCCEEDED)
    assert result.steps["apply"].status == applied
    assert result.steps["rollback"].status == rolled
    assert result.steps["report"].output == f"decided {go.output}"


async def test_a_second_decision_and_a_decision_for_a_step_not_waiting_are_refused(
        db_url: str, other: Store) -> None:
    from brain._errors import RunConflict

    @workflow(name="twice")
    def twice():
        approval("go", "ok?")
        approval("later", "and now?")

    task, waits = start(twice, db_url)
    run, _ = await waits.next(task)
    with pytest.raises(RunConflict, match="not waiting"):
        await other.decide(run.run_id, "later", approved=True)
    await other.decide(run.run_id, "go", approved=True)
    with pytest.raises(RunConflict, match="already decided"):
        await other.decide(run.run_id, "go", approved=False)
    run, waiting = await waits.next(task)
    assert waiting == ["later"]
    await other.decide(run.run_id[:12], "later", approved=False)  # a prefix will do
    result = await ended(task)
    assert [result.steps[n].output for n in ("go", "later")] == ["true", "false"]


async def test_a_step_in_parallel_with_a_wait_goes_on_and_steps_after_it_wait(
        db_url: str, other: Store, tmp_path: Path) -> None:
    @workflow(name="beside")
    def beside():
        with parallel():
            approval("go", "ok?")
            shell("busy", command=f"sleep 0.3; echo busy > {tmp_path / 'busy.txt'}; echo done")
        shell("after", argv=["echo", "after"])

    events = Events()
    task, waits = start(beside, db_url, on_event=events)
    run, waiting = await waits.next(task)
    # The sibling went on while the approval waited.
    assert events.seen.index(("go", "waiting")) < events.seen.index(("busy", "succeeded"))
    # Let go of only once nothing but the wait is left: the sibling has ended by then.
    assert waiting == ["go"]
    assert run.status == RunStatus.WAITING
    assert statuses(run) == {"go": "waiting", "busy": "succeeded", "after": "pending"}
    assert (tmp_path / "busy.txt").read_text() == "busy\n"
    await other.decide(run.run_id, "go", approved=True)
    result = await ended(task)
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert statuses(result) == {"go": "succeeded", "busy": "succeeded", "after": "succeeded"}
    assert result.steps["busy"].tries == 1  # not run again when the run was taken back
    assert result.steps["after"].started_at >= result.steps["go"].ended_at


async def test_waits_inside_for_each_wait_per_instance(db_url: str, other: Store) -> None:
    @workflow(name="per_region")
    def per_region():
        with for_each(["eu", "us", "ap"], max_parallel=3, name="region") as region:
            ok = approval("ok", prompt=f"Deploy to {region}?")
            shell("deploy", argv=["echo", f"deployed {region}"], when=ok)
        shell("summary", argv=["echo", f"{ok}"])

    task, waits = start(per_region, db_url)
    run, waiting = await waits.next(task)
    assert waiting == ["ok[0]", "ok[1]", "ok[2]"]
    assert [run.steps[f"ok[{i}]"].waiting_for["prompt"] for i in range(3)] == [
        "Deploy to eu?", "Deploy to us?", "Deploy to ap?"]
    assert run.steps["summary"].status == StepStatus.PENDING
    await other.decide(run.run_id, "ok[1]", approved=False)
    await other.decide(run.run_id, "ok[0]", approved=True)
    run, waiting = await waits.next(task)
    assert waiting == ["ok[2]"]
    assert run.steps["deploy[0]"].output == "deployed eu"
    assert run.steps["deploy[1]"].status == StepStatus.SKIPPED
    await other.decide(run.run_id, "ok[2]", approved=True)
    result = await ended(task)
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert json.loads(result.steps["summary"].output) == ["true", "false", "true"]
    assert [result.steps[f"deploy[{i}]"].status for i in range(3)] == [
        StepStatus.SUCCEEDED, StepStatus.SKIPPED, StepStatus.SUCCEEDED]


async def test_two_parallel_waits_both_resolved(db_url: str, other: Store) -> None:
    @workflow(name="both")
    def both():
        with parallel():
            ok = approval("go", "ok?")
            ci = wait_for_signal("ci", signal="ci-finished", key=trigger.body)
            other_key = wait_for_signal("other", signal="ci-finished", key="not-this-one")
        shell("report", argv=["echo", f"{ok} {ci}"])
        shell("report2", argv=["echo", f"{other_key}"])

    task, waits = start(both, db_url, {"body": "abc123"})
    run, waiting = await waits.next(task)
    assert waiting == ["ci", "go", "other"]
    assert run.steps["ci"].waiting_for == {"kind": "signal", "signal": "ci-finished",
                                           "key": "abc123"}
    assert run.steps["ci"].inputs == {"signal": "ci-finished", "key": "abc123"}
    # Only the steps waiting with the same key continue; a signal without a key matches none.
    assert await other.send_signal("ci-finished", None, "nobody") == []
    assert await other.send_signal("ci-finished", "abc123", '{"passed": 12}', by="test") == [
        (run.run_id, "ci")]
    await other.decide(run.run_id, "go", approved=True)
    assert await other.send_signal("ci-finished", "not-this-one", "x") == [(run.run_id, "other")]
    result = await ended(task)
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert result.steps["ci"].output == '{"passed": 12}'
    assert result.steps["ci"].decision is not None
    assert {k: result.steps["ci"].decision[k] for k in ("signal", "key", "by")} == {
        "signal": "ci-finished", "key": "abc123", "by": "test"}
    assert result.steps["report"].output == 'true {"passed": 12}'
    assert result.steps["report2"].output == "x"


async def test_a_signal_from_brain_signal_continues_a_run_waiting_in_process(
        db_url: str, brain_cmd: list[str]) -> None:
    @workflow(name="signalled")
    def signalled():
        ci = wait_for_signal("ci", signal="deploy.done:v1")
        shell("report", argv=["echo", f"got {ci}"])

    task, waits = start(signalled, db_url)
    run, _ = await waits.next(task)
    code, out, err = await brain_cli(brain_cmd, "signal", "deploy.done:v1", "--json",
                                     "--body", "all green")
    assert code == 0, err
    assert json.loads(out) == {"resumed": [{"run_id": run.run_id, "step": "ci"}]}
    result = await ended(task)
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert result.steps["report"].output == "got all green"
    assert result.steps["ci"].decision["by"] == "cli"


# --- timeouts --------------------------------------------------------------------------------


@pytest.mark.parametrize("default", [True, False])
async def test_an_approval_timeout_with_a_default_decides_by_timeout(
        db_url: str, default: bool) -> None:
    @workflow(name="timed")
    def timed():
        ok = approval("go", "ok?", timeout=1, default=default)
        shell("apply", argv=["echo", "applied"], when=ok)

    task, waits = start(timed, db_url)
    run, _ = await waits.next(task)
    timeout_at = datetime.fromisoformat(run.steps["go"].waiting_for["timeout_at"])
    result = await ended(task)
    assert result.status == RunStatus.SUCCEEDED, result.error
    go = result.steps["go"]
    assert go.output == ("true" if default else "false")
    assert go.decision is not None
    assert (go.decision["approved"], go.decision["by"]) == (default, "timeout")
    assert go.ended_at is not None and go.ended_at >= timeout_at - timedelta(milliseconds=5)
    assert result.steps["apply"].status == (StepStatus.SUCCEEDED if default
                                            else StepStatus.SKIPPED)


UNDECIDED = {
    "approval": lambda: approval("go", "ok?", timeout="1s"),
    "wait_for": lambda: wait_for_signal("go", signal="ci-finished", timeout="1s"),
}
UNDECIDED_ERROR = {"approval": "no decision within 1s",
                   "wait_for": "no decision within 1s (signal 'ci-finished')"}


@pytest.mark.parametrize("kind", sorted(UNDECIDED))
async def test_a_timeout_without_a_default_fails_the_run_once(db_url: str, kind: str) -> None:
    @workflow(name="undecided")
    def undecided():
        shell("before", argv=["echo", "one"])
        UNDECIDED[kind]()
        shell("after", argv=["echo", "never"])

    task, waits = start(undecided, db_url)
    await waits.next(task)
    result = await ended(task)
    assert result.status == RunStatus.FAILED
    assert result.error == f"step 'go' failed: {UNDECIDED_ERROR[kind]}"
    go = result.steps["go"]
    assert (go.status, go.error) == (StepStatus.FAILED, UNDECIDED_ERROR[kind])
    assert go.tries == 1
    assert go.decision is not None and go.decision["by"] == "timeout"
    assert go.output is None
    assert result.steps["after"].status != StepStatus.SUCCEEDED
    assert result.steps["after"].tries == 0
    assert waits.told == [["go"]]  # waited once: a timeout is not retried


async def test_an_approval_timeout_is_not_retried_even_with_retries(db_url: str) -> None:
    @workflow(name="undecided_retries")
    def undecided_retries():
        approval("go", "ok?", timeout="1s", retries=3)

    task, waits = start(undecided_retries, db_url)
    result = await ended(task)
    assert result.status == RunStatus.FAILED
    assert result.steps["go"].tries == 1
    assert waits.told == [["go"]]


@pytest.mark.parametrize(("default", "shown"), [
    ({"ok": False, "why": "timeout"}, '{"ok":false,"why":"timeout"}'),
    ("no news", "no news"),
])
async def test_a_wait_for_timeout_outputs_its_default(db_url: str, default: Any,
                                                      shown: str) -> None:
    @workflow(name="ci_wait")
    def ci_wait():
        ci = wait_for_signal("ci", signal="ci-finished", key="k", timeout=1, default=default)
        shell("report", argv=["echo", f"{ci}"])

    task, waits = start(ci_wait, db_url)
    run, _ = await waits.next(task)
    assert run.steps["ci"].waiting_for["timeout_at"]
    result = await ended(task)
    assert result.status == RunStatus.SUCCEEDED, result.error
    ci = result.steps["ci"]
    assert (ci.status, ci.tries, ci.output) == (StepStatus.SUCCEEDED, 1, shown)
    assert ci.decision is not None and ci.decision["by"] == "timeout"
    assert result.steps["report"].output == shown
    async with Store(db_url) as store:  # the timer is gone: a late signal continues nothing
        assert await store.send_signal("ci-finished", "k", "late") == []
        assert await store.next_timer() is None


# --- runs let go of, taken back ------------------------------------------------------------


CRASH_FLOW = """
    from brain import approval, parallel, shell, sleep, workflow

    @workflow
    def napper():
        nap = sleep("nap", "3s")
        shell("after", argv=["echo", f"woke {nap}"])

    @workflow
    def beside():
        with parallel():
            ok = approval("go", prompt="ship it?")
            shell("slow", timeout_seconds=120,
                  command="if [ ! -e marker ]; then echo $$ > slow.pid; touch marker; sleep 60; fi; "
                          "echo slow-done")
        shell("after", argv=["echo", f"approved {ok}"])
"""


def db_status(db_file: Path, run_id: str | None = None) -> tuple[str, str] | None:
    """``(run id, status)`` of the (only, or given) run in the database, read directly."""
    import sqlite3

    if not db_file.exists():
        return None
    try:
        with sqlite3.connect(f"file:{db_file}?mode=ro", uri=True, timeout=5) as conn:
            rows = conn.execute("SELECT id, status FROM brain_runs").fetchall()
    except sqlite3.OperationalError:
        return None
    found = [r for r in rows if run_id is None or r[0] == run_id]
    return (found[0][0], found[0][1]) if found else None


def step_status(db_file: Path, step: str) -> str | None:
    import sqlite3

    if not db_file.exists():
        return None
    try:
        with sqlite3.connect(f"file:{db_file}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute("SELECT status FROM brain_steps WHERE name = ?", (step,)).fetchone()
    except sqlite3.OperationalError:
        return None
    return row[0] if row else None


def test_a_sleeping_run_whose_brain_run_was_killed_is_continued_by_a_worker(
        tmp_path: Path, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "flows.py", CRASH_FLOW)
    db_file = tmp_path / "brain.db"
    proc = subprocess.Popen([*brain_cmd, "run", f"{flow}:napper"], env=dict(os.environ),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        run_id, _ = wait_for(lambda: (found := db_status(db_file)) and found[1] == "waiting"
                             and found, SECONDS, "the run to wait")
        proc.send_signal(signal.SIGKILL)  # before its 3 s are up: nobody fires the timer now
        proc.wait(timeout=10)
        assert db_status(db_file, run_id) == (run_id, "waiting")  # still, nothing lost
        worker = subprocess.Popen([*brain_cmd, "worker", str(flow)], env=dict(os.environ),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for(lambda: db_status(db_file, run_id) in {(run_id, s) for s in
                                                        ("succeeded", "failed", "cancelled")},
                 SECONDS, "the worker to continue the run")

        async def read() -> RunResult:
            async with Store(f"sqlite+aiosqlite:///{db_file}") as store:
                return await store.get_run(run_id)

        result = asyncio.run(read())
        assert result.workflow == "napper"
        assert result.status == RunStatus.SUCCEEDED, result.error
        nap = result.steps["nap"]
        woke = utc_time(nap.output)
        assert nap.tries == 1  # the sleep was not started again
        assert result.steps["after"].output == f"woke {nap.output}"
        assert result.steps["after"].started_at >= woke - timedelta(milliseconds=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


def test_a_run_killed_while_one_step_waits_and_another_runs_is_resumed(
        tmp_path: Path, db_url: str, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "flows.py", CRASH_FLOW)
    db_file = tmp_path / "brain.db"
    env = {**os.environ, "BRAIN_LEASE_SECONDS": "2"}
    proc = subprocess.Popen([*brain_cmd, "run", f"{flow}:beside"], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: step_status(db_file, "go") == "waiting"
                 and (tmp_path / "slow.pid").exists() and (tmp_path / "slow.pid").read_text().strip(),
                 SECONDS, "the approval to wait while 'slow' runs")
        run_id, status = db_status(db_file) or ("", "")
        assert status == "running"  # a step still runs: the run is held, not let go of
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        wf = load_file(flow)["beside"]

        async def resume() -> tuple[RunResult, RunResult]:
            async with Store(db_url) as store:
                resumed = await resume_once_expired(wf, store, run_id)
                assert resumed is not None, "the run was never resumed after its lease expired"
                await store.decide(run_id, "go", approved=True, comment="after the crash")
                final = await execute_run(wf, store, run_id)
                assert final is not None, "the woken run could not be taken"
                return resumed, final

        resumed, final = asyncio.run(resume())
        # Resumed: 'slow' ran again (at least once), the approval still waits as it was.
        assert resumed.status == RunStatus.WAITING, resumed.error
        assert statuses(resumed) == {"go": "waiting", "slow": "succeeded", "after": "pending"}
        assert resumed.steps["go"].tries == 1
        assert resumed.steps["go"].waiting_for == {"kind": "approval", "prompt": "ship it?"}
        assert resumed.steps["slow"].output == "slow-done"
        assert final.status == RunStatus.SUCCEEDED, final.error
        assert final.steps["go"].output == "true"
        assert final.steps["go"].tries == 1
        assert final.steps["after"].output == "approved true"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        pid_file = tmp_path / "slow.pid"
        if pid_file.exists() and pid_file.read_text().strip():
            pid = int(pid_file.read_text())
            if not pid_gone(pid):  # the first try's 'sleep 60', if a failure left it
                kill_group_quietly(pid)


async def test_a_retry_of_a_run_whose_approval_timed_out_waits_again(
        db_url: str, other: Store) -> None:
    @workflow(name="retried")
    def retried():
        shell("plan", argv=["echo", "the plan"])
        ok = approval("go", "ok?", timeout=1)
        shell("apply", argv=["echo", "applied"], when=ok)

    task, waits = start(retried, db_url)
    await waits.next(task)
    failed = await ended(task)
    assert failed.status == RunStatus.FAILED
    assert failed.error == "step 'go' failed: no decision within 1s"
    assert failed.steps["go"].status == StepStatus.FAILED

    retry_id = await other.retry_run(failed.run_id)
    first = await execute_run(retried, other, retry_id)
    assert first is not None
    assert first.status == RunStatus.WAITING, first.error
    assert statuses(first) == {"plan": "succeeded", "go": "waiting", "apply": "pending"}
    assert first.steps["plan"].output == "the plan"
    assert first.steps["plan"].started_at == failed.steps["plan"].started_at  # kept, not re-run
    assert first.steps["go"].decision is None
    timeouts = [datetime.fromisoformat(r.steps["go"].waiting_for["timeout_at"])
                for r in (failed, first)]
    assert timeouts[1] > timeouts[0]  # a timeout of its own
    await other.decide(retry_id, "go", approved=True, by="api")
    final = await execute_run(retried, other, retry_id)
    assert final is not None
    assert final.status == RunStatus.SUCCEEDED, final.error
    assert final.retry_of == failed.run_id
    assert final.steps["go"].output == "true"
    assert final.steps["go"].decision["by"] == "api"
    assert final.steps["apply"].output == "applied"


async def test_previous_reads_what_an_earlier_run_waited_for(db_url: str, other: Store) -> None:
    @workflow(name="remembers")
    def remembers():
        shell("last", argv=["echo", "go={previous.go} ci={previous.ci}"])
        approval("go", "ok?")
        wait_for_signal("ci", signal="ci")

    async def one(approve: bool, body: str) -> RunResult:
        task, waits = start(remembers, db_url)
        run, _ = await waits.next(task)
        await other.decide(run.run_id, "go", approved=approve)
        run, waiting = await waits.next(task)
        assert waiting == ["ci"]
        assert await other.send_signal("ci", None, body) == [(run.run_id, "ci")]
        return await ended(task)

    first = await one(True, "build 1")
    assert first.status == RunStatus.SUCCEEDED, first.error
    assert first.steps["last"].output == "go= ci="
    second = await one(False, "build 2")
    assert second.status == RunStatus.SUCCEEDED, second.error
    assert second.steps["last"].output == "go=true ci=build 1"
    assert second.steps["go"].output == "false"


async def test_cancel_while_waiting_in_the_foreground_ends_the_run_cancelled(
        db_url: str, brain_cmd: list[str]) -> None:
    @workflow(name="cancelled_wait")
    def cancelled_wait():
        shell("first", argv=["echo", "one"])
        approval("go", "ok?")
        sleep("nap", "1h")
        shell("never", argv=["echo", "never"])

    task, waits = start(cancelled_wait, db_url)
    run, _ = await waits.next(task)
    code, out, err = await brain_cli(brain_cmd, "cancel", run.run_id[:12])
    assert code == 0, err
    assert "cancelled" in out + err
    result = await ended(task)
    assert result.status == RunStatus.CANCELLED
    assert statuses(result) == {"first": "succeeded", "go": "cancelled", "nap": "cancelled",
                                "never": "cancelled"}
    async with Store(db_url) as store:
        assert await store.next_timer() is None
        from brain._errors import RunConflict

        with pytest.raises(RunConflict):
            await store.decide(run.run_id, "go", approved=True)
