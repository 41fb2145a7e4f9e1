"""The host application of ``bench/scale_out.py``: queues runs from a process of its own.

It imports the workflow file, as a team's own app would, and commits each run to
``BRAIN_DATABASE_URL`` for the ``brain worker`` processes to take, one transaction per
run, in one of two ways (HOW):

- ``shared``: one store opened once, each run queued through
  ``brain.runner.queueing.enqueue`` (what ``wf.enqueue()`` calls), as a long-lived app
  holding a connection pool would; this keeps the enqueuer's own cost out of the figures.
- ``wf``: ``await wf.enqueue()`` per run, the public call: each call opens the database
  (engine, connection, schema check), commits, and closes it again.

It prints one JSON object on stdout.

    python bench/_scale_enqueue.py batch HOW FLOWS WORKFLOW RUNS PARALLEL
        queue RUNS runs, PARALLEL in flight at a time: {"first": t, "last": t}
    python bench/_scale_enqueue.py latency HOW FLOWS WORKFLOW RUNS SEED
        queue RUNS runs one at a time, each after the previous one ended and a random
        pause (so the worker is idle and its polling phase is random); the workflow's one
        step outputs ``time.time()`` when it starts:
        {"latencies": [step start - return], "from_created": [step start - created_at],
         "calls": [enqueue call seconds]}

The commit happens between the run's ``created_at`` (stamped by this process's clock just
before its insert) and the enqueue returning (with ``wf``, after closing its connection
too): the first latency is a lower bound, the second an upper bound.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

FINISHED = ("succeeded", "failed", "cancelled")


def load(flows: Path, name: str) -> Any:
    """The workflow ``name`` of the workflow file ``flows`` (its ``WORKFLOWS`` mapping)."""
    spec = importlib.util.spec_from_file_location("scale_flows", flows)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WORKFLOWS[name]


async def queuer(how: str, wf: Any) -> tuple[Callable[[], Awaitable[str]], Any]:
    """A function queueing one run of ``wf`` and returning its id, and the store to close
    afterwards (``None`` for ``wf``)."""
    if how == "wf":
        return wf.enqueue, None
    from brain.results import TriggerData
    from brain.runner.queueing import enqueue, new_run, queue_limit
    from brain.store import Store

    store = await Store().open()

    async def one() -> str:
        trigger = TriggerData.from_input({"body": None, "headers": {}}, event="manual")
        run_id, _ = await enqueue(store, new_run(wf, trigger), trigger_key="api",
                                  max_queued=queue_limit())
        return str(run_id)

    return one, store


async def batch(queue: Callable[[], Awaitable[str]], runs: int, parallel: int) -> dict[str, Any]:
    gate = asyncio.Semaphore(parallel)

    async def one() -> None:
        async with gate:
            await queue()

    first = time.time()
    await asyncio.gather(*(one() for _ in range(runs)))
    return {"first": first, "last": time.time()}


async def latency(queue: Callable[[], Awaitable[str]], runs: int, seed: int) -> dict[str, Any]:
    import asyncpg  # type: ignore[import-untyped]

    url = os.environ["BRAIN_DATABASE_URL"].replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(url)
    pick = random.Random(seed)
    latencies, from_created, calls = [], [], []
    try:
        for _ in range(runs):
            await asyncio.sleep(pick.uniform(0.3, 1.3))  # idle, at a random polling phase
            t0 = time.time()
            run_id = await queue()
            committed = time.time()
            calls.append(committed - t0)
            deadline = time.monotonic() + 60
            while True:
                status = await conn.fetchval("SELECT status FROM brain_runs WHERE id = $1",
                                             run_id)
                if status in FINISHED:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"run {run_id} did not end within 60 s (status {status})")
                await asyncio.sleep(0.01)
            output = await conn.fetchval("SELECT output FROM brain_steps WHERE run_id = $1",
                                         run_id)
            created = await conn.fetchval("SELECT created_at FROM brain_runs WHERE id = $1",
                                          run_id)
            if status != "succeeded":
                raise SystemExit(f"run {run_id} {status}")
            latencies.append(float(output) - committed)
            from_created.append(float(output) - created.timestamp())
    finally:
        await conn.close()
    return {"latencies": latencies, "from_created": from_created, "calls": calls}


async def main_async(mode: str, how: str, flows: Path, name: str, runs: int,
                     extra: int) -> dict[str, Any]:
    queue, store = await queuer(how, load(flows, name))
    try:
        if mode == "batch":
            return await batch(queue, runs, extra)
        return await latency(queue, runs, extra)
    finally:
        if store is not None:
            await store.close()


def main() -> None:
    mode, how, flows, name, runs, extra = sys.argv[1:7]
    print(json.dumps(asyncio.run(main_async(mode, how, Path(flows), name, int(runs),
                                            int(extra)))))


if __name__ == "__main__":
    main()
