"""Throughput: finished runs per second of a 3-step ``@step`` workflow, by ``brain worker`` count.

For each configuration, ``--runs`` (default 400) runs are queued first (one
transaction each, through the store, as ``POST /api/runs`` would), then the
workers start (``brain worker flows.py``, separate processes, default
concurrency) and the clock runs from their start until the last run has
finished; every run must have succeeded. Configurations, side by side in one
run: 1, 2 and 4 workers on PostgreSQL , 1 worker on SQLite.
Each PostgreSQL configuration gets a database of its own, dropped afterwards.

Prints runs per second and the ratio of each against one worker on the same
database (target: 2 workers at least 1.6x one worker on PostgreSQL). Asserts
nothing but that every run succeeded.

    .venv/bin/python bench/throughput.py [--runs 400] [--pg postgresql+asyncpg://...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

FLOWS = '''
from brain import step, workflow


@step
def fetch(seed: str) -> str:
    return seed + "-fetched"


@step
def shape(text: str) -> str:
    return text.upper()


@step
def keep(text: str) -> str:
    return str(len(text))


@workflow(name="three")
def three():
    keep(shape(fetch("x")))
'''


async def _queue(url: str, flows: Path, runs: int) -> None:
    from brain.loader import load_file
    from brain.results import TriggerData
    from brain.store import Store

    wf = load_file(flows)["three"]
    store = Store(url)
    await store.upgrade_schema()  # a new database: create the schema first
    try:
        trigger = TriggerData.from_input({"body": ""}, event="manual")
        rows = [(s.name, s.kind) for s in wf.spec.steps]
        await asyncio.gather(*(store.enqueue_run(
            run_id=uuid.uuid4().hex, workflow=wf.name, definition_hash=wf.definition_hash,
            trigger=trigger, step_rows=rows, trigger_key="api") for _ in range(runs)))
    finally:
        await store.close()


async def _progress(url: str) -> tuple[int, int]:
    """(finished, succeeded) runs."""
    from brain.store import Store

    async with Store(url) as store:
        finished = await store.count_active()
        total = len(await store.list_runs(limit=100_000))
        succeeded = len(await store.list_runs(status="succeeded", limit=100_000))
    return total - finished, succeeded


def measure(url: str, workers: int, runs: int, flows: Path, env: dict[str, str]) -> float:
    """Runs per second with ``workers`` worker processes draining ``runs`` queued runs."""
    asyncio.run(_queue(url, flows, runs))
    brain = str(Path(sys.executable).parent / "brain")
    env = dict(env, BRAIN_DATABASE_URL=url)
    t0 = time.perf_counter()
    procs = [subprocess.Popen([brain, "worker", str(flows)], env=env, cwd=flows.parent,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(workers)]
    try:
        while True:
            finished, succeeded = asyncio.run(_progress(url))
            if finished >= runs:
                break
            if time.perf_counter() - t0 > 600:
                raise SystemExit(f"only {finished} of {runs} runs finished in 10 minutes")
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    if succeeded != runs:
        raise SystemExit(f"{runs - succeeded} of {runs} runs did not succeed")
    return runs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--pg", default=os.environ.get(
        "BRAIN_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"))
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRAIN_")}
    with tempfile.TemporaryDirectory() as tmp:
        flows = Path(tmp) / "flows.py"
        flows.write_text(textwrap.dedent(FLOWS))
        results: list[tuple[str, int, float]] = []
        for workers in (1, 2, 4):
            name = f"bench_{uuid.uuid4().hex[:10]}"
            _psql(args.pg, f"CREATE DATABASE {name}")
            try:
                rate = measure(args.pg.rsplit("/", 1)[0] + "/" + name, workers, args.runs, flows,
                               env)
            finally:
                _psql(args.pg, f"DROP DATABASE {name} WITH (FORCE)")
            results.append(("PostgreSQL", workers, rate))
            print(f"PostgreSQL, {workers} worker(s): {rate:7.1f} runs/s", flush=True)
        rate = measure(f"sqlite+aiosqlite:///{tmp}/bench.db", 1, args.runs, flows, env)
        results.append(("SQLite", 1, rate))
        print(f"SQLite,     1 worker:    {rate:7.1f} runs/s", flush=True)
    one = results[0][2]
    print()
    print("| database | workers | runs/s | vs 1 worker (PostgreSQL) |")
    print("|---|---|---|---|")
    for db, workers, rate in results:
        print(f"| {db} | {workers} | {rate:.1f} | {rate / one:.2f}x |")
    print(f"\n2 workers / 1 worker on PostgreSQL: {results[1][2] / one:.2f}x (target >= 1.6x); "
          f"{os.cpu_count()} CPU cores on this machine, shared with PostgreSQL and this script")


def _psql(url: str, sql: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    async def go() -> None:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(go())


if __name__ == "__main__":
    main()
