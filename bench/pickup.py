"""Pickup latency of an idle ``brain worker`` for runs another process queues, on SQLite
(the worker looks again by itself, twice a second) and, with ``--pg URL``, on PostgreSQL
(``NOTIFY brain_queued`` wakes it).

One ``brain worker --concurrency 2`` (a separate process, ready first); the host app
(this script's process) queues ``--runs`` one-step runs one at a time, each after the last
ended and a random 0.3-1.3 s pause. Latency = the time the step's shell prints when it
starts minus the moment the enqueue returned, after its commit. The
tests (``tests/server/test_pickup.py``) check the mechanism; this prints the figures.
Targets: median under 1 s on SQLite, under 50 ms on PostgreSQL (``bench/scale_out.py``
has the PostgreSQL figure beside its drain times too).

Prints figures; asserts nothing.
    .venv/bin/python bench/pickup.py [--runs 20] [--pg postgresql+asyncpg://...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _scale_workers import database, workers  # noqa: E402

FLOWS = '''
from brain import shell, workflow


@workflow
def stamp():
    shell("now", command="date +%s.%N")
'''
FINISHED = ("succeeded", "failed", "cancelled")


async def host_app(url: str, runs: int, flows: Path) -> list[float]:
    """Queue ``runs`` runs one at a time, as a host app would; seconds from each enqueue
    returning (committed) to its step's start."""
    from brain.loader import load_file
    from brain.results import TriggerData
    from brain.runner.queueing import enqueue, new_run
    from brain.store import Store

    wf = load_file(flows)["stamp"]
    pick = random.Random(19)
    found = []
    async with Store(url) as store:
        for _ in range(runs):
            await asyncio.sleep(pick.uniform(0.3, 1.3))  # idle, at a random polling phase
            run_id, _ = await enqueue(store, new_run(wf, TriggerData()), trigger_key="api",
                                      max_queued=None)
            committed = time.time()
            deadline = time.monotonic() + 60
            while (run := await store.get_run(str(run_id))).status not in FINISHED:
                if time.monotonic() > deadline:
                    sys.exit(f"run {run_id} did not end within 60 s")
                await asyncio.sleep(0.005)
            if run.status != "succeeded":
                sys.exit(f"run {run_id} {run.status}: {run.error}")
            found.append(float(run.steps["now"].output or "nan") - committed)
    return found


def latencies(url: str, runs: int, flows: Path, env: dict[str, str], logs: Path) -> list[float]:
    """Seconds from each enqueue returning to its step starting, one idle worker."""
    with workers(1, flows, url, 2, env, logs):
        time.sleep(2)  # past its first looks: idle
        return asyncio.run(host_app(url, runs, flows))


def show(label: str, found: list[float]) -> None:
    """Print the median and worst of ``found`` (seconds) in ms."""
    ms = sorted(x * 1000 for x in found)
    print(f"  {label:<11} median {statistics.median(ms):7.1f} ms, worst {ms[-1]:7.1f} ms "
          f"({len(ms)} runs)")


def main() -> None:
    """Measure SQLite, then PostgreSQL when ``--pg`` is given; print both."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--pg", help="a PostgreSQL server URL (a database is created there)")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "THE_BRAIN_"))}
    print("pickup latency of an idle brain worker, runs queued one at a time by another process:")
    with tempfile.TemporaryDirectory(prefix="bench_pickup_") as tmp:
        flows = Path(tmp) / "flows.py"
        flows.write_text(FLOWS)
        show("SQLite", latencies(f"sqlite+aiosqlite:///{tmp}/brain.db", args.runs, flows, env,
                                 Path(tmp)))
        if args.pg:
            with database(args.pg, f"bench_pickup_{os.getpid()}", env) as url:
                show("PostgreSQL", latencies(url, args.runs, flows, env, Path(tmp)))


if __name__ == "__main__":
    main()
