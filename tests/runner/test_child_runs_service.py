"""Child runs across real processes (SPEC §22): a parent with 20 children finishes on
``brain worker --concurrency 1`` (a waiting parent holds no executor slot), and a ``kill
-9`` of the worker while a parent waits on its child leaves, after a restart, exactly one
child for the try and a parent that ends once.

Each test runs on a SQLite file and on a fresh PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import upgraded_schema, write_source

from brain.loader import load_file
from brain.results import FINISHED_RUN, RunStatus, TriggerData
from brain.runner.queueing import enqueue, new_run
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOWS = '''
from brain import for_each, shell, step, workflow


@step
def double(n: int) -> int:
    return 2 * n


@workflow
def twice(n: int) -> int:
    return double(n)


@workflow
def fan_out() -> None:
    with for_each(list(range(20)), max_parallel=20) as n:
        twice(n=n)


@workflow
def slow_child(marks: str) -> str:
    shell("start", argv=["sh", "-c", 'echo started >> "$1"', "sh", marks])
    shell("nap", argv=["sleep", "3"])
    return shell("done", argv=["echo", "child done"])


@workflow
def waits_on_child(marks: str) -> None:
    slow_child(marks=marks)
    shell("mark", argv=["sh", "-c", 'echo parent >> "$1"', "sh", marks])
'''


def brain_argv() -> list[str]:
    exe = shutil.which("brain", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "brain.cli"]


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    fresh: str = request.getfixturevalue("fresh_pg_url")
    asyncio.run(upgraded_schema(fresh))
    return fresh


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def start_worker(url: str, folder: Path, logs: Path, concurrency: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BRAIN_", "THE_BRAIN_", "LLM_"))}
    env.update(BRAIN_DATABASE_URL=url, BRAIN_LEASE_SECONDS="3")
    n = 1 + len(list(logs.glob("worker-*.out")))
    with (logs / f"worker-{n}.out").open("wb") as out:
        return subprocess.Popen([*brain_argv(), "worker", str(folder), "--concurrency",
                                 str(concurrency)], env=env, stdout=out,
                                stderr=subprocess.STDOUT)


async def queue(url: str, path: Path, workflow: str, params: dict[str, Any] | None = None) -> str:
    wf = load_file(path)[workflow]
    async with Store(url) as store:
        run_id, _ = await enqueue(store, new_run(wf, TriggerData(), params=params),
                                  trigger_key="api", max_queued=1000)
    assert run_id is not None
    return run_id


async def ended(url: str, run_id: str, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    async with Store(url) as store:
        while time.monotonic() < deadline:
            run = await store.get_run(run_id)
            if run.status in FINISHED_RUN:
                return run
            await asyncio.sleep(0.2)
    raise AssertionError(f"run {run_id} never ended")


def test_twenty_children_finish_on_one_slot(url: str, tmp_path: Path,
                                            workers: list[subprocess.Popen[bytes]]) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    path = write_source(folder, "flows.py", FLOWS)
    workers.append(start_worker(url, folder, tmp_path, concurrency=1))
    run_id = asyncio.run(queue(url, path, "fan_out"))
    parent = asyncio.run(ended(url, run_id, 120))
    assert parent.status == RunStatus.SUCCEEDED, parent.error

    async def children() -> list[Any]:
        async with Store(url) as store:
            return await store.list_runs(parent=run_id, limit=100)

    found = asyncio.run(children())
    assert len(found) == 20
    assert {c.status for c in found} == {RunStatus.SUCCEEDED}
    assert sorted(c.output for c in found) == sorted(2 * n for n in range(20))


def test_a_killed_worker_leaves_one_child_per_try(url: str, tmp_path: Path,
                                                  workers: list[subprocess.Popen[bytes]]) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    path = write_source(folder, "flows.py", FLOWS)
    marks = tmp_path / "marks.txt"
    worker = start_worker(url, folder, tmp_path, concurrency=2)
    workers.append(worker)
    run_id = asyncio.run(queue(url, path, "waits_on_child", {"marks": str(marks)}))
    deadline = time.monotonic() + 60
    while "started" not in (marks.read_text() if marks.exists() else ""):
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    worker.kill()  # kill -9 while the parent waits on its child
    worker.wait(10)
    workers.append(start_worker(url, folder, tmp_path, concurrency=2))
    parent = asyncio.run(ended(url, run_id, 90))
    assert parent.status == RunStatus.SUCCEEDED, parent.error

    async def children() -> list[Any]:
        async with Store(url) as store:
            return await store.list_runs(parent=run_id)

    found = asyncio.run(children())
    assert len(found) == 1 and found[0].status == RunStatus.SUCCEEDED
    assert marks.read_text().splitlines().count("parent") == 1
