"""In-process runs on PostgreSQL: runs per second and database transactions per run.

Side by side in one go, each in a child process of its own and, on PostgreSQL, a
database of its own (created here, dropped afterwards):

- ``brain``: ``--runs`` (default 200) sequential ``wf()`` calls of a 3-step ``@step``
  workflow on PostgreSQL, after one warm-up run; runs/s and database transactions per
  run, from the ``xact_commit + xact_rollback`` delta of the bench's database in
  ``pg_stat_database`` (read after the child exited, so every backend has reported;
  the delta covers the whole child: its one opening of the store included);
- ``sqlite``: the same runs on a SQLite file;
- ``dbos``: the same workflow in DBOS Transact (``@DBOS.workflow`` of three
  ``@DBOS.step``) on PostgreSQL, when the ``dbos`` package is importable (it is no
  dependency of The Brain: ``pip install --target DIR dbos`` and ``PYTHONPATH=DIR``);
  its delta includes its background threads' polling;
- ``enqueue``: ``wf.enqueue()`` from a script, one call after another, and
  ``wf.enqueue_many()`` in batches (when this checkout has it), runs queued per second.

With ``--before REV``, the brain and enqueue figures are measured on that git revision
too (a worktree under /tmp, removed afterwards), and printed beside.

Targets (issue 31): PostgreSQL runs/s at least DBOS's, at most 10 transactions per run;
at least 1,000 runs/s queued with ``enqueue_many``. Asserts nothing but that every run
succeeded.

    .venv/bin/python bench/pg_runs.py [--runs 200] [--before HEAD~3] [--pg postgresql+asyncpg://...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BRAIN_RUNS = r'''
import json, sys, time
from brain import step, workflow

RUNS = int(sys.argv[1])

@step
def fetch(seed: str) -> str:
    return seed + "-a"

@step
def shape(text: str) -> str:
    return text.upper()

@step
def store_it(text: str) -> str:
    return text[::-1]

@workflow(name="three")
def three():
    store_it(shape(fetch("x")))

assert three().succeeded  # warm-up: the store opens, the schema is checked
t0 = time.perf_counter()
for i in range(RUNS):
    result = three()
    assert result.succeeded, result.error
print(json.dumps({"seconds": time.perf_counter() - t0}))
'''

DBOS_RUNS = r'''
import json, sys, time
from dbos import DBOS

RUNS = int(sys.argv[1]); URL = sys.argv[2]
DBOS(config={"name": "pgbench", "system_database_url": URL, "log_level": "WARNING"})

@DBOS.step()
def fetch(seed: str) -> str:
    return seed + "-a"

@DBOS.step()
def shape(text: str) -> str:
    return text.upper()

@DBOS.step()
def store_it(text: str) -> str:
    return text[::-1]

@DBOS.workflow()
def three() -> str:
    return store_it(shape(fetch("x")))

DBOS.launch()
three()
t0 = time.perf_counter()
for i in range(RUNS):
    assert three() == "A-X"
seconds = time.perf_counter() - t0
DBOS.destroy()
print(json.dumps({"seconds": seconds}))
'''

ENQUEUE = r'''
import asyncio, json, sys, time
from brain import step, workflow

SINGLE = int(sys.argv[1]); MANY = int(sys.argv[2]); BATCH = int(sys.argv[3])

@step
def fetch(seed: str) -> str:
    return seed

@workflow(name="queued")
def queued():
    fetch("x")

async def main():
    out = {}
    await queued.enqueue("warm-up")
    t0 = time.perf_counter()
    for i in range(SINGLE):
        await queued.enqueue(f"run {i}")
    out["enqueue_per_s"] = SINGLE / (time.perf_counter() - t0)
    if hasattr(queued, "enqueue_many"):
        t0 = time.perf_counter()
        ids = []
        for start in range(0, MANY, BATCH):
            ids += await queued.enqueue_many([f"run {i}" for i in range(start, min(MANY, start + BATCH))])
        assert len(set(ids)) == MANY
        out["enqueue_many_per_s"] = MANY / (time.perf_counter() - t0)
    print(json.dumps(out))

asyncio.run(main())
'''


def _dsn(url: str) -> str:
    """``url`` as asyncpg and psycopg take it (no driver name)."""
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _admin(url: str, sql: str) -> list[dict[str, object]]:
    """Run ``sql`` on the ``postgres`` database of ``url``'s server; its rows."""
    import asyncpg
    from sqlalchemy.engine import make_url

    async def go() -> list[dict[str, object]]:
        conn = await asyncpg.connect(_dsn(str(make_url(url).set(database="postgres"))))
        try:
            return [dict(r) for r in await conn.fetch(sql)]
        finally:
            await conn.close()

    return asyncio.run(go())


@contextlib.contextmanager
def _database(url: str, label: str, *, schema: bool, root: Path) -> Iterator[str]:
    """A new database on ``url``'s server (with The Brain's schema, when ``schema``),
    dropped afterwards."""
    from sqlalchemy.engine import make_url

    name = f"brain_bench_{label}_{uuid.uuid4().hex[:8]}"
    _admin(url, f'CREATE DATABASE "{name}"')
    new = make_url(url).set(database=name).render_as_string(hide_password=False)
    try:
        if schema:
            subprocess.run([sys.executable, "-m", "brain.cli", "db", "upgrade"], check=True,
                           cwd=root, capture_output=True, env=_env(root, new))
        yield new
    finally:
        _admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _transactions(url: str) -> int:
    """Transactions the database of ``url`` has committed or rolled back, by its statistics
    (read until two reads a moment apart agree: a backend that just ended reports late)."""
    from sqlalchemy.engine import make_url

    name = make_url(url).database
    sql = ("SELECT pg_stat_clear_snapshot(), xact_commit + xact_rollback AS n "
           f"FROM pg_stat_database WHERE datname = '{name}'")
    last = -1
    while True:
        now = int(_admin(url, sql)[0]["n"])  # type: ignore[call-overload]
        if now == last:
            return now
        last = now
        time.sleep(0.3)


def _env(root: Path, url: str, pythonpath: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRAIN_")}
    env.update(BRAIN_DATABASE_URL=url, BRAIN_MAX_QUEUED_RUNS="100000000",
               PYTHONPATH=pythonpath if pythonpath is not None else str(root))
    return env


def _child(script: str, args: list[str], root: Path, url: str,
           pythonpath: str | None = None) -> dict[str, float]:
    """Run ``script`` in a child process on ``root``'s code; the JSON it printed."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "child.py"
        path.write_text(script)
        done = subprocess.run([sys.executable, str(path), *args], cwd=tmp, capture_output=True,
                              text=True, env=_env(root, url, pythonpath), timeout=1800)
    if done.returncode:
        raise SystemExit(f"child failed:\n{done.stdout}\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _pg_runs(root: Path, pg: str, runs: int) -> tuple[float, float]:
    """Runs/s and transactions per run of The Brain at ``root`` on a new database."""
    with _database(pg, "brain", schema=True, root=root) as url:
        before = _transactions(url)
        seconds = _child(BRAIN_RUNS, [str(runs)], root, url)["seconds"]
        return runs / seconds, (_transactions(url) - before) / (runs + 1)


def _measure(root: Path, pg: str, runs: int, single: int, many: int,
             batch: int) -> dict[str, float]:
    """The Brain's figures at ``root``."""
    out: dict[str, float] = {}
    out["pg_runs_per_s"], out["pg_xacts_per_run"] = _pg_runs(root, pg, runs)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{tmp}/runs.db"
        out["sqlite_runs_per_s"] = runs / _child(BRAIN_RUNS, [str(runs)], root, url)["seconds"]
    with _database(pg, "queue", schema=True, root=root) as url:
        out.update(_child(ENQUEUE, [str(single), str(many), str(batch)], root, url))
    return out


def _dbos(pg: str, runs: int) -> tuple[float, float] | None:
    """DBOS's runs/s and transactions per run, when ``dbos`` is importable."""
    probe = subprocess.run([sys.executable, "-c", "import dbos"], capture_output=True,
                           env={**os.environ})
    if probe.returncode:
        return None
    with _database(pg, "dbos", schema=False, root=REPO) as url:
        dbos_url = _dsn(url)
        # DBOS creates its tables on launch: that child's transactions are not counted.
        _child(DBOS_RUNS, ["1", dbos_url], REPO, url, os.environ.get("PYTHONPATH", ""))
        before = _transactions(url)
        seconds = _child(DBOS_RUNS, [str(runs), dbos_url], REPO, url,
                         os.environ.get("PYTHONPATH", ""))["seconds"]
        return runs / seconds, (_transactions(url) - before) / (runs + 1)


@contextlib.contextmanager
def _worktree(revision: str) -> Iterator[Path]:
    """A checkout of ``revision`` under /tmp, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="brain_before_")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), revision], cwd=REPO,
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO,
                       capture_output=True)
        shutil.rmtree(path.parent, ignore_errors=True)


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--enqueue", type=int, default=300, help="single wf.enqueue() calls")
    parser.add_argument("--many", type=int, default=5000, help="runs queued by enqueue_many")
    parser.add_argument("--batch", type=int, default=500, help="runs per enqueue_many call")
    parser.add_argument("--before", help="a git revision to measure too")
    parser.add_argument("--pg", default=os.environ.get(
        "BRAIN_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"))
    args = parser.parse_args()
    columns = [("now", REPO)]
    figures: dict[str, dict[str, float]] = {}
    with contextlib.ExitStack() as stack:
        if args.before:
            columns.append((args.before[:12], stack.enter_context(_worktree(args.before))))
        for label, root in columns:
            figures[label] = _measure(root, args.pg, args.runs, args.enqueue, args.many,
                                      args.batch)
    dbos = _dbos(args.pg, args.runs)
    rows = [("PostgreSQL runs/s", "pg_runs_per_s", "{:.1f}"),
            ("PostgreSQL transactions per run", "pg_xacts_per_run", "{:.1f}"),
            ("SQLite runs/s", "sqlite_runs_per_s", "{:.1f}"),
            ("wf.enqueue() runs/s (PostgreSQL)", "enqueue_per_s", "{:.0f}"),
            (f"wf.enqueue_many() runs/s (batches of {args.batch})", "enqueue_many_per_s",
             "{:.0f}")]
    print(f"{args.runs} sequential in-process runs of a 3-step workflow; "
          f"{args.enqueue} single enqueues, {args.many} with enqueue_many")
    print(f"{'':46}" + "".join(f"{label:>14}" for label, _ in columns))
    for title, key, fmt in rows:
        cells = [fmt.format(figures[label][key]) if key in figures[label] else "-"
                 for label, _ in columns]
        print(f"{title:46}" + "".join(f"{c:>14}" for c in cells))
    if dbos is None:
        print("DBOS: not importable here (pip install --target DIR dbos; PYTHONPATH=DIR)")
    else:
        print(f"DBOS Transact on PostgreSQL: {dbos[0]:.1f} runs/s, "
              f"{dbos[1]:.1f} transactions per run (its background polling included)")
    print("targets: PostgreSQL runs/s >= DBOS's; <= 10 transactions per run; "
          "enqueue_many >= 1,000 runs/s")


if __name__ == "__main__":
    main()
