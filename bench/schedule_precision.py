"""Schedule precision: how late ``every(seconds=1)`` fires in a live ``brain serve``.

Runs ``brain serve`` (SQLite) on a workflow with ``every(seconds=1)`` and a
one-step body until ``--fires`` (default 60) fires have happened after the
server was ready, then reads the runs from the database. A schedule run's body
is its fire time (ISO 8601), so lateness is exact:

* created: the run's ``created_at`` (the fire claimed and committed) minus the fire time;
* started: its ``started_at`` (an executor took it) minus the fire time.

Also counts duplicates (two runs for one fire time; must be 0) and missed fire
times. Fires before the server answered ``/health`` (the start-up catch-up)
are left out. Targets: median < 20 ms, max < 200 ms.

    .venv/bin/python bench/schedule_precision.py [--fires 60]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import textwrap
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _serve import brain_serve, serve_env

WORKFLOW = '''
from brain import every, shell, trigger, workflow

@workflow(triggers=[every(seconds=1)])
def tick():
    shell("tick", argv=["echo", trigger.body])
'''


def parse_time(value: str) -> datetime:
    when = datetime.fromisoformat(value)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def schedule_runs(db: Path) -> list[tuple[str, str, str | None]]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            return con.execute("SELECT trigger_body, created_at, started_at FROM brain_runs "
                               "WHERE trigger_event = 'schedule' ORDER BY created_at").fetchall()
    except sqlite3.OperationalError:
        return []


def summary(name: str, values_ms: list[float]) -> str:
    if not values_ms:
        return f"{name}: none"
    return (f"{name}: median {statistics.median(values_ms):7.2f} ms   "
            f"p90 {sorted(values_ms)[int(0.9 * (len(values_ms) - 1))]:7.2f} ms   "
            f"max {max(values_ms):7.2f} ms   min {min(values_ms):7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fires", type=int, default=60, help="fires to measure (default 60)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="brain-bench-schedule-") as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "flows").mkdir()
        (tmp / "flows" / "tick.py").write_text(textwrap.dedent(WORKFLOW))
        db = tmp / "brain.db"
        with brain_serve(tmp / "flows", serve_env(db), tmp / "serve.log"):
            ready = datetime.now(UTC)
            print(f"every(seconds=1): waiting for {args.fires} fires after start-up "
                  f"(~{args.fires} s) …", flush=True)
            deadline = time.monotonic() + args.fires * 1.5 + 20
            while time.monotonic() < deadline:
                measured = [r for r in schedule_runs(db) if parse_time(r[0]) > ready and r[2]]
                if len(measured) >= args.fires:
                    break
                time.sleep(0.25)
        rows = schedule_runs(db)
        with sqlite3.connect(db) as con:
            claims = con.execute("SELECT count(*) FROM brain_fires").fetchone()[0]
            skipped = con.execute("SELECT fire_time FROM brain_fires WHERE run_id IS NULL").fetchall()

    all_fires = [parse_time(r[0]) for r in rows]
    duplicates = sum(n - 1 for n in Counter(all_fires).values() if n > 1)
    after = [(parse_time(b), parse_time(c), parse_time(s) if s else None) for b, c, s in rows
             if parse_time(b) > ready][: args.fires]
    if not after:
        sys.exit("no fire after start-up")
    created = [(c - f).total_seconds() * 1000 for f, c, _ in after]
    started = [(s - f).total_seconds() * 1000 for f, _, s in after if s is not None]
    first, last = after[0][0], after[-1][0]
    expected = int((last - first) / timedelta(seconds=1)) + 1
    missed = expected - len({f for f, _, _ in after})
    print(f"fires measured: {len(after)} ({first:%H:%M:%S} … {last:%H:%M:%S} UTC); "
          f"left out (before the server was ready): {sum(1 for f in all_fires if f <= ready)}")
    print(summary("lateness, run committed (created_at - fire time)", created))
    print(summary("lateness, run started   (started_at - fire time)", started))
    print(f"duplicates: {duplicates} (target 0)   missed fire times: {missed}   "
          f"fire claims: {claims} for {len(rows)} runs")
    if skipped:
        print(f"fires claimed without a run (overlap='skip': the previous run was still active): "
              f"{', '.join(str(t[0]) for t in skipped)}")
    med, worst = statistics.median(created), max(created)
    print(f"targets: median < 20 ms: {'met' if med < 20 else 'NOT met'} ({med:.2f} ms); "
          f"max < 200 ms: {'met' if worst < 200 else 'NOT met'} ({worst:.2f} ms); "
          f"duplicates 0: {'met' if duplicates == 0 else 'NOT met'}")


if __name__ == "__main__":
    main()
