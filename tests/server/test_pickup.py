"""Pickup (SPEC §19): a run queued by another process starts on an idle ``brain worker``;
on PostgreSQL because ``NOTIFY brain_queued`` wakes it, on SQLite because it looks again
by itself.

On PostgreSQL the worker here looks at the queue unasked only once an hour, so a run it
starts within the test's minute was announced to it: the mechanism is shown without timing
it, even after its listening connection is cut. The step's shell prints the time it
started, which must follow the enqueue's commit (one machine, one clock); how soon after is
printed here and measured by ``bench/pickup.py`` (the machine is shared: no bound on it).
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_support import clean_env, start_worker, stop_all
from support import upgraded_schema, write_source

from brain.loader import load_file
from brain.results import TriggerData
from brain.runner.queueing import enqueue, new_run
from brain.store import Store

#: Runs queued one after another per phase: each shows the mechanism on its own (the
#: latencies are bench/pickup.py's to measure), a few show it is no one-off.
RUNS = 6
FLOWS = '''
from brain import shell, workflow


@workflow
def stamp():
    shell("now", command="date +%s.%N")
'''
#: ``brain`` whose idle takers look at the queue unasked once an hour, not every second.
HOURLY_LOOKS = [sys.executable, "-c", """
import brain.service.taking
brain.service.taking.IDLE_POLL_SECONDS = 3600.0
from brain.cli import main
main()
"""]


@pytest.fixture
def worker_of(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(url: str, folder: Path, *, hourly: bool = False) -> subprocess.Popen[bytes]:
        if hourly:
            with (tmp_path / "worker.out").open("wb") as out:
                started.append(subprocess.Popen(
                    [*HOURLY_LOOKS, "worker", str(folder), "--concurrency", "2"],
                    env=clean_env(tmp_path / "unused.db", {"BRAIN_DATABASE_URL": url}),
                    stdout=out, stderr=subprocess.STDOUT))
        else:
            started.append(start_worker(url, folder, tmp_path, concurrency=2))
        return started[-1]

    yield start
    stop_all(started)


async def _latencies(url: str, folder: Path, worker: subprocess.Popen[bytes]) -> list[float]:
    """Queue ``RUNS`` runs one after another (each once the last ended): how long after the
    enqueue committed each step started."""
    wf = load_file(folder / "stamp.py")["stamp"]
    found: list[float] = []

    async def queue(store: Store) -> str:
        run_id, _ = await enqueue(store, new_run(wf, TriggerData()), trigger_key="api",
                                  max_queued=None)
        return str(run_id)

    async with Store(url) as store:
        # The worker is up once it has taken a first run.
        await _ended(store, await queue(store), worker)
        for _ in range(RUNS):
            await asyncio.sleep(0.2)  # the worker is idle, waiting
            queued_at = time.time()
            run_id = await queue(store)
            run = await _ended(store, run_id, worker)
            assert run.succeeded, run.error
            found.append(float(run.steps["now"].output or "nan") - queued_at)
    return found


async def _ended(store: Store, run_id: str, worker: subprocess.Popen[bytes]) -> Any:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = await store.get_run(run_id)
        if run.status in ("succeeded", "failed", "cancelled"):
            return run
        assert worker.poll() is None, "the worker died"
        await asyncio.sleep(0.005)
    raise AssertionError(f"run {run_id} did not end")


def test_an_idle_postgres_worker_is_woken_by_a_run_queued_elsewhere(
        tmp_path: Path, fresh_pg_url: str, worker_of: Any) -> None:
    asyncio.run(upgraded_schema(fresh_pg_url))
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "stamp.py", FLOWS)
    worker = worker_of(fresh_pg_url, folder, hourly=True)
    # Each of the runs starts (within _ended's minute) though the worker would not look for
    # an hour: the NOTIFY woke it.
    found = asyncio.run(_latencies(fresh_pg_url, folder, worker))
    print(f"pickup on PostgreSQL: median {statistics.median(found) * 1000:.1f} ms, "
          f"max {max(found) * 1000:.1f} ms over {RUNS} runs")
    assert all(t > 0 for t in found)
    # The listening connection is cut (a restart, a proxy): the worker listens again, and
    # is woken again.
    assert asyncio.run(_cut_listeners(fresh_pg_url)) == 1
    found = asyncio.run(_latencies(fresh_pg_url, folder, worker))
    assert all(t > 0 for t in found)
    assert asyncio.run(_cut_listeners(fresh_pg_url)) == 1, "one listener, listening again"


async def _cut_listeners(url: str) -> int:
    """End the database connections listening for queued runs; how many there were."""
    from sqlalchemy import text

    async with Store(url) as store, store.engine.connect() as conn:
        rows = await conn.execute(text(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'brain-listen' AND datname = current_database()"))
        return len(rows.fetchall())


def test_an_idle_sqlite_worker_starts_a_run_queued_elsewhere_by_itself(
        tmp_path: Path, worker_of: Any) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"
    asyncio.run(upgraded_schema(url))
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "stamp.py", FLOWS)
    worker = worker_of(url, folder)
    # Nothing announces a run on SQLite: each starts because the idle worker looks again.
    found = asyncio.run(_latencies(url, folder, worker))
    print(f"pickup on SQLite: median {statistics.median(found) * 1000:.1f} ms, "
          f"max {max(found) * 1000:.1f} ms")
    assert all(t > 0 for t in found)
