"""Run integrity (SPEC §4): no run ends ``succeeded`` with a step not run, no step stays
``running`` under an ended run, and an executor that lost its lease writes nothing more.

Each test here reproduces a way the promise once broke.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import group_alive

from brain import llm, shell, step, workflow
from brain.results import RunStatus
from brain.runner import execute_run
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


class Unbuildable:
    """A parameter type pydantic cannot build a schema for."""

    def __init__(self, raw: str) -> None:
        self.raw = raw


def _final(result: Any) -> None:
    """The promise itself: an ended run has every step in a final status, and a
    succeeded run has only succeeded or skipped steps."""
    assert result.status in ("succeeded", "failed", "cancelled")
    for s in result.steps.values():
        assert s.status not in ("pending", "running"), (s.name, s.status)
    if result.status == "succeeded":
        assert all(s.status in ("succeeded", "skipped") for s in result.steps.values())


def test_a_preparation_that_raises_anything_fails_the_step_and_the_run(db_url: str):
    @step
    def takes(x: Unbuildable) -> str:  # type: ignore[type-arg]
        return "never"

    @workflow(name="unbuildable")
    def unbuildable():
        first = shell("first", command="echo hi")
        takes(first)
        shell("after", command="echo after")

    r = unbuildable.run(store=db_url)
    _final(r)
    assert r.status == "failed"
    assert r.steps["takes"].status == "failed"
    assert "internal error" in (r.steps["takes"].error or "")
    assert r.steps["after"].status == "skipped"
    assert "takes" in (r.error or "")


def test_an_llm_url_that_breaks_preparation_fails_the_step(db_url: str):
    @workflow(name="bad_llm_url")
    def bad_llm_url():
        llm("ask", prompt="hi", model="m", provider_url="http://user:pw@localhost:99999999/v1",
            api_key="a-literal-key-123")

    r = bad_llm_url.run(store=db_url)
    _final(r)
    assert r.status == "failed"
    assert r.steps["ask"].status == "failed"
    assert "pw" not in (r.steps["ask"].error or "")
    assert "not a usable URL" in (r.steps["ask"].error or "")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
                    | st.characters(codec="utf-8"), min_size=1, max_size=20))
def test_text_with_lone_surrogates_is_stored_with_replacement_characters(db_url: str, text: str):
    @step
    def odd() -> str:
        return text

    @workflow(name="surrogates")
    def surrogates():
        odd()

    r = surrogates.run(trigger={"body": text}, store=db_url)
    _final(r)
    assert r.status == "succeeded", r.error
    expected = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    assert r.steps["odd"].output == expected
    assert r.trigger.body == expected


def test_a_step_returning_a_lone_surrogate_from_json(db_url: str):
    @step
    def decoded() -> str:
        return str(json.loads('"\\ud83d"'))

    @workflow(name="json_surrogate")
    def json_surrogate():
        decoded()

    r = json_surrogate.run(store=db_url)
    _final(r)
    assert r.succeeded, r.error
    assert r.steps["decoded"].output == "\ufffd"


def _sql(db_file: Path, statement: str, *args: object) -> None:
    conn = sqlite3.connect(db_file, timeout=30)
    try:
        conn.execute(statement, args)
        conn.commit()
    finally:
        conn.close()


def test_an_executor_that_lost_its_lease_stops_and_writes_nothing(tmp_path: Path, db_url: str,
                                                                   monkeypatch: pytest.MonkeyPatch):
    """Another executor took the run: this one stops its work at once and never writes."""
    monkeypatch.setenv("BRAIN_LEASE_SECONDS", "30")
    marker = tmp_path / "second-ran"
    slow_done = tmp_path / "slow-done"

    @workflow(name="stolen")
    def stolen():
        shell("slow", command=f"sleep 5; touch {slow_done}")
        shell("second", command=f"touch {marker}")

    async def scenario() -> Any:
        async with Store(db_url) as store:
            run_id = await stolen.enqueue()
            execution = asyncio.create_task(execute_run(stolen, store, run_id, owner="me:1:a"))
            await _wait_status(store, run_id, "slow", "running")
            _sql(tmp_path / "brain.db", "UPDATE brain_runs SET lease_owner='thief:1:b' WHERE id=?",
                 run_id)
            await execution
            return await store.get_run(run_id)

    run = asyncio.run(scenario())
    # The slow step was killed, not waited for: it never reached its end.
    assert not slow_done.exists(), "the executor kept working without its lease"
    assert run.status == "running"            # the thief's to finish: nothing written by us
    assert run.steps["slow"].status == "running"
    assert run.steps["second"].status == "pending"
    assert not marker.exists()


async def _wait_status(store: Store, run_id: str, name: str, status: str) -> None:
    for _ in range(200):
        run = await store.get_run(run_id)
        if run.steps[name].status == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"step {name} never became {status}")


def _hold_write_lock(db_file: Path, seconds: float, held: threading.Event) -> threading.Thread:
    """Another connection holds SQLite's write lock (as another process would)."""
    def hold() -> None:
        conn = sqlite3.connect(db_file, timeout=30, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


def test_a_stall_longer_than_the_lease_stops_the_work_then_a_resume_finishes(
        tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch):
    """The lease could not be renewed in time, so it may be another's: stop, write nothing;
    the run is resumed afterwards and ends succeeded, its step never run twice at once."""
    monkeypatch.setenv("BRAIN_LEASE_SECONDS", "2")
    log = tmp_path / "log"

    @workflow(name="stalled")
    def stalled():
        shell("work", command=f"echo start >> {log}; sleep 6; echo end >> {log}")

    async def scenario() -> tuple[RunStatus | None, Any]:
        async with Store(db_url) as store:
            run_id = await stalled.enqueue()
            execution = asyncio.create_task(execute_run(stalled, store, run_id, owner="a:1:a"))
            await _wait_status(store, run_id, "work", "running")
            held = threading.Event()
            locker = _hold_write_lock(tmp_path / "brain.db", 4, held)
            assert held.wait(5)
            first = await execution
            locker.join()
            resumed = await execute_run(stalled, store, run_id, owner="b:1:b")
            return (first.status if first else None), resumed

    first_status, resumed = asyncio.run(scenario())
    assert first_status == "running"  # abandoned, nothing written after the stall
    assert resumed is not None
    _final(resumed)
    assert resumed.succeeded, resumed.error
    assert log.read_text().split() == ["start", "start", "end"]  # the first was killed


def test_a_lease_taken_by_another_executor_kills_the_steps_group_at_once(
        tmp_path: Path, db_url: str):
    """The heartbeat says the run is another's now: the step's process group is SIGKILLed
    (it traps SIGTERM, so a SIGTERM would show in its log), and nothing more is written."""
    from sqlalchemy import update

    from brain.store.tables import runs

    log = tmp_path / "log"

    @workflow(name="taken")
    def taken():
        shell("work", command=f"trap 'echo TERM >> {log}; exit 143' TERM; "
                              f"echo \"start $$\" >> {log}; sleep 30 & wait; echo end >> {log}")

    async def scenario() -> tuple[Any, Any]:
        async with Store(db_url) as store:
            run_id = await taken.enqueue()
            execution = asyncio.create_task(execute_run(taken, store, run_id, owner="a:1:a"))
            await _wait_status(store, run_id, "work", "running")
            async with store.engine.begin() as conn:
                await conn.execute(update(runs).where(runs.c.id == run_id)
                                   .values(lease_owner="b:1:b"))
            first = await asyncio.wait_for(execution, 30)
            return first, await store.get_run(run_id)

    first, stored = asyncio.run(scenario())
    assert first.status == "running"  # the executor recorded no end
    assert stored.steps["work"].status == "running"
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("start "), lines  # no TERM, no end
    assert not group_alive(int(lines[0].split()[1]))


def test_a_step_that_ended_as_the_cancel_arrived_keeps_its_status() -> None:
    """A step fails in the same instant a cancel is noticed: it stays ``failed`` (recorded
    and shown once), instead of being overwritten as ``cancelled``."""
    from brain.results import TriggerData
    from brain.runner.engine import RunExecution
    from brain.runner.events import StepEvent
    from brain.store import Store
    from brain.store.urls import MEMORY_URL

    @step
    async def breaks() -> str:
        raise RuntimeError("broken")

    @workflow(name="cancel_race")
    def cancel_race():
        breaks()
        shell("later", command="echo later")

    events: list[tuple[str, str]] = []

    async def scenario() -> Any:
        store = await Store(MEMORY_URL).open()
        await store.create_run(run_id="a1", workflow="cancel_race",
                               definition_hash=cancel_race.definition_hash, trigger=TriggerData(),
                               step_rows=[(s.name, s.kind) for s in cancel_race.spec.steps],
                               owner="me:1:a")
        execution: RunExecution

        def on_event(event: StepEvent) -> None:
            events.append((event.step, event.status))
            if event.step == "breaks" and event.status == "failed":
                execution.request_stop()  # the cancel is noticed in the same loop turn

        execution = RunExecution(cancel_race, store, "a1", "me:1:a", trigger=TriggerData(),
                                 previous_run_id=None, lease_seconds=30, on_event=on_event)
        await execution.execute()
        try:
            return await store.get_run("a1")
        finally:
            await store.close()

    run = asyncio.run(scenario())
    _final(run)
    assert run.steps["breaks"].status == "failed"
    assert run.status == "failed"
    assert [e for e in events if e[0] == "breaks" and e[1] != "running"] == [("breaks", "failed")]


def test_an_exception_whose_str_raises_fails_the_step(db_url: str):
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise Unprintable()

    @step
    def boom() -> str:
        raise Unprintable()

    @workflow(name="unprintable")
    def unprintable():
        boom()

    r = unprintable.run(store=db_url)
    _final(r)
    assert r.status == "failed"
    assert "Unprintable" in (r.steps["boom"].error or "")


def test_lone_surrogates_in_inputs_are_stored_replaced(db_url: str):
    @step
    def takes(x: str) -> str:
        return "ok"

    @workflow(name="surrogate_input")
    def surrogate_input():
        takes("caf\ud800")

    r = surrogate_input.run(store=db_url)
    _final(r)
    assert r.succeeded, r.error
    assert r.steps["takes"].inputs == {"x": "caf\ufffd"}
    r.to_json_dict()  # encodable


def test_an_in_process_run_outlives_a_stall_longer_than_its_lease(
        tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch):
    """``brain run`` and in-process calls have no server to resume them: once the database
    answers again, the run is resumed here and ends succeeded."""
    monkeypatch.setenv("BRAIN_LEASE_SECONDS", "2")
    log = tmp_path / "log"

    @workflow(name="outlives")
    def outlives():
        shell("a", command=f"echo a >> {log}; sleep 1")
        shell("b", command=f"echo b >> {log}; sleep 3")
        shell("c", command=f"echo c >> {log}")

    held = threading.Event()

    def lock_soon() -> None:
        for _ in range(200):
            if log.exists() and "b" in log.read_text():
                break
            time.sleep(0.05)
        _hold_write_lock(tmp_path / "brain.db", 5, held).join()

    locker = threading.Thread(target=lock_soon, daemon=True)
    locker.start()
    r = outlives.run(store=db_url)
    locker.join()
    assert held.is_set()
    _final(r)
    assert r.succeeded, r.error
    assert log.read_text().split()[-1] == "c"


def test_a_resume_ends_the_steps_a_killed_executor_left_running(tmp_path: Path, db_url: str,
                                                                brain_cmd: list[str]):
    """kill -9 of ``brain run`` leaves its step's process running; the resume ends it before
    the step runs again, so the two never run at the same time."""
    import os
    import signal
    import subprocess

    from support import write_source

    lock, log, first = tmp_path / "lock", tmp_path / "log", tmp_path / "first"
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "orphan.py", f'''
        from brain import shell, workflow

        @workflow
        def orphan():
            shell("work", command="if [ -e {first} ]; then S=1; else touch {first}; S=60; fi; "
                                  "echo start >> {log}; "
                                  "flock -n {lock} sleep $S || echo DOUBLE >> {log}")
    ''')
    env = dict(os.environ, BRAIN_LEASE_SECONDS="1", BRAIN_DATABASE_URL=db_url)
    proc = subprocess.Popen([*brain_cmd, "run", str(folder / "orphan.py")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        if log.exists() and "start" in log.read_text():
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    time.sleep(1.5)  # the lease runs out

    from brain.loader import load_target

    wf = load_target(str(folder / "orphan.py"))

    async def resume() -> Any:
        async with Store(db_url) as store:
            [run] = await store.list_runs(limit=1)
            return await execute_run(wf, store, run.run_id)

    try:
        result = asyncio.run(resume())
    finally:
        subprocess.run(["pkill", "-f", str(lock)], check=False)
    assert result is not None and result.succeeded, result and result.error
    assert log.read_text().split() == ["start", "start"]


# --- found by the attack on the store-and-layers work -----------------------------------


def test_concurrent_runs_share_a_store_given_unopened(tmp_path: Path) -> None:
    """Each run opens a store it was given unopened; the last one to finish closes it."""
    @step
    def bump(x: str) -> str:
        return x + "!"

    @workflow(name="shared_store")
    def shared_store():
        bump.with_options(name="c")(bump.with_options(name="b")(bump("a")))

    store = Store(f"sqlite:///{tmp_path / 'shared.db'}")

    async def go() -> list[Any]:
        return await asyncio.gather(*(shared_store.arun(str(i), store=store) for i in range(20)),
                                    return_exceptions=True)

    results = asyncio.run(go())
    assert all(not isinstance(r, BaseException) and r.succeeded for r in results), results
    assert not store.is_open
    with sqlite3.connect(tmp_path / "shared.db") as db:
        assert db.execute("SELECT status, count(*) FROM brain_runs GROUP BY 1").fetchall() == [
            ("succeeded", 20)]
        assert db.execute("SELECT DISTINCT status FROM brain_steps").fetchall() == [("succeeded",)]


async def _queued_then_taken(store: Store, wf: Any, owner: str) -> str:
    """A run queued, then taken by ``owner`` (another machine's executor, say), who does
    nothing more with it."""
    import uuid

    from brain.results import TriggerData

    run_id = uuid.uuid4().hex
    await store.enqueue_run(run_id=run_id, workflow=wf.name, definition_hash=wf.definition_hash,
                            trigger=TriggerData(event="manual", body=""),
                            step_rows=[(s.name, s.kind) for s in wf.spec.steps])
    assert await store.claim_run(run_id, owner, 30)
    return run_id


def test_a_run_whose_executor_died_before_choosing_previous_reads_the_previous_run(
        tmp_path: Path) -> None:
    from brain.runner import resume_run

    @workflow(name="remembers")
    def remembers():
        shell("now", argv=["echo", "now"])
        shell("then", argv=["echo", "previous={previous.now}"])

    url = f"sqlite:///{tmp_path / 'prev.db'}"

    async def go() -> Any:
        async with Store(url) as store:
            first = await remembers.arun(store=store)
            assert first.steps["then"].output == "previous="
            run_id = await _queued_then_taken(store, remembers, "elsewhere+x:1:dead")
            await store.expire_lease(run_id, "elsewhere+x:1:dead")  # it died at once
            result = await resume_run(remembers, store, run_id)
            return first, result

    first, result = asyncio.run(go())
    assert result is not None and result.status == RunStatus.SUCCEEDED, result
    assert result.steps["then"].output == "previous=now"
    assert result.previous_run_id == first.run_id


def test_a_run_cancelled_while_nobody_executed_it_is_not_started_again(tmp_path: Path) -> None:
    from brain.runner import resume_run

    marker = tmp_path / "ran"

    @workflow(name="cancel_then_resume")
    def cancel_then_resume():
        shell("touch", argv=["touch", str(marker)])

    url = f"sqlite:///{tmp_path / 'cancel.db'}"

    async def go() -> Any:
        async with Store(url) as store:
            run_id = await _queued_then_taken(store, cancel_then_resume, "elsewhere+x:1:gone")
            # Its executor is another machine's with a live lease: the cancel is requested...
            _, active = await store.request_cancel(run_id)
            assert active and (await store.run_row(run_id)).status == "running"  # type: ignore[union-attr]
            # ...then that executor freezes, its lease runs out, and a server resumes the run.
            await store.expire_lease(run_id, "elsewhere+x:1:gone")
            return await resume_run(cancel_then_resume, store, run_id)

    result = asyncio.run(go())
    assert result is not None and result.status == RunStatus.CANCELLED, result
    assert result.steps["touch"].status == "cancelled" and result.steps["touch"].tries == 0
    assert not marker.exists()


def test_text_with_nul_is_stored_on_postgresql_too(pg_url: str) -> None:
    """PostgreSQL refuses NUL in text: it is stored as U+FFFD there, never a failed run or
    a failed delivery."""
    import uuid

    from brain.results import TriggerData

    name = f"nul_{uuid.uuid4().hex[:8]}"

    @workflow(name=name)
    def nul():
        shell("printed", command="printf 'x\\000y'")

    async def go() -> Any:
        store = Store(pg_url)
        await store.upgrade_schema()
        try:
            result = await nul.arun("body\x00with nul", store=store)
            queued = uuid.uuid4().hex
            await store.enqueue_run(run_id=queued, workflow=name, definition_hash="h",
                                    trigger=TriggerData(event="webhook", body="a\x00b"),
                                    step_rows=[("printed", "shell")], delivery_id=queued)
            return result, await store.get_run(queued)
        finally:
            await store.close()

    result, queued = asyncio.run(go())
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert result.steps["printed"].output == "x\ufffdy"
    assert result.trigger.body == "body\ufffdwith nul"
    assert queued.trigger.body == "a\ufffdb"


def test_a_lease_monitor_that_dies_stops_the_work_like_a_lost_lease(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody renews the lease once the monitor is gone: the step is killed at once and
    nothing more is written; the run is taken over again once its lease has run out (here
    by the same in-process call), so the step never runs on beside its next try."""
    from brain import shell, workflow
    from brain.store import Store
    from brain.store.urls import MEMORY_URL

    monkeypatch.setenv("BRAIN_LEASE_SECONDS", "2")

    class BrokenHeartbeat(Store):
        beats = 0

        async def heartbeat(self, run_id: str, owner: str,
                            lease_seconds: float | None) -> tuple[bool, bool]:
            self.beats += 1
            if self.beats == 2:  # the monitor's first beat
                raise asyncio.CancelledError  # a stray cancellation, as asyncio can deliver
            return await super().heartbeat(run_id, owner, lease_seconds)

    @workflow(name="monitored")
    def monitored():
        shell("slow", command=f"cd {tmp_path}; if [ -e first ]; then echo again; "
                              f"else touch first; sleep 20; touch ended; fi")

    result = monitored.run(store=BrokenHeartbeat(MEMORY_URL))
    assert result.status == "succeeded", result.error
    assert result.steps["slow"].output == "again"
    assert result.steps["slow"].tries == 2
    assert not (tmp_path / "ended").exists(), "the first try ran on after the monitor died"
