"""Attack (round 32): a child run is queued exactly once per try of its step, even when the
process executing the parent is killed with SIGKILL at any moment; a ``brain worker
--concurrency 1`` then finishes the parent (no deadlock on its children), which ends once,
each child step's output being its child's output. Real ``brain run`` / ``brain worker``
subprocesses on one SQLite file."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from serve_support import brain_argv, clean_env, stop_all
from support import write_source

SOURCE = '''
from brain import for_each, shell, workflow


@workflow
def kid(i: str) -> str:
    shell("nap", command="sleep 0.2")
    return shell("say", argv=["printf", "%s", f"kid-{i}"])


@workflow
def mom(items: list[str] = ["a", "b", "c", "d", "e", "f"]):
    with for_each(items, max_parallel=3) as item:
        kid(i=f"{item}")
'''


def rows(db: Path, sql: str, *args: object) -> list[sqlite3.Row]:
    with sqlite3.connect(db, timeout=30) as conn:
        conn.row_factory = sqlite3.Row
        return conn.execute(sql, args).fetchall()


def recorded(db: Path) -> bool:
    """Whether the parent's run is recorded yet."""
    try:
        return bool(db.exists() and rows(db, "select 1 from brain_runs where workflow = 'mom'"))
    except sqlite3.OperationalError:  # no schema yet
        return False


@pytest.mark.parametrize("delay", [0.0, 0.15, 0.3, 0.5, 0.8, 1.2, 2.0])
def test_sigkill_of_the_parents_executor_queues_no_second_child(tmp_path: Path,
                                                                 delay: float) -> None:
    folder = tmp_path / "wf"
    folder.mkdir()
    write_source(folder, "mom.py", SOURCE)
    db = tmp_path / "brain.db"
    env = clean_env(db, {"BRAIN_LEASE_SECONDS": "2"})
    run = subprocess.Popen([*brain_argv(), "run", f"{folder / 'mom.py'}:mom"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    deadline = time.monotonic() + 30
    while not recorded(db):
        assert run.poll() is None and time.monotonic() < deadline, "the run was never recorded"
        time.sleep(0.02)
    time.sleep(delay)  # then SIGKILL, at some moment of the parent's and children's work
    os.killpg(run.pid, signal.SIGKILL)
    run.wait(10)
    with (tmp_path / "worker.out").open("wb") as out:
        worker = subprocess.Popen([*brain_argv(), "worker", str(folder), "--concurrency", "1"],
                                  env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            found = rows(db, "select status from brain_runs where workflow = 'mom'") \
                if db.exists() else []
            if found and found[0]["status"] in ("succeeded", "failed", "cancelled"):
                break
            assert time.monotonic() < deadline, (found, (tmp_path / "worker.out").read_text())
            time.sleep(0.2)
    finally:
        stop_all([worker])
    mom = rows(db, "select id, status, error from brain_runs where workflow = 'mom'")
    assert len(mom) == 1 and mom[0]["status"] == "succeeded", dict(mom[0])
    steps = rows(db, "select name, status, output, tries from brain_steps where run_id = ? "
                     "and name like 'kid[%'", mom[0]["id"])
    assert len(steps) == 6
    kids = rows(db, "select id, parent_step, parent_try, status, output from brain_runs "
                    "where parent_run_id = ?", mom[0]["id"])
    per_try = [(k["parent_step"], k["parent_try"]) for k in kids]
    assert len(per_try) == len(set(per_try)), per_try  # one child per try, never two
    for s in steps:
        mine = [k for k in kids if k["parent_step"] == s["name"]]
        assert s["status"] == "succeeded", dict(s)
        # no retries and no failure: the one try's child, found again after the crash
        assert len(mine) == 1, (s["name"], [dict(k) for k in mine])
        assert mine[0]["status"] == "succeeded"
        index = int(s["name"][4:-1])
        assert s["output"] == f"kid-{'abcdef'[index]}"


def test_two_workers_on_postgresql_queue_one_child_per_try(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ``brain worker --concurrency 1`` on one PostgreSQL database, 4 parents of 6
    children each, one worker SIGKILLed mid-way: every try has one child, every parent ends
    succeeded once."""
    import asyncio
    import runpy

    import asyncpg

    folder = tmp_path / "wf"
    folder.mkdir()
    path = write_source(folder, "mom.py", SOURCE)
    monkeypatch.setenv("BRAIN_DATABASE_URL", pg_url)
    loaded = runpy.run_path(str(path))
    ids = [asyncio.run(loaded["mom"].enqueue()) for _ in range(4)]
    env = clean_env(tmp_path / "unused.db", {"BRAIN_DATABASE_URL": pg_url,
                                             "BRAIN_LEASE_SECONDS": "2"})
    workers = []
    for n in range(2):
        with (tmp_path / f"worker-{n}.out").open("wb") as out:
            workers.append(subprocess.Popen(
                [*brain_argv(), "worker", str(folder), "--concurrency", "1"], env=env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
    dsn = pg_url.replace("postgresql+asyncpg://", "postgresql://")

    async def query(sql: str, *args: object) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(dsn)
        try:
            return list(await conn.fetch(sql, *args))
        finally:
            await conn.close()

    try:
        time.sleep(2.5)
        os.killpg(workers[0].pid, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while True:
            ended = asyncio.run(query("select id, status from brain_runs where id = any($1) "
                                      "and status in ('succeeded', 'failed', 'cancelled')",
                                      ids))
            if len(ended) == len(ids):
                break
            assert time.monotonic() < deadline, (tmp_path / "worker-1.out").read_text()
            time.sleep(0.3)
    finally:
        stop_all(workers)
    assert {r["status"] for r in ended} == {"succeeded"}, [dict(r) for r in ended]
    kids = asyncio.run(query("select parent_run_id, parent_step, parent_try, status from "
                             "brain_runs where parent_run_id = any($1)", ids))
    per_try = [(k["parent_run_id"], k["parent_step"], k["parent_try"]) for k in kids]
    assert len(per_try) == len(set(per_try))
    per_step = {(k["parent_run_id"], k["parent_step"]) for k in kids}
    assert len(per_step) == 4 * 6
    assert len(kids) == 4 * 6, sorted(per_try)  # nothing failed: one try, one child each
