"""LLM step overhead: llm() steps against a local endpoint that answers at once, against raw
httpx calls to the same endpoint.

Prints figures; asserts nothing.   .venv/bin/python bench/llm_step.py [ROUNDS]

Each round runs, one after the other, N raw calls, N calls of the executor alone
(``prepare`` + ``execute``, as the runner calls them, interleaved with raw calls on one
loop) and a workflow of N chained llm() steps, so a machine that gets busier or quieter
part-way weighs on all three alike. Medians over every round:

- executor alone / raw: what the LLM executor adds to an HTTP call;
- step, recorded duration (start → end) / raw: the step as the runner runs it (target
  ≤ 1.2, issue 3);
- start-to-start / raw: that plus writing the step's end and starting the next;
- the first step of each run, which opens the run's HTTP client.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import httpx

from brain import llm, workflow
from brain.executors.base import StepContext
from brain.executors.llm import LlmExecutor
from brain.executors.steplog import StepLog

N = 200
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7}


async def raw_calls(url: str, n: int) -> list[float]:
    """Median-friendly timings of ``n`` bare POSTs on one pooled client."""
    times = []
    async with httpx.AsyncClient(timeout=None, trust_env=False) as client:
        for _ in range(n):
            t0 = time.perf_counter()
            response = await client.post(url + "/chat/completions", json=BODY)
            response.json()["choices"][0]["message"]["content"]
            times.append(time.perf_counter() - t0)
    return times


async def executor_calls(spec: Any, url: str, n: int) -> tuple[list[float], list[float]]:
    """``n`` steps' ``prepare`` + ``execute`` on the executor alone, each after a raw call on
    the same loop: (raw timings, executor timings)."""
    executor = LlmExecutor()
    ctx = StepContext(workflow_dir=".", log=StepLog())
    raw, steps = [], []
    async with httpx.AsyncClient(timeout=None, trust_env=False) as client:
        for _ in range(n):
            t0 = time.perf_counter()
            response = await client.post(url + "/chat/completions", json=BODY)
            response.json()["choices"][0]["message"]["content"]
            t1 = time.perf_counter()
            prepared = executor.prepare(spec, lambda text, quote: text)
            await executor.execute(spec, prepared, ctx)
            raw.append(t1 - t0)
            steps.append(time.perf_counter() - t1)
    await executor.close()
    return raw, steps


SERVER = """
import sys, time
from brain.testing import FakeChatServer
with FakeChatServer(reply="ok") as s:
    print(s.url, flush=True)
    sys.stdin.read()
"""


def run_rounds(url: str, rounds: int) -> dict[str, list[float]]:
    """Every timing of every round, by what was timed."""
    def chain() -> None:
        for i in range(N):
            llm(f"s{i}", prompt="hi", model="m", provider_url=url)

    wf = workflow(name="llm_bench")(chain)
    spec = wf.spec.steps[0]
    got: dict[str, list[float]] = {"raw": [], "raw_paired": [], "executor": [], "step": [],
                                   "start_to_start": [], "first_step": [], "run": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            got["raw"] += asyncio.run(raw_calls(url, N))
            raw, steps = asyncio.run(executor_calls(spec, url, N))
            got["raw_paired"] += raw
            got["executor"] += steps
            t0 = time.perf_counter()
            result = wf(store=f"sqlite+aiosqlite:///{tmp}/bench{i}.db")
            got["run"].append(time.perf_counter() - t0)
            assert result.succeeded, result.error
            ran = [s for s in result.steps.values() if s.ended_at and s.started_at]
            durations = [(s.ended_at - s.started_at).total_seconds() for s in ran]
            got["first_step"].append(durations[0])
            got["step"] += durations[1:]
            starts = sorted(s.started_at for s in ran if s.started_at)
            got["start_to_start"] += [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    return got


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    # The endpoint runs in its own process, so it does not compete with the runner for the GIL.
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdin is not None
    url = server.stdout.readline().strip()
    try:
        got = run_rounds(url, rounds)
    finally:
        server.stdin.close()
        server.wait()

    med = {key: statistics.median(values) for key, values in got.items()}
    raw = med["raw"]
    print(f"raw httpx POST to the same endpoint: median {raw * 1000:.3f} ms "
          f"({rounds} x {N} calls)")
    print(f"executor alone (prepare + execute): median {med['executor'] * 1000:.3f} ms; ratio "
          f"{med['executor'] / med['raw_paired']:.2f} to the raw calls between them")
    print(f"llm() step, recorded duration (start → end): median {med['step'] * 1000:.3f} ms; "
          f"ratio {med['step'] / raw:.2f} (target ≤ 1.2)")
    print(f"llm() step, start-to-start including the commit of its end: median "
          f"{med['start_to_start'] * 1000:.3f} ms; ratio {med['start_to_start'] / raw:.2f}")
    print(f"first step of a run (opens the run's HTTP client): median "
          f"{med['first_step'] * 1000:.2f} ms; whole run median {med['run']:.2f} s for {N} steps")


if __name__ == "__main__":
    main()
