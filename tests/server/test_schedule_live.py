"""Schedules and file watchers in a live ``brain serve``, and the once-per-fire claim (SPEC §5).

Two serving processes may not share one SQLite file (SPEC §4), so the claim
that keeps servers sharing a database from double-firing is tested on the
store directly: the same ``(workflow, trigger key, fire time)`` makes one run,
whichever connection gets there first.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from serve_support import BrainServer
from support import sql_rows, wait_for, write_source

from brain.results import TriggerData
from brain.store import Store

# uvicorn re-raises the SIGTERM it handled once shut down gracefully, so the status may be -15.
CLEAN_EXIT = (0, -signal.SIGTERM)


class Servers:
    """``brain serve FOLDER --port 0`` on this test's database; stopped after the test."""

    def __init__(self, brain_cmd: list[str], tmp_path: Path) -> None:
        self.brain_cmd, self.tmp_path = brain_cmd, tmp_path
        self.started: list[BrainServer] = []

    def start(self, folder: Path) -> BrainServer:
        env = dict(os.environ,
                   BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{self.tmp_path / 'brain.db'}")
        server = BrainServer(self.brain_cmd, folder, self.tmp_path, env, start_new_session=True)
        self.started.append(server)
        server.wait_healthy()
        return server


@pytest.fixture
def serve(brain_cmd: list[str], tmp_path: Path) -> Iterator[Servers]:
    servers = Servers(brain_cmd, tmp_path)
    yield servers
    for server in servers.started:
        server.stop()


def runs_of(tmp_path: Path, workflow: str, event: str) -> list[dict[str, object]]:
    try:
        rows = sql_rows(tmp_path, "SELECT * FROM brain_runs WHERE workflow = ? AND trigger_event = ? "
                                  "ORDER BY created_at", workflow, event)
    except Exception:  # the schema is not there yet
        return []
    return [dict(r) for r in rows]


# --- every(seconds=1) ---------------------------------------------------------------------------


def test_every_second_fires_in_a_live_server(tmp_path: Path, brain_cmd: list[str],
                                             serve: Servers) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "ticker.py", '''
        from brain import every, shell, trigger, workflow

        @workflow(triggers=[every(seconds=1)])
        def ticker():
            shell("tick", argv=["echo", trigger.event, trigger.body])
    ''')
    server = serve.start(folder)

    fired = wait_for(lambda: (lambda r: r if len(r) >= 2 else None)(
        [r for r in runs_of(tmp_path, "ticker", "schedule") if r["status"] == "succeeded"]),
        15, "two succeeded schedule runs")
    bodies = [str(r["trigger_body"]) for r in fired]
    assert len(set(bodies)) == len(bodies), "a fire ran twice"
    for body in bodies:
        when = datetime.fromisoformat(body)  # the body is the fire time
        assert when.tzinfo is not None and when.utcoffset() == timedelta(0)
        assert when.microsecond == 0, "every(seconds=1) fires on whole seconds since the epoch"
    assert all(r["trigger_key"] == "every:1" for r in fired)
    claims = sql_rows(tmp_path, "SELECT count(*) FROM brain_fires WHERE workflow = 'ticker'")[0][0]
    assert claims >= len(fired)
    outputs = sql_rows(tmp_path, "SELECT output FROM brain_steps WHERE run_id = ?", fired[0]["id"])
    assert outputs[0][0] == f"schedule {bodies[0]}"
    assert server.stop() in CLEAN_EXIT
    assert "Traceback" not in server.output()


def test_catchup_all_runs_each_missed_fire(tmp_path: Path, brain_cmd: list[str], db_url: str,
                                          serve: Servers) -> None:
    """SPEC §5: after downtime ``catchup="all"`` runs each missed fire (default overlap)."""
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "minutely.py", '''
        from brain import cron, shell, trigger, workflow

        @workflow(triggers=[cron("* * * * *", catchup="all")])
        def minutely():
            shell("show", argv=["echo", trigger.body])
    ''')
    # A minute that ends meanwhile adds a fire of its own: the missed ones are still there.
    minute = datetime.now(UTC).replace(second=0, microsecond=0)

    async def last_claimed_three_minutes_ago() -> None:
        async with Store(db_url) as store:
            assert await store.claim_fire("minutely", "cron:* * * * *@UTC", minute - timedelta(minutes=3))

    asyncio.run(last_claimed_three_minutes_ago())
    server = serve.start(folder)
    missed = {(minute - timedelta(minutes=n)).isoformat() for n in (2, 1, 0)}
    try:
        wait_for(lambda: missed <= {r["trigger_body"] for r in runs_of(tmp_path, "minutely", "schedule")},
                 30, "a run for each missed fire")
    except AssertionError:
        ran = sorted(str(r["trigger_body"]) for r in runs_of(tmp_path, "minutely", "schedule"))
        skipped = [line for line in server.output().splitlines() if "skipped" in line]
        raise AssertionError(f"missed fires {sorted(missed)}; runs only for {ran}; "
                             f"the server logged: {skipped}") from None


# --- the claim that keeps several servers from double-firing -------------------------------------


async def _enqueue_fire(store: Store, fire_time: datetime, workflow: str = "nightly",
                        key: str = "cron:0") -> tuple[str | None, bool]:
    return await store.enqueue_run(
        run_id=uuid.uuid4().hex, workflow=workflow, definition_hash="h" * 64,
        trigger=TriggerData(event="schedule", body=fire_time.isoformat()),
        step_rows=[("only", "shell")], trigger_key=key, fire_time=fire_time)


async def test_a_fire_is_claimed_once(db_url: str) -> None:
    fire = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    async with Store(db_url) as store:
        run_id, created = await _enqueue_fire(store, fire)
        assert created and run_id is not None
        assert await _enqueue_fire(store, fire) == (None, False)
        # The same instant written in another zone is the same fire.
        local = fire.astimezone(timezone(timedelta(hours=3)))
        assert await _enqueue_fire(store, local) == (None, False)
        assert not await store.claim_fire("nightly", "cron:0", fire)
        # Another time, another trigger or another workflow is another fire.
        assert (await _enqueue_fire(store, fire + timedelta(minutes=1)))[1]
        assert (await _enqueue_fire(store, fire, key="cron:1"))[1]
        assert (await _enqueue_fire(store, fire, workflow="other"))[1]
        assert await store.last_fire("nightly", "cron:0") == fire + timedelta(minutes=1)
        runs = await store.list_runs(workflow="nightly", limit=100)
    assert len(runs) == 3
    assert sorted(r.trigger.body for r in runs).count(fire.isoformat()) == 2  # cron:0 and cron:1


async def test_two_servers_racing_for_one_fire_make_one_run(db_url: str) -> None:
    """Two stores (two connections, as two servers would hold) claim the same fires at once."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    async with Store(db_url) as one, Store(db_url) as two:
        for i in range(20):
            fire = base + timedelta(seconds=i)
            results = await asyncio.gather(_enqueue_fire(one, fire), _enqueue_fire(two, fire))
            assert sorted(created for _, created in results) == [False, True], results
        runs = await one.list_runs(workflow="nightly", limit=100)
    assert len(runs) == 20
    assert len({r.trigger.body for r in runs}) == 20


# --- watch() ------------------------------------------------------------------------------------


def test_a_file_written_in_a_watched_folder_starts_a_run(tmp_path: Path, brain_cmd: list[str],
                                                         serve: Servers) -> None:
    folder = tmp_path / "flows"
    inbox = folder / "inbox"
    inbox.mkdir(parents=True)
    write_source(folder, "inboxer.py", '''
        from brain import shell, trigger, watch, workflow

        @workflow(triggers=[watch("inbox", patterns=["*.txt"], debounce_seconds=0.2)])
        def inboxer():
            shell("seen", argv=["echo", trigger.body, trigger.path])
    ''')
    server = serve.start(folder)

    (inbox / "ignored.csv").write_text("not a match\n")
    target = inbox / "note.txt"
    with target.open("w") as handle:  # written in chunks: one run, after it settles
        for i in range(5):
            handle.write(f"line {i}\n")
            handle.flush()
            time.sleep(0.02)

    fired = wait_for(lambda: [r for r in runs_of(tmp_path, "inboxer", "file")
                              if r["status"] in ("succeeded", "failed")], 15, "a file run")
    run = fired[0]
    assert run["status"] == "succeeded", run["error"]
    expected = os.path.normpath(os.path.abspath(target))
    assert run["trigger_path"] == expected
    assert run["trigger_body"] == "created"
    output = sql_rows(tmp_path, "SELECT output FROM brain_steps WHERE run_id = ?", run["id"])[0][0]
    assert output == f"created {expected}"

    # A later change to the same file is a "modified" run; the .csv never fires.
    time.sleep(0.5)
    with target.open("a") as handle:
        handle.write("more\n")
    wait_for(lambda: len(runs_of(tmp_path, "inboxer", "file")) >= 2, 15, "a second file run")
    time.sleep(0.6)  # longer than the debounce: nothing else may arrive
    runs = runs_of(tmp_path, "inboxer", "file")
    assert [(r["trigger_body"], r["trigger_path"]) for r in runs] == [
        ("created", expected), ("modified", expected)]
    assert server.stop() in CLEAN_EXIT
    assert "Traceback" not in server.output()


def test_a_missing_watch_folder_is_a_clear_start_up_error(tmp_path: Path, brain_cmd: list[str]) -> None:
    """SPEC §5: a missing folder is a start-up error; §6: a clear message, never a traceback."""
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "lost.py", '''
        from brain import shell, trigger, watch, workflow

        @workflow(triggers=[watch("no-such-folder")])
        def lost():
            shell("seen", argv=["echo", trigger.path])
    ''')
    env = dict(os.environ, BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}")
    proc = subprocess.run([*brain_cmd, "serve", str(folder), "--port", "0"], env=env,
                          capture_output=True, text=True, timeout=60)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert str(folder / "no-such-folder") in output
    assert "Traceback" not in output, output
