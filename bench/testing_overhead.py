"""Cost of testing a workflow with brain.testing: a fully mocked 10-step workflow run
1,000 times through run_workflow, and the start-up cost of importing brain.testing.

Prints figures; asserts nothing.   .venv/bin/python bench/testing_overhead.py

Targets (issue 5): < 5 ms per test run; import < 0.5 s.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from brain import llm, mcp_tool, parallel, shell, step, trigger, workflow
from brain.testing import run_workflow

RUNS = 1000


@step
def headline(text: str) -> str:
    return text.splitlines()[0]


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


def main() -> None:
    mocks = {"recall": "memo", "llm": lambda call: f"answer to {call.inputs['prompt']}",
             "shell": "done", "headline": "title"}
    run_workflow(ten_steps, trigger={"body": "warm-up"}, mocks=mocks)
    times = []
    for i in range(RUNS):
        t0 = time.perf_counter()
        result = run_workflow(ten_steps, trigger={"body": f"run {i}"}, mocks=mocks)
        times.append(time.perf_counter() - t0)
        assert result.succeeded, result.error
    print(f"fully mocked 10-step workflow via run_workflow: median {statistics.median(times) * 1000:.2f} "
          f"ms per test run over {RUNS} (target < 5 ms); p95 "
          f"{sorted(times)[int(RUNS * 0.95)] * 1000:.2f} ms")

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
