"""Several ``brain worker`` processes on one PostgreSQL database (SPEC §9, §19): a
concurrency key's limit holds across all of them while other keys go on, nothing runs
twice and nothing is lost; and work that waits runs on several workers at once (how much
sooner it drains is ``bench/scale_out.py``'s figure).

Each test has a fresh database of its own; runs are queued by this test process (another
process than the workers), as a host app's ``wf.enqueue()`` would.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_support import start_worker, stop_all
from support import upgraded_schema, write_source

from brain.loader import load_file
from brain.results import TriggerData
from brain.runner.queueing import enqueue, new_run
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOWS = '''
import asyncio

from brain import shell, step, trigger, workflow


@workflow(concurrency_key="{trigger.headers.x-repo}", max_concurrent_runs=1)
def deploy():
    shell("go", argv=["sh", "-c", 'echo "start $(date +%s.%N) $2" >> "$1"; sleep 0.2; '
                      'echo "end $(date +%s.%N) $2" >> "$1"', "sh",
                      f"{trigger.body}", f"{trigger.headers['x-repo']}"])


@step
async def wait_for_io() -> str:
    await asyncio.sleep(0.5)  # a model call, an HTTP request: time spent waiting
    return "done"


@workflow
def nap():
    wait_for_io()
'''


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[bytes]] = []

    def start(url: str, folder: Path, count: int) -> list[subprocess.Popen[bytes]]:
        procs = [start_worker(url, folder, tmp_path) for _ in range(count)]
        started.extend(procs)
        return procs

    yield start
    stop_all(started)


async def _up(store: Store, count: int) -> None:
    """Wait until ``count`` workers have registered."""
    from sqlalchemy import text

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        async with store.engine.connect() as conn:
            rows = (await conn.execute(text("SELECT count(*) FROM brain_workers"))).scalar()
        if rows == count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the workers did not start")


async def _drain(store: Store, ids: list[str]) -> float:
    """Wait until every run ended: the seconds from the first created to the last ended."""
    from sqlalchemy import text

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        async with store.engine.connect() as conn:
            row = (await conn.execute(text(
                "SELECT count(*) FILTER (WHERE status IN ('succeeded', 'failed', 'cancelled')),"
                " count(*) FILTER (WHERE status = 'succeeded'), min(created_at), max(ended_at) "
                "FROM brain_runs"))).one()
        if row[0] == len(ids):
            assert row[1] == len(ids), "every run succeeded"
            return float((row[3] - row[2]).total_seconds())
        await asyncio.sleep(0.1)
    raise AssertionError("the runs did not all end")


def test_a_key_limit_holds_across_three_workers_while_keys_overlap(
        tmp_path: Path, fresh_pg_url: str, workers: Any) -> None:
    asyncio.run(upgraded_schema(fresh_pg_url))
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    wf = load_file(folder / "flows.py")["deploy"]
    marks = {repo: tmp_path / f"{repo}.log" for repo in ("core", "web")}
    workers(fresh_pg_url, folder, 3)

    async def go() -> list[str]:
        async with Store(fresh_pg_url) as store:
            await _up(store, 3)
            ids = []
            for i in range(24):  # interleaved: core, web, core, web, ...
                repo = ("core", "web")[i % 2]
                trigger = TriggerData(event="webhook", body=str(marks[repo]),
                                      headers={"x-repo": repo})
                run_id, _ = await enqueue(store, new_run(wf, trigger), trigger_key="api",
                                          max_queued=None)
                ids.append(str(run_id))
            await _drain(store, ids)
            runs = [await store.get_run(run_id) for run_id in ids]
            assert [r.concurrency_key for r in runs] == ["core", "web"] * 12
            return ids

    asyncio.run(go())
    spans: dict[str, list[tuple[float, float]]] = {}
    for repo, path in marks.items():
        lines = path.read_text().split("\n")[:-1]
        assert len(lines) == 24, "each of the 12 runs ran its step once"
        starts = [float(ln.split()[1]) for ln in lines if ln.startswith("start")]
        ends = [float(ln.split()[1]) for ln in lines if ln.startswith("end")]
        # The limit of 1 per key: every start follows the end of the run before it.
        order = [ln.split()[0] for ln in lines]
        assert order == ["start", "end"] * 12, f"two {repo} runs overlapped: {order}"
        spans[repo] = list(zip(starts, ends, strict=True))
    core, web = spans["core"], spans["web"]
    assert any(a < d and c < b for a, b in core for c, d in web), "the two keys ran side by side"


def test_work_that_waits_runs_on_four_workers_at_once(
        tmp_path: Path, fresh_pg_url: str, workers: Any) -> None:
    """120 runs that each wait 0.5 s, queued before four workers of 4 slots each start: more
    runs are under way at once than one worker has slots, and never more than the four have.
    How much sooner that drains than on one worker is ``bench/scale_out.py``'s figure."""
    from sqlalchemy import text

    asyncio.run(upgraded_schema(fresh_pg_url))
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    wf = load_file(folder / "flows.py")["nap"]

    async def queue() -> list[str]:
        async with Store(fresh_pg_url) as store:
            return [str((await enqueue(store, new_run(wf, TriggerData()), trigger_key="api",
                                       max_queued=None))[0]) for _ in range(120)]

    async def spans(ids: list[str]) -> list[tuple[Any, Any]]:
        async with Store(fresh_pg_url) as store:
            await _drain(store, ids)
            async with store.engine.connect() as conn:
                rows = await conn.execute(text("SELECT started_at, ended_at FROM brain_runs"))
                return [(row[0], row[1]) for row in rows]

    ids = asyncio.run(queue())
    workers(fresh_pg_url, folder, 4)  # --concurrency 4 each
    ran = asyncio.run(spans(ids))
    assert len(ran) == 120
    # The most runs under way at one moment: an end before a start at the same instant.
    moments = sorted([(start, 1) for start, _ in ran] + [(end, -1) for _, end in ran],
                     key=lambda moment: (moment[0], moment[1]))
    under_way = most = 0
    for _, change in moments:
        under_way += change
        most = max(most, under_way)
    print(f"120 runs waiting 0.5 s on four workers: at most {most} at once")
    assert 4 < most <= 16, most
