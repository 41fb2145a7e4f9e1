"""Sleeps and waiting runs in a real ``brain serve`` (SPEC §16), on SQLite.

A waiting run holds no executor slot, no lease and no process: a sleeper on
``--concurrency 1`` lets another run through, a thousand waiting runs do not slow
a new one. Timers live in the database: a sleep outlives ``kill -9`` of the server
and continues exactly once after the restart. A waiting run can be cancelled at
once (its timer then never continues it) and is listed and counted while it
waits; one continued after a step it ran changed fails (SPEC §24; a change to a later
step goes on: tests/runner/test_changes_live.py).

The steps after the waits append a line to a file named by the run's body, so a
continuation that ran twice (or never) shows. Times are only asserted as an order
(never before the wake time): the machine is shared, and how late a wake is, or how long a
new run takes beside a thousand waiting, is a figure for ``bench/waiting.py`` and
``bench/waiting_beside.py``.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from serve_support import BrainServer, brain_argv, clean_env, step_of
from support import wait_for, write_source

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

#: A step that appends one line to the file its run's body names.
MARK = """shell("{name}", argv=["sh", "-c", 'echo {name} >> "$1"', "sh", f"{{trigger.body}}.{name}"])"""


@pytest.fixture
def servers() -> Iterator[list[BrainServer]]:
    """Servers a test starts, killed (if still up) at its end."""
    started: list[BrainServer] = []
    yield started
    for server in started:
        server.kill()
        server.stop()


def serve(folder: Path, tmp_path: Path, servers: list[BrainServer], *extra: str,
          env: dict[str, str] | None = None) -> BrainServer:
    server = BrainServer(brain_argv(), folder, tmp_path,
                         env or clean_env(tmp_path / "brain.db"), extra_args=list(extra))
    servers.append(server)
    server.wait_healthy()
    return server


step = step_of


def at(text: str) -> datetime:
    """A time of the run JSON (``...Z`` or ``+00:00``)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def brain(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*brain_argv(), *args], env=env, capture_output=True, text=True,
                          timeout=60)


def metric(server: BrainServer, pattern: str) -> float | None:
    """The value of the ``/metrics`` sample matching ``pattern`` (a regex), if any."""
    r = server.client.get("/metrics")
    assert r.status_code == 200, r.text
    for line in r.text.splitlines():
        if re.fullmatch(pattern + r" (\S+)", line):
            return float(line.rsplit(" ", 1)[1])
    return None


# --- a sleep frees its slot and wakes on time ----------------------------------------------------


def test_a_sleeping_run_frees_its_slot_and_wakes_on_time(tmp_path: Path,
                                                         servers: list[BrainServer]) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", f'''
        from brain import shell, sleep, trigger, workflow

        @workflow
        def napper():
            sleep("nap", "3s")
            {MARK.format(name="after")}

        @workflow
        def quick():
            shell("hi", argv=["echo", "hi"])
    ''')
    server = serve(folder, tmp_path, servers, "--concurrency", "1")
    base = tmp_path / "napper"
    sleeper = server.start_run("napper", str(base))
    nap = step(server.wait_waiting(sleeper), "nap")
    wake = at(nap["waiting_for"]["until"])
    assert metric(server, r'brain_runs_waiting\{kind="sleep",workflow="napper"\}') == 1.0
    # Nothing executes while it sleeps (the gauge drops just after the run is let go of).
    wait_for(lambda: metric(server, "brain_runs_executing") == 0.0, 5, "no run executing")

    other = server.wait_run(server.start_run("quick"))
    still = server.run(sleeper)
    # The only slot was free: the other run ended while the sleeper still slept.
    assert other["status"] == "succeeded", other
    assert still["status"] == "waiting", still
    assert at(other["ended_at"]) < wake

    ended = server.wait_run(sleeper)
    assert ended["status"] == "succeeded", ended
    assert step(ended, "nap")["output"] == nap["waiting_for"]["until"]  # the wake time
    after = step(ended, "after")
    assert at(after["started_at"]) >= wake, "the step after the sleep started before its wake time"
    assert after["tries"] == 1
    assert lines(base.with_name("napper.after")) == ["after"]


# --- a sleep outlives kill -9 -----------------------------------------------------------------------


def test_sleeps_survive_kill_9_and_continue_once(tmp_path: Path,
                                                 servers: list[BrainServer]) -> None:
    """One sleep falls due while no server is up (fired at the restart), one after the
    restart (fired on time): each run continues exactly once."""
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", f'''
        from brain import shell, sleep, trigger, workflow

        @workflow
        def short_nap():
            {MARK.format(name="before")}
            sleep("nap", "1s")
            {MARK.format(name="after")}

        @workflow
        def long_nap():
            {MARK.format(name="before")}
            sleep("nap", "4s")
            {MARK.format(name="after")}
    ''')
    first = serve(folder, tmp_path, servers)
    bases = {"short_nap": tmp_path / "short", "long_nap": tmp_path / "long"}
    runs = {wf: first.start_run(wf, str(base)) for wf, base in bases.items()}
    wakes = {wf: at(step(first.wait_waiting(run_id), "nap")["waiting_for"]["until"])
             for wf, run_id in runs.items()}
    first.kill()  # kill -9, both runs waiting

    # The short sleep falls due while nothing serves the database.
    time.sleep(max(0.0, (wakes["short_nap"] - datetime.now(wakes["short_nap"].tzinfo))
                   .total_seconds()) + 0.3)
    second = serve(folder, tmp_path, servers)
    for wf, run_id in runs.items():
        ended = second.wait_run(run_id, seconds=30)
        assert ended["status"] == "succeeded", (wf, ended)
        assert step(ended, "before")["tries"] == 1 and step(ended, "after")["tries"] == 1
        assert at(step(ended, "after")["started_at"]) >= wakes[wf]
        assert lines(bases[wf].with_name(bases[wf].name + ".before")) == ["before"], wf
        assert lines(bases[wf].with_name(bases[wf].name + ".after")) == ["after"], wf


# --- a changed workflow -----------------------------------------------------------------------------


def test_a_run_continued_after_a_step_it_ran_changed_fails(tmp_path: Path,
                                                           servers: list[BrainServer]) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    source = '''
        from brain import shell, sleep, trigger, workflow

        @workflow
        def deploy():
            shell("build", command="echo %s")
            sleep("nap", "1s")
            shell("after", argv=["sh", "-c", 'echo after >> "$1"', "sh", trigger.body])
    '''
    write_source(folder, "deploy.py", source % "old")
    first = serve(folder, tmp_path, servers)
    marker = tmp_path / "deployed"
    run_id = first.start_run("deploy", str(marker))
    first.wait_waiting(run_id)
    assert first.stop() == 0  # a graceful stop leaves the waiting run waiting

    write_source(folder, "deploy.py", source % "new")  # a step it ran changed
    second = serve(folder, tmp_path, servers)
    ended = second.wait_run(run_id, seconds=30)
    assert ended["status"] == "failed", ended
    assert ended["error"] == "workflow changed since the run started: step 'build' " \
                             "(command changed)"
    assert step(ended, "after")["status"] != "succeeded"
    assert not marker.exists()


# --- cancelling a waiting run -----------------------------------------------------------------------


def test_a_waiting_run_is_cancelled_at_once_and_its_timer_never_continues_it(
        tmp_path: Path, servers: list[BrainServer]) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", f'''
        from brain import shell, sleep, trigger, workflow

        @workflow
        def napper():
            # Long enough for `brain cancel` to start and answer on a loaded machine: a timer
            # that falls due before the cancel proves nothing (the run would just succeed).
            sleep("nap", "8s")
            {MARK.format(name="after")}
    ''')
    env = clean_env(tmp_path / "brain.db")
    server = serve(folder, tmp_path, servers, env=env)
    bases = {how: tmp_path / how for how in ("api", "cli", "kept")}
    runs = {how: server.start_run("napper", str(base)) for how, base in bases.items()}
    wake = max(at(step(server.wait_waiting(run_id), "nap")["waiting_for"]["until"])
               for run_id in runs.values())

    r = server.client.post(f"/api/runs/{runs['api']}/cancel")
    assert r.is_success and r.json()["status"] == "cancelled", r.text
    assert server.run(runs["api"])["status"] == "cancelled"  # at once: nobody executes it
    done = brain(env, "cancel", runs["cli"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert server.run(runs["cli"])["status"] == "cancelled"
    again = server.client.post(f"/api/runs/{runs['api']}/cancel")
    assert again.status_code == 409, again.text

    # The run left alone wakes and continues: the timers fell due and were fired.
    kept = server.wait_run(runs["kept"])
    assert kept["status"] == "succeeded", kept
    assert lines(bases["kept"].with_name("kept.after")) == ["after"]
    time.sleep(max(0.0, (wake - datetime.now(wake.tzinfo)).total_seconds()) + 1.0)
    for how in ("api", "cli"):
        run = server.run(runs[how])
        assert run["status"] == "cancelled", run
        assert step(run, "nap")["status"] == "cancelled"
        assert step(run, "after")["status"] == "cancelled"
        assert not bases[how].with_name(f"{how}.after").exists()


# --- a thousand waiting runs ------------------------------------------------------------------------


@pytest.mark.timeout(600)  # 1,000 runs through a 2-slot server: minutes on a busy machine
def test_a_thousand_waiting_runs_leave_the_slots_to_a_new_one(tmp_path: Path,
                                                               servers: list[BrainServer]) -> None:
    """``--concurrency 2`` and 1,000 runs waiting for a decision: a new run still goes
    through (the waiting runs hold no slot), nothing executes, and the waiting runs are
    counted and listed. How long the new run takes is ``bench/waiting_beside.py``'s figure."""
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", '''
        from brain import approval, shell, trigger, workflow

        @workflow
        def held():
            approval("go", prompt=f"Release {trigger.body}?")
            shell("release", argv=["echo", "released"])

        @workflow
        def quick():
            shell("hi", argv=["echo", "hi"])
    ''')
    env = clean_env(tmp_path / "brain.db", {"BRAIN_MAX_QUEUED_RUNS": "5000", "COLUMNS": "250"})
    server = serve(folder, tmp_path, servers, "--concurrency", "2", env=env)

    def quick_run() -> None:
        run = server.wait_run(server.start_run("quick"), seconds=60)
        assert run["status"] == "succeeded", run

    quick_run()

    def post(first: int) -> list[str]:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            ids = []
            for i in range(first, 1000, 8):
                r = client.post("/api/workflows/held/runs", json={"body": f"v{i}"})
                assert r.status_code == 202, r.text
                ids.append(r.json()["run_id"])
            return ids

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        held = {run_id for ids in pool.map(post, range(8)) for run_id in ids}
    assert len(held) == 1000
    wait_for(lambda: metric(server, r'brain_runs_waiting\{kind="approval",workflow="held"\}')
             == 1000.0, 300, "the 1,000 runs to wait")

    for _ in range(3):  # a new run goes through each time: no slot is held by the waiting
        quick_run()
    assert metric(server, r'brain_runs_waiting\{kind="approval",workflow="held"\}') == 1000.0
    wait_for(lambda: metric(server, "brain_runs_executing") == 0.0, 30, "no run executing")

    listed = server.client.get("/api/runs", params={"status": "waiting", "limit": 1000})
    assert listed.status_code == 200, listed.text
    assert {r["run_id"] for r in listed.json()} == held
    assert {r["status"] for r in listed.json()} == {"waiting"}
    shown = brain(env, "runs", "--status", "waiting", "--limit", "5", "--json")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert len(rows) == 5 and {r["run_id"] for r in rows} <= held
    assert {r["status"] for r in rows} == {"waiting"}
    table = brain(env, "runs", "--status", "waiting", "--limit", "3")
    assert table.returncode == 0, table.stderr
    assert table.stdout.count("waiting") >= 3 and "held" in table.stdout

    # The executors' heartbeat row says the same (written every few seconds).
    def idle_worker() -> bool:
        rows = server.client.get("/api/workers").json()
        return any(r["pid"] == server.proc.pid and r["executing"] == 0 for r in rows)
    wait_for(idle_worker, 15, "the serving process to say it executes nothing")
