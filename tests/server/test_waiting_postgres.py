"""Waiting runs shared by two executors on one PostgreSQL database (SPEC §9, §16).

A ``brain serve`` and a ``brain worker`` serve the same database (a fresh one of this
test's own); both fire due timers and take woken runs. Each timer, decision and signal
must continue its run exactly once: the step after the wait appends a line to a file
of its run's own, so a continuation that ran twice (or was lost) shows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import FINISHED, BrainServer, brain_argv, clean_env, step_of
from support import upgraded_schema, wait_for, write_source

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

RUNS = 100

FLOWS = '''
from brain import approval, shell, sleep, trigger, wait_for, workflow


@workflow
def nap_and_mark():
    sleep("nap", "1s")
    shell("mark", argv=["sh", "-c", 'echo x >> "$1"', "sh", trigger.body])


@workflow
def gated_mark():
    approval("go", prompt="Go?")
    shell("mark", argv=["sh", "-c", 'echo x >> "$1"', "sh", trigger.body])


@workflow
def signalled_mark():
    got = wait_for("ci", signal="ci-finished", key=trigger.body)
    shell("mark", argv=["sh", "-c", 'echo "$2" >> "$1"', "sh", trigger.body, f"{got}"])
'''


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    """The serve and worker a test starts, stopped (killed if need be) at its end."""
    started: list[Any] = []
    yield started
    for proc in started:
        if isinstance(proc, BrainServer):
            proc.kill()
            proc.stop()
        elif proc.poll() is None:
            proc.kill()
            proc.wait(10)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


step = step_of


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def start_all(server: BrainServer, workflow: str, bodies: list[str]) -> dict[str, str]:
    """Start a run of ``workflow`` per body (8 clients at once); ``{body: run id}``."""
    def post(body: str) -> tuple[str, str]:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            r = client.post(f"/api/workflows/{workflow}/runs", json={"body": body})
        assert r.status_code == 202, r.text
        return body, str(r.json()["run_id"])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return dict(pool.map(post, bodies))


def statuses(server: BrainServer, workflow: str) -> dict[str, str]:
    r = server.client.get("/api/runs", params={"workflow": workflow, "limit": 1000})
    assert r.status_code == 200, r.text
    return {run["run_id"]: run["status"] for run in r.json()}


def all_in(server: BrainServer, workflow: str, wanted: set[str], count: int) -> dict[str, str]:
    """Poll (bounded) until the ``count`` runs of ``workflow`` are all in ``wanted``."""
    def look() -> dict[str, str] | None:
        found = statuses(server, workflow)
        return found if len(found) == count and set(found.values()) <= wanted else None
    return wait_for(look, 90, f"the runs of {workflow} to be {sorted(wanted)}")


def test_two_executors_continue_each_wait_exactly_once(tmp_path: Path, fresh_pg_url: str,
                                                       processes: list[Any]) -> None:
    asyncio.run(upgraded_schema(fresh_pg_url))
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    env = clean_env(tmp_path / "unused.db", {"BRAIN_DATABASE_URL": fresh_pg_url})
    server = BrainServer(brain_argv(), folder, tmp_path, env)
    processes.append(server)
    with (tmp_path / "worker.out").open("wb") as out:
        worker = subprocess.Popen([*brain_argv(), "worker", str(folder)], env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
    processes.append(worker)
    server.wait_healthy()
    # Both executors are up (their heartbeat rows) before any run is queued.
    wait_for(lambda: {w["kind"] for w in server.client.get("/api/workers").json()}
             == {"serve", "worker"}, 30, "the worker to start")

    # 100 sleeps of ~1 s: both processes fire timers and take the woken runs.
    files = tmp_path / "naps"
    files.mkdir()
    naps = start_all(server, "nap_and_mark", [str(files / f"{i:03d}") for i in range(RUNS)])
    ended = all_in(server, "nap_and_mark", FINISHED, RUNS)
    assert set(ended.values()) == {"succeeded"}, {s: list(ended.values()).count(s)
                                                  for s in set(ended.values())}
    wrong = {body: lines(Path(body)) for body in naps if lines(Path(body)) != ["x"]}
    assert not wrong, f"files without exactly one line: {wrong}"
    for run_id in naps.values():
        run = server.run(run_id)
        nap, mark = step(run, "nap"), step(run, "mark")
        assert nap["tries"] == 1 and mark["tries"] == 1, run
        # Never before its wake time (how late: bench/waiting.py --postgres).
        assert at(mark["started_at"]) >= at(nap["output"]), f"run {run_id} woke early"

    # Decisions and keyed signals land on the server; either process continues the runs.
    gates = start_all(server, "gated_mark", [str(files / f"gate-{i}") for i in range(10)])
    waits = start_all(server, "signalled_mark", [str(files / f"sig-{i}") for i in range(10)])
    all_in(server, "gated_mark", {"waiting"}, 10)
    all_in(server, "signalled_mark", {"waiting"}, 10)
    for run_id in gates.values():
        r = server.client.post(f"/api/runs/{run_id}/steps/go/decision", json={"approve": True})
        assert r.status_code == 200, r.text
    for key, run_id in waits.items():
        r = server.client.post("/api/signals/ci-finished", json={"key": key, "body": {"k": key}})
        assert r.status_code == 200, r.text
        assert r.json() == {"resumed": [{"run_id": run_id, "step": "ci"}]}
    assert set(all_in(server, "gated_mark", FINISHED, 10).values()) == {"succeeded"}
    assert set(all_in(server, "signalled_mark", FINISHED, 10).values()) == {"succeeded"}
    for body in gates:
        assert lines(Path(body)) == ["x"], body
    for body in waits:
        assert lines(Path(body)) == [f'{{"k":"{body}"}}'], body
    time.sleep(0.5)  # nothing continues any of them again
    assert all(lines(Path(body)) == ["x"] for body in [*naps, *gates])
    assert worker.poll() is None, (tmp_path / "worker.out").read_text()
