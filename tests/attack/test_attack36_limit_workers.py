"""Attack 36 (SPEC §26, docs/scaling.md "Rate limits across workers"): ``brain worker``
processes on one PostgreSQL database share a limit's window, and a worker killed with
SIGKILL neither starves the limit forever nor lets the worker that resumes its run
overshoot: a request killed mid-flight counts ``per`` + its step's timeout; a run killed
while its step waits for room is resumed by another worker and finishes once.

The provider is a real OpenAI-compatible server on 127.0.0.1 in this test process, noting
when each request arrives; leases are 2 s so that a dead worker's runs are taken over fast.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runner.test_limits import TimedServer, most_in_any_window
from serve_support import brain_argv, clean_env, stop_all
from support import write_source

from brain import Limit
from brain.loader import load_file
from brain.results import TriggerData
from brain.runner.queueing import enqueue, new_run
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOWS = '''
from brain import Limit, llm, workflow


@workflow(limits={{"atk36-pg": Limit(requests=1, per="2s")}})
def ask():
    llm("ask", prompt="question {{trigger.body}}", model="m", provider_url="{url}",
        limit="atk36-pg", timeout_seconds=10)
'''


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(url: str, folder: Path) -> subprocess.Popen[bytes]:
        env = clean_env(tmp_path / "unused.db", {"BRAIN_DATABASE_URL": url,
                                                 "BRAIN_LEASE_SECONDS": "2"})
        out = (tmp_path / f"worker-{len(started) + 1}.out").open("wb")
        proc = subprocess.Popen([*brain_argv(), "worker", str(folder), "--concurrency", "2"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        started.append(proc)
        return proc

    yield start
    stop_all(started)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


async def _until(check: Any, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError("waited too long")


def test_a_killed_worker_neither_starves_nor_overshoots_the_limit(
        tmp_path: Path, schema_pg_url: str, workers: Any) -> None:
    with TimedServer() as server:
        server.respond(content="never read", delay=8.0)  # the first request hangs
        folder = tmp_path / "flows"
        folder.mkdir()
        write_source(folder, "flows.py", FLOWS.format(url=server.url))
        wf = load_file(folder / "flows.py")["ask"]

        async def go() -> list[Any]:
            async with Store(schema_pg_url) as store:
                async def queue(body: str) -> str:
                    run_id, _ = await enqueue(store, new_run(wf, TriggerData(body=body)),
                                              trigger_key="api", max_queued=None)
                    return str(run_id)

                async def ended(run_id: str) -> Any:
                    run = await store.get_run(run_id)
                    return run if run.status in ("succeeded", "failed", "cancelled") else None

                async def step_running(run_id: str) -> bool:
                    run = await store.get_run(run_id)
                    return run.steps["ask"].status == "running"

                # 1. Killed mid-request: the one who resumes waits out the dead request's
                # per + timeout, then asks; the run ends.
                first_worker = workers(schema_pg_url, folder)
                mid = await queue("mid")
                await _until(lambda: asyncio.sleep(0, len(server.times) >= 1))
                _kill(first_worker)
                second_worker = workers(schema_pg_url, folder)
                first = await _until(lambda: ended(mid), 40)

                # 2. Killed while waiting for room (the window is full for 6 s more): the
                # run is taken over and finishes once.
                await store.limit_take("atk36-pg", Limit(requests=1, per="2s"), 0, 4.0)
                waiting = await queue("waiting")
                await _until(lambda: step_running(waiting))
                await asyncio.sleep(0.5)
                assert len(server.times) == 2
                _kill(second_worker)
                workers(schema_pg_url, folder)
                second = await _until(lambda: ended(waiting), 40)
                return [first, second]

        runs = asyncio.run(go())
        times = list(server.times)
    assert [r.status for r in runs] == ["succeeded", "succeeded"], [r.error for r in runs]
    bodies = [r.json["messages"][-1]["content"] for r in server.requests]
    assert bodies == ["question mid", "question mid", "question waiting"]
    assert most_in_any_window(times, 2.0) == 1
