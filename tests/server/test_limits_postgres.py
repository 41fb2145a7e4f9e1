"""Rate limits across processes (SPEC §26): two ``brain worker`` processes on one
PostgreSQL database share a limit's window, so no window of ``per`` seconds sees more
requests reach the provider than the limit allows, whichever worker sends them.

The provider is a real OpenAI-compatible server on 127.0.0.1 in this test process, noting
when each request arrives; the runs are queued by this process, as a host app would.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runner.test_limits import TimedServer, most_in_any_window
from serve_support import start_worker, stop_all
from support import upgraded_schema, write_source

from brain.loader import load_file
from brain.results import TriggerData
from brain.runner.queueing import enqueue, new_run
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOWS = '''
from brain import Limit, llm, trigger, workflow


@workflow(limits={{"model": Limit(requests=5, per="2s")}})
def ask():
    llm("ask", prompt=f"question {{trigger.body}}", model="m", provider_url="{url}",
        limit="model")
'''


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(url: str, folder: Path, count: int) -> None:
        started.extend(start_worker(url, folder, tmp_path, concurrency=4) for _ in range(count))

    yield start
    stop_all(started)


async def _up(store: Store, count: int) -> None:
    from sqlalchemy import text

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        async with store.engine.connect() as conn:
            if (await conn.execute(text("SELECT count(*) FROM brain_workers"))).scalar() == count:
                return
        await asyncio.sleep(0.1)
    raise AssertionError("the workers did not start")


async def _drain(store: Store, ids: list[str]) -> list[Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        runs = [await store.get_run(run_id) for run_id in ids]
        if all(r.status in ("succeeded", "failed", "cancelled") for r in runs):
            return runs
        await asyncio.sleep(0.1)
    raise AssertionError("the runs did not all end")


def test_two_workers_share_one_window(tmp_path: Path, fresh_pg_url: str, workers: Any) -> None:
    asyncio.run(upgraded_schema(fresh_pg_url))
    with TimedServer() as server:
        folder = tmp_path / "flows"
        folder.mkdir()
        write_source(folder, "flows.py", FLOWS.format(url=server.url))
        wf = load_file(folder / "flows.py")["ask"]
        workers(fresh_pg_url, folder, 2)  # 8 executors between them, for 5 a window

        async def go() -> list[Any]:
            async with Store(fresh_pg_url) as store:
                await _up(store, 2)
                ids = []
                for i in range(12):
                    run_id, _ = await enqueue(store, new_run(wf, TriggerData(body=str(i))),
                                              trigger_key="api", max_queued=None)
                    ids.append(str(run_id))
                return await _drain(store, ids)

        runs = asyncio.run(go())
    assert all(r.succeeded for r in runs), [r.error for r in runs]
    assert len(server.times) == 12
    assert most_in_any_window(server.times, 2.0) == 5
    logs = "".join(p.read_text() for p in tmp_path.glob("worker-*.out"))
    assert "Traceback" not in logs
