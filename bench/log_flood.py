"""A step that floods its log: what capturing it costs in time, database and memory.

Prints figures; it asserts nothing (the machines are shared and noisy).

    .venv/bin/python bench/log_flood.py [MEGABYTES]

One workflow, two shell steps one after the other, run three times on a SQLite file:
``loud`` writes about 100 MB of log lines to its stderr as fast as it can (an ``awk``
loop formatting one line at a time, as a busy program's logger does), and ``quiet``
runs the very same command with its stderr sent to ``/dev/null``. Targets (SPEC §20):

- time: the loud step within 1.2x the quiet one (median of the three runs' ratios);
- database: grows by less than 1 MB for the loud step (8 KiB head + 64 KiB tail kept);
- memory: flat, the orchestrator's peak RSS while the loud step runs within 20 MB of
  its RSS before.

Also printed, with no target: the same with ``yes | head -c`` as the writer, a program
doing nothing but write. There the pipe itself costs more than the writer's own work
(even ``| cat > /dev/null`` doubles it), so the ratio says what a copy through a pipe
costs, not what capturing a real program's log costs.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SCRIPT = r'''
import asyncio, json, os, resource, sys, threading, time
from brain import shell, workflow
from brain.store import Store

COMMAND, DB = sys.argv[1], sys.argv[2]

@workflow(name="flood")
def flood():
    loud = shell("loud", command=COMMAND + " >&2")
    shell("quiet", command=COMMAND + " 2>/dev/null >&2", after=[loud])

def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def db_size() -> int:
    return sum(os.path.getsize(DB + s) for s in ("", "-wal") if os.path.exists(DB + s))

peak = [0]
def sample(stop: threading.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.005)

async def main() -> None:
    out = []
    async with Store("sqlite+aiosqlite:///" + DB) as store:
        await flood.arun(store=store)  # warm: schema, imports, page cache
        for _ in range(3):
            before_db, before_rss = db_size(), rss()
            peak[0] = before_rss
            stop = threading.Event()
            sampler = threading.Thread(target=sample, args=(stop,))
            sampler.start()
            run = await flood.arun(store=store)
            stop.set(); sampler.join()
            seconds = {s.name: (s.ended_at - s.started_at).total_seconds()
                       for s in run.steps.values()}
            logs = await store.run_logs(run.run_id)
            out.append({"status": str(run.status), "loud": seconds["loud"],
                        "quiet": seconds["quiet"], "db_growth": db_size() - before_db,
                        "rss_growth": peak[0] - before_rss,
                        "lines_kept": len(logs.get("loud", [])),
                        "note": next((ln.text for ln in logs.get("loud", [])
                                      if ln.stream == "brain"), "")})
    print(json.dumps(out))

asyncio.run(main())
'''

AWK = ("awk 'BEGIN { for (i = 0; i < N; i++) printf \"%s %d %s\\n\", "
       "\"2026-12-02T10:00:00 INFO worker\", i, "
       "\"processed an item of the flood, as a busy program logs it\" }'")


def measure(command: str) -> list[dict[str, object]]:
    """Three runs of the two steps with ``command`` as the writer (in a fresh process)."""
    import json

    with tempfile.TemporaryDirectory(prefix="brain-flood-") as tmp:
        db = str(Path(tmp) / "flood.db")
        done = subprocess.run([sys.executable, "-c", SCRIPT, command, db], cwd=tmp,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the flood run failed:\n{done.stderr[-2000:]}")
        return list(json.loads(done.stdout.strip().splitlines()[-1]))


def report(title: str, rows: list[dict[str, object]], *, targets: bool) -> None:
    """Print one writer's figures (with their targets when ``targets``)."""
    ratios = [float(r["loud"]) / float(r["quiet"]) for r in rows]  # type: ignore[arg-type]
    ratio = statistics.median(ratios)
    db = max(int(r["db_growth"]) for r in rows)  # type: ignore[call-overload]
    rss = max(int(r["rss_growth"]) for r in rows)  # type: ignore[call-overload]
    print(f"\n{title}")
    for r in rows:
        print(f"  {r['status']}: loud {float(r['loud']):.3f} s, quiet {float(r['quiet']):.3f} s, "  # type: ignore[arg-type]
              f"database +{int(r['db_growth']) / 1024:.0f} KiB, peak RSS "  # type: ignore[call-overload]
              f"+{int(r['rss_growth']) / 2**20:.1f} MiB, {r['lines_kept']} lines kept, "  # type: ignore[call-overload]
              f"{r['note']}")
    if targets:
        print(f"  time ratio (median) {ratio:.2f}x   target <= 1.2x   "
              f"{'MET' if ratio <= 1.2 else 'MISSED'}")
        print(f"  database growth     {db / 2**20:.2f} MB   target < 1 MB   "
              f"{'MET' if db < 2**20 else 'MISSED'}")
        print(f"  memory growth       {rss / 2**20:.1f} MiB  target < 20 MiB (flat)   "
              f"{'MET' if rss < 20 * 2**20 else 'MISSED'}")
    else:
        print(f"  time ratio (median) {ratio:.2f}x   (no target: the pipe's own cost)")


def main() -> None:
    """Measure and print."""
    megabytes = float(sys.argv[1]) if len(sys.argv) > 1 else 100.0
    size = int(megabytes * 1_000_000)
    lines = size // 97  # the awk lines are about 97 bytes
    report(f"a logging program (awk, {lines:,} lines, ~{megabytes:g} MB)",
           measure(AWK.replace("N;", f"{lines};")), targets=True)
    report(f"a bare writer (yes | head -c {size})",
           measure(f"yes 'a line of log text written as fast as a pipe takes it' | head -c {size}"),
           targets=False)


if __name__ == "__main__":
    main()
