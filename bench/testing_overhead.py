"""Cost of testing a workflow with brain.testing: a fully mocked 3-step and 10-step workflow
run N times through run_workflow (each run on its own fresh store, as a test gets it), the
same 3-step run on a fresh SQLite file (the baseline: what a test would pay for a store of
its own without the in-memory schema image), and the start-up cost of importing
brain.testing.

Prints figures; asserts nothing.   .venv/bin/python bench/testing_overhead.py [N]

Targets (issues 5 and 31): < 5 ms per mocked run; import < 0.5 s.

Before issue 31, run_workflow ran on ``MemoryStore`` (a second store written on dicts).
Measured with this script just before it was removed (2 shared cores, N=500): see
``OLD_*`` below. A fresh ``sqlite:///:memory:`` store then cost 7.5 ms mean (6.4 median) per 3-step
run, its tables created by SQLAlchemy's DDL every run; the schema image removes that.
Side by side under the same load (the old tree exported, runs interleaved, 400 each):
3 steps median 0.79-0.94 ms on MemoryStore, 1.72-1.88 ms on SQLite in memory; 10 steps
1.68-2.04 ms and 3.14-3.29 ms.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from brain import llm, mcp_tool, parallel, shell, step, trigger, workflow
from brain.testing import run_workflow

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
BASELINE_RUNS = 20  # a new file each: schema created by Alembic every time

#: MemoryStore's figures, measured by this script before it was removed (ms).
OLD_3, OLD_3_MEDIAN, OLD_10 = 0.97, 0.81, 1.65


@step
def headline(text: str) -> str:
    return text.splitlines()[0]


@workflow
def three_steps():
    notes = mcp_tool("recall", server_command="python -m memory_vault.mcp", tool="recall",
                     args={"query": trigger.body})
    answer = llm("answer", prompt=f"Two sentences: {notes}", model="small")
    shell("save", argv=["echo", f"{answer}"])


@workflow
def ten_steps():
    notes = mcp_tool("recall", server_command="python -m memory_vault.mcp", tool="recall",
                     args={"query": trigger.body, "limit": 10})
    with parallel():
        fast = llm("fast", prompt=f"Two sentences: {notes}", model="small")
        slow = llm("careful", prompt=f"Details: {notes}", model="big")
    title = headline(fast)
    shell("a", command=f"echo {title}")
    shell("b", argv=["echo", f"{slow}"])
    shell("c", command="echo {a} {b}")
    shell("d", command="echo {c}")
    shell("e", stdin=f"{fast}\n{slow}", argv=["cat"])
    shell("f", command="echo {e}")


MOCKS = {"recall": "memo", "llm": lambda call: f"answer to {call.inputs['prompt']}",
         "shell": "done", "step": "title"}


def timed(runs: int, one: Callable[[int], object]) -> list[float]:
    """Seconds each of ``runs`` calls of ``one(i)`` took (after one warm-up call)."""
    one(-1)
    times = []
    for i in range(runs):
        t0 = time.perf_counter()
        one(i)
        times.append(time.perf_counter() - t0)
    return times


def show(label: str, times: list[float]) -> None:
    ms = sorted(t * 1000 for t in times)
    print(f"{label}: mean {statistics.mean(ms):.2f} ms, median {statistics.median(ms):.2f} ms, "
          f"p95 {ms[int(len(ms) * 0.95)]:.2f} ms over {len(ms)} runs")


def mocked(wf: object) -> Callable[[int], object]:
    def one(i: int) -> object:
        result = run_workflow(wf, trigger={"body": f"run {i}"}, mocks=MOCKS)  # type: ignore[arg-type]
        assert result.succeeded, result.error
        return result
    return one


def on_a_new_file(folder: Path) -> Callable[[int], object]:
    from brain.store import Store

    def one(i: int) -> object:
        store = Store(f"sqlite:///{folder}/run{i + 1}.db")  # opened and closed by the run
        result = run_workflow(three_steps, trigger={"body": f"run {i}"}, mocks=MOCKS,
                              store=store)
        assert result.succeeded, result.error
        return result
    return one


def main() -> None:
    show("fully mocked 3-step workflow, run_workflow (target < 5 ms)", timed(RUNS, mocked(three_steps)))
    show("fully mocked 10-step workflow, run_workflow", timed(RUNS, mocked(ten_steps)))
    with tempfile.TemporaryDirectory() as folder:
        show("baseline: the 3-step run on a new SQLite file each", timed(
            BASELINE_RUNS, on_a_new_file(Path(folder))))
    print(f"before (MemoryStore, measured before its removal): 3 steps mean {OLD_3} ms, "
          f"median {OLD_3_MEDIAN} ms; 10 steps median {OLD_10} ms")

    def wall(code: str) -> float:
        runs = []
        for _ in range(7):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            runs.append(time.perf_counter() - t0)
        return statistics.median(runs)

    bare = wall("pass")
    imp = wall("import brain.testing")
    print(f"process start importing brain.testing: {imp:.3f} s median of 7 (target < 0.5 s); "
          f"bare interpreter {bare:.3f} s; import cost {imp - bare:.3f} s")


if __name__ == "__main__":
    main()
