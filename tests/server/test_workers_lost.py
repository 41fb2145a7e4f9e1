"""``brain workers`` after a ``kill -9`` (SPEC §14): a killed worker's last heartbeat counted
the run it was executing; once another process has resumed that run and finished it, the
killed worker's row (shown lost) executes nothing.

Real ``brain worker`` processes on a real SQLite file and on PostgreSQL; every state is
waited for by bounded polling.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from serve_support import brain_argv, clean_env, start_worker, stop_all
from support import upgraded_schema, wait_for, write_source

from brain._clock import utcnow
from brain.loader import load_file
from brain.results import TriggerData
from brain.runner.queueing import enqueue, new_run
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"
    return str(request.getfixturevalue("fresh_pg_url"))


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    stop_all(started)


def _flows(folder: Path, gate: Path) -> Path:
    folder.mkdir()
    return write_source(folder, "flows.py", f"""
        from brain import shell, workflow

        @workflow
        def held():
            # Runs until the test opens the gate: the worker is killed while it waits here.
            shell("work", command="while [ ! -f {gate} ]; do sleep 0.05; done; echo through")
    """)


def _workers_json(url: str, tmp_path: Path) -> list[dict[str, Any]]:
    """``brain workers --json``, read with a one-second lease (a silent row is lost soon)."""
    env = clean_env(tmp_path / "unused.db", {"BRAIN_DATABASE_URL": url,
                                             "BRAIN_LEASE_SECONDS": "1"})
    proc = subprocess.run([*brain_argv(), "workers", "--json"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout))


def _row_of(rows: list[dict[str, Any]], pid: int) -> dict[str, Any] | None:
    return next((r for r in rows if r["pid"] == pid), None)


def _run_status(url: str, run_id: str) -> str:
    async def read() -> str:
        async with Store(url) as store:
            return str((await store.get_run(run_id, with_steps=False)).status)
    return asyncio.run(read())


def test_a_killed_worker_counts_no_run_once_another_finished_it(
        tmp_path: Path, database_url: str, workers: list[subprocess.Popen[bytes]]) -> None:
    gate = tmp_path / "gate"
    flows = _flows(tmp_path / "flows", gate)
    asyncio.run(upgraded_schema(database_url))
    killed = start_worker(database_url, flows.parent, tmp_path, concurrency=1)
    workers.append(killed)

    async def queue() -> str:
        wf = load_file(flows)["held"]
        async with Store(database_url) as store:
            run_id, _ = await enqueue(store, new_run(wf, TriggerData()), trigger_key="api",
                                      max_queued=None)
        return str(run_id)

    run_id = asyncio.run(queue())
    try:
        # The worker's own heartbeat says it executes the run (beats come every few seconds).
        wait_for(lambda: (_row_of(_workers_json(database_url, tmp_path), killed.pid)
                          or {}).get("executing") == 1, 60, "the worker to count its run")
        assert _run_status(database_url, run_id) == "running"
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(30)
    finally:
        gate.touch()  # the killed worker's step (left behind) ends too
    # Another worker takes the run over (its owner is a dead process of this machine) and
    # finishes it.
    workers.append(start_worker(database_url, flows.parent, tmp_path, concurrency=1))
    wait_for(lambda: _run_status(database_url, run_id) in ("succeeded", "failed"), 60,
             "the run to be resumed and finished")
    assert _run_status(database_url, run_id) == "succeeded"

    rows = wait_for(lambda: (lambda rows: rows if (_row_of(rows, killed.pid) or {}).get("lost")
                             else None)(_workers_json(database_url, tmp_path)),
                    60, "the killed worker to be shown lost")
    dead = _row_of(rows, killed.pid)
    assert dead is not None and dead["lost"] is True
    assert dead["executing"] == 0, rows
    assert any(r["pid"] == workers[-1].pid for r in rows), rows

    env = clean_env(tmp_path / "unused.db", {"BRAIN_DATABASE_URL": database_url,
                                             "BRAIN_LEASE_SECONDS": "1"})
    text = subprocess.run([*brain_argv(), "workers"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    line = next(x for x in text.stdout.splitlines() if f":{killed.pid} " in x)
    assert "LOST" in line and "executing 0 " in line, text.stdout


def test_a_live_worker_removes_rows_silent_for_over_an_hour(
        tmp_path: Path, workers: list[subprocess.Popen[bytes]]) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"
    flows = _flows(tmp_path / "flows", tmp_path / "gate")
    asyncio.run(upgraded_schema(url))

    async def silent(worker_id: str, pid: int, minutes: int) -> None:
        async with Store(url) as store:
            await store.worker_heartbeat(worker_id, host="elsewhere", pid=pid, kind="worker",
                                         started_at=utcnow() - timedelta(hours=3), executing=1)
            await store.db.write("UPDATE brain_workers SET heartbeat_at = :at WHERE id = :id",
                                 {"at": utcnow() - timedelta(minutes=minutes), "id": worker_id})

    asyncio.run(silent("long-gone", 71, minutes=61))
    asyncio.run(silent("recently-gone", 72, minutes=10))
    live = start_worker(url, flows.parent, tmp_path, concurrency=1)
    workers.append(live)
    rows = wait_for(lambda: (lambda rows: rows if _row_of(rows, 71) is None
                             and _row_of(rows, live.pid) else None)(_workers_json(url, tmp_path)),
                    60, "the live worker to remove the row silent for over an hour")
    kept = _row_of(rows, 72)
    assert kept is not None and kept["lost"] and kept["executing"] == 0, rows
