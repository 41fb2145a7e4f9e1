"""Attack (issue 31): a failed run is retried exactly once, whatever door, even when several
processes retry it at the same moment, on SQLite and on PostgreSQL; an active or succeeded
run is never retried."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brain import shell, workflow
from brain.store import Store

# Each racer waits for a common start time, then retries through the service API
# (the same call `brain retry` and POST /api/runs/{id}/retry make).
_RACER = r"""
import asyncio, sys, time
from brain.store import Store
from brain.service.api import AlreadyRetried
from brain._errors import RunConflict

async def main(url, run_id, start):
    async with Store(url) as store:
        while time.time() < start:
            await asyncio.sleep(0.001)
        try:
            new = await store.retry_run(run_id)
        except AlreadyRetried:
            print("REFUSED"); return
        except RunConflict as exc:
            print("CONFLICT", exc); return
        print("QUEUED", new)

asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
"""


def _failed_run(url: str) -> str:
    @workflow(name="retryrace")
    def retryrace():
        shell("ok", argv=["echo", "fine"])
        shell("bad", argv=["false"])

    result = retryrace.run(store=url)
    assert result.status == "failed"
    return result.run_id


async def _retries_of(url: str, run_id: str) -> list[str]:
    async with Store(url) as store:
        runs = await store.list_runs(limit=200)
        return [r.run_id for r in runs if r.retry_of == run_id]


def _race(url: str, run_id: str, tmp_path: Path, racers: int) -> list[str]:
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    start = time.time() + 4.0
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [subprocess.Popen([sys.executable, str(script), url, run_id, str(start)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(racers)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outs.append(out.strip())
    return outs


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_racing_retries_from_several_processes_queue_exactly_one(
        backend: str, db_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    url = db_url if backend == "sqlite" else request.getfixturevalue("fresh_pg_url")
    if backend == "postgres":
        from support import upgraded_schema
        asyncio.run(upgraded_schema(url))
    for _ in range(3):
        run_id = _failed_run(url)
        outs = _race(url, run_id, tmp_path, racers=6)
        queued = [o for o in outs if o.startswith("QUEUED")]
        assert len(queued) == 1, outs
        assert all(o == "REFUSED" or o.startswith("QUEUED") for o in outs), outs
        assert len(asyncio.run(_retries_of(url, run_id))) == 1


def test_racing_cli_retries_queue_exactly_one(db_url: str, brain_cmd: list[str],
                                              tmp_path: Path) -> None:
    run_id = _failed_run(db_url)
    env = {**os.environ, "BRAIN_DATABASE_URL": db_url}
    procs = [subprocess.Popen([*brain_cmd, "retry", run_id[:10]], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(5)]
    codes = []
    for proc in procs:
        proc.communicate(timeout=120)
        codes.append(proc.returncode)
    assert sorted(codes) == [0, 1, 1, 1, 1], codes
    assert len(asyncio.run(_retries_of(db_url, run_id))) == 1


def test_a_succeeded_or_running_run_is_never_retried(db_url: str) -> None:
    from brain._errors import RunConflict

    @workflow(name="okrun")
    def okrun():
        shell("ok", argv=["echo", "fine"])

    done = okrun.run(store=db_url)
    assert done.succeeded

    async def go() -> None:
        async with Store(db_url) as store:
            with pytest.raises(RunConflict):
                await store.retry_run(done.run_id)
    asyncio.run(go())
    assert asyncio.run(_retries_of(db_url, done.run_id)) == []
