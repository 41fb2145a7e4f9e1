"""LLM step overhead: 200 llm() steps against a local endpoint that answers at once,
against raw httpx calls to the same endpoint in the same run.

Prints figures; asserts nothing.   .venv/bin/python bench/llm_step.py

Target (issue 3): median step time / median raw call ≤ 1.2.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

from brain import llm, workflow

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


SERVER = """
import sys, time
from brain.testing import FakeChatServer
with FakeChatServer(reply="ok") as s:
    print(s.url, flush=True)
    sys.stdin.read()
"""


def main() -> None:
    # The endpoint runs in its own process, so it does not compete with the runner for the GIL.
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdin is not None
    url = server.stdout.readline().strip()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            def chain() -> None:
                for i in range(N):
                    llm(f"s{i}", prompt="hi", model="m", provider_url=url)

            wf = workflow(name="llm_bench")(chain)
            before = asyncio.run(raw_calls(url, N))
            t0 = time.perf_counter()
            result = wf(store=f"sqlite+aiosqlite:///{tmp}/bench.db")
            wall = time.perf_counter() - t0
            after = asyncio.run(raw_calls(url, N))
            assert result.succeeded, result.error
    finally:
        server.stdin.close()
        server.wait()

    raw = statistics.median(before + after)
    step_times = [(s.ended_at - s.started_at).total_seconds()
                  for s in result.steps.values() if s.ended_at and s.started_at]
    starts = sorted(s.started_at for s in result.steps.values() if s.started_at)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    step = statistics.median(step_times)
    gap = statistics.median(gaps)
    print(f"raw httpx POST to the same endpoint: median {raw * 1000:.3f} ms (2 x {N} calls)")
    print(f"llm() step, recorded duration (start → end): median {step * 1000:.3f} ms; "
          f"ratio {step / raw:.2f} (target ≤ 1.2)")
    print(f"llm() step, start-to-start including both database commits: median "
          f"{gap * 1000:.3f} ms; ratio {gap / raw:.2f}; whole run {wall:.2f} s for {N} steps")


if __name__ == "__main__":
    main()
