"""Fan-out: a 1,000-element ``for_each`` of a trivial ``@step`` (``max_parallel=16``), recorded
in SQLite, against a plain 1,000-step chain of the same step measured in the same run.

Per-instance overhead is the block's wall time divided by 1,000 (the instance rows, each
instance's two writes and the block's final write included); per-step overhead of the
chain likewise. Target: per-instance overhead at most the chain's per-step overhead plus 20%.
Prints figures; asserts only that every instance succeeded.

    .venv/bin/python bench/fanout.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SCRIPT = r'''
import json, sys, time
from brain import for_each, step, workflow

N = 1000; URL = sys.argv[1]; SHAPE = sys.argv[2]

@step
def inc(x: str) -> str:
    return x

@step
def items() -> list[int]:
    return list(range(N))

def fan():
    with for_each(items(), max_parallel=16) as x:
        inc(x)

def chain():
    node = items()
    for _ in range(N):
        node = inc(node)

wf = workflow(name=SHAPE)(fan if SHAPE == "fan" else chain)
t0 = time.perf_counter()
result = wf(store=URL)
wall = time.perf_counter() - t0
assert result.succeeded, result.error
if SHAPE == "fan":
    assert len(json.loads(result.steps["inc"].output)) == N
print(json.dumps({"wall_s": wall}))
'''


def run(shape: str, url: str) -> float:
    out = subprocess.run([sys.executable, "-c", SCRIPT, url, shape], check=True,
                         capture_output=True, text=True, cwd=REPO).stdout
    return float(json.loads(out.strip().splitlines()[-1])["wall_s"])


def main() -> None:
    fans, chains = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(3):  # alternate, so both see the same machine
            chains.append(run("chain", f"sqlite+aiosqlite:///{tmp}/chain{i}.db"))
            fans.append(run("fan", f"sqlite+aiosqlite:///{tmp}/fan{i}.db"))
    fan, chain = statistics.median(fans), statistics.median(chains)
    per_instance, per_step = fan / 1000 * 1000, chain / 1000 * 1000
    print(f"1,000-element for_each of a trivial @step, max_parallel=16: {fan:.2f} s wall, "
          f"{per_instance:.3f} ms per instance (median of 3)")
    print(f"1,000-step chain of the same step, same run: {chain:.2f} s wall, "
          f"{per_step:.3f} ms per step")
    print(f"ratio per instance / per step: {per_instance / per_step:.2f} (target <= 1.20)")


if __name__ == "__main__":
    main()
