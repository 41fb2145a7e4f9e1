"""Per-step overhead of the runner, tracing/running a 10,000-step workflow, and CLI start-up.

Prints figures; it asserts nothing (the machines are shared and noisy).

    .venv/bin/python bench/step_overhead.py

Targets (issue 2): ≤ 1 ms per recorded step; trace of 10,000 steps < 1 s,
run < 15 s, peak memory < 300 MB; `brain run examples/hello.py` < 0.6 s.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHAIN = r'''
import asyncio, json, resource, statistics, sys, time
from brain import step, workflow
from brain.store import Store

N = int(sys.argv[1]); URL = sys.argv[2]

@step
def inc(x: str) -> str:
    return x

def chain():
    node = inc("0")
    for _ in range(N - 1):
        node = inc(node)

t0 = time.perf_counter()
wf = workflow(name=f"chain{N}")(chain)
trace_s = time.perf_counter() - t0
t0 = time.perf_counter()
result = wf(store=URL)
run_s = time.perf_counter() - t0
assert result.succeeded, result.error
starts = sorted(s.started_at for s in result.steps.values())
gaps = [(b - a).total_seconds() * 1000 for a, b in zip(starts, starts[1:])]
print(json.dumps({"trace_s": trace_s, "run_s": run_s, "median_gap_ms": statistics.median(gaps),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def run_chain(n: int, url: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHAIN, str(n), url], check=True,
                         capture_output=True, text=True, cwd=REPO).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def wall(argv: list[str], env: dict[str, str], cwd: str, n: int = 7) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        small = run_chain(1000, url)
        print(f"1,000-step @step chain, every step recorded in SQLite: "
              f"median per-step overhead {small['median_gap_ms']:.3f} ms "
              f"(target ≤ 1 ms; Prefect 3.9 ~10 ms, DBOS 3.4 ~15 ms per step on this machine); "
              f"whole run {small['run_s']:.2f} s")
        big = run_chain(10_000, f"sqlite+aiosqlite:///{tmp}/big.db")
        print(f"10,000-step workflow: trace {big['trace_s']:.2f} s (target < 1 s), "
              f"run {big['run_s']:.2f} s (target < 15 s), peak memory {big['peak_mb']:.0f} MB "
              f"(target < 300 MB)")

        env = dict(os.environ, BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{tmp}/cli.db")
        brain = str(Path(sys.executable).parent / "brain")
        hello = str(REPO / "examples" / "hello.py")
        subprocess.run([brain, "run", hello], env=env, cwd=tmp, check=True, capture_output=True)
        bare = wall([sys.executable, "-c", "pass"], env, tmp)
        cli = wall([brain, "run", hello], env, tmp)
        print(f"`brain run examples/hello.py` as a process: {cli:.3f} s median of 7 "
              f"(target < 0.6 s); bare `python -c pass`: {bare:.3f} s "
              f"(ratio {cli / bare:.1f}x)")


if __name__ == "__main__":
    main()
