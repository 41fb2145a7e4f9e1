"""File-watch latency: a file closed in a watched folder → its run started, in a live ``brain serve``.

Runs ``brain serve`` (SQLite) on a workflow with
``watch("inbox", debounce_seconds=D)`` (``--debounce``, default 0.5, the
default of ``watch()``), then writes ``--files`` files (default 20) one after
another, each in a few chunks, and waits for each one's run. Latency is the
run's ``started_at`` minus the moment the file was closed (the same clock:
one machine). The debounce is a deliberate wait after the last event, so the
target is latency ≤ debounce + 100 ms.

    .venv/bin/python bench/watch_latency.py [--files 20] [--debounce 0.5]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from _serve import brain_serve, serve_env

WORKFLOW = '''
from brain import shell, trigger, watch, workflow

@workflow(triggers=[watch("inbox", patterns=["*.txt"], debounce_seconds={debounce!r})])
def inbox():
    shell("count", argv=["wc", "-l", trigger.path])
'''


def started_at(db: Path, path: str) -> datetime | None:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            row = con.execute("SELECT started_at FROM brain_runs WHERE trigger_path = ? "
                              "AND started_at IS NOT NULL", (path,)).fetchone()
    except sqlite3.OperationalError:
        return None
    if row is None:
        return None
    when = datetime.fromisoformat(row[0])
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--debounce", type=float, default=0.5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="brain-bench-watch-") as tmp_dir:
        tmp = Path(tmp_dir).resolve()
        flows = tmp / "flows"
        inbox = flows / "inbox"
        inbox.mkdir(parents=True)
        (flows / "inbox_flow.py").write_text(WORKFLOW.format(debounce=args.debounce))
        db = tmp / "brain.db"
        latencies: list[float] = []
        lost: list[str] = []
        with brain_serve(flows, serve_env(db), tmp / "serve.log"):
            for i in range(args.files):
                path = inbox / f"file-{i:03d}.txt"
                with path.open("w") as handle:  # a few chunks, as a real writer would
                    for line in range(5):
                        handle.write(f"line {line}\n")
                        handle.flush()
                closed = datetime.now(UTC)
                wait_until = time.monotonic() + args.debounce + 10
                started = None
                while started is None and time.monotonic() < wait_until:
                    time.sleep(0.01)
                    started = started_at(db, str(path))
                if started is None:
                    lost.append(path.name)
                    continue
                latencies.append((started - closed).total_seconds() * 1000)

    if not latencies:
        sys.exit("no run started")
    target = args.debounce * 1000 + 100
    median = statistics.median(latencies)
    print(f"watch latency (file closed → run started), {len(latencies)} files, "
          f"debounce {args.debounce * 1000:.0f} ms:")
    print(f"  median {median:7.1f} ms   max {max(latencies):7.1f} ms   min {min(latencies):7.1f} ms   "
          f"over the debounce: median {median - args.debounce * 1000:6.1f} ms")
    print(f"  target ≤ debounce + 100 ms = {target:.0f} ms: median {'met' if median <= target else 'NOT met'}"
          f", max {'met' if max(latencies) <= target else 'NOT met'}")
    if lost:
        print(f"  files without a run within {args.debounce + 10:g} s: {', '.join(lost)}")


if __name__ == "__main__":
    main()
