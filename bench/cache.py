"""Cached steps (SPEC §26): what a hit costs on SQLite, and a 20-step LLM workflow re-run
fully cached beside the same workflow without a cache.

- **Hit cost.** A chain of ``--steps`` (default 200) small ``@step`` calls, each with
  ``cache="1d"``, run once (every step misses and stores) and then ``--repeat`` times more
  (every step hits), on a SQLite file. Printed: each hit step's own time as recorded
  (``ended_at - started_at``: its inputs resolved, its key, its lookup), median and p95,
  and the whole run's time per step (its write and the run's own work included), beside
  the same chain without a cache and with every step a miss (target: a hit at most 1 ms).
- **LLM workflow.** Twenty ``llm()`` steps in a chain, each asking a local fake
  OpenAI-compatible server (started here, on 127.0.0.1, answering after ``--latency``
  seconds, default 0.2, as a small local model might), run without a cache, then with
  ``cache="1d"`` twice: the first fills the cache, the second is answered from it. Printed
  side by side: the run's time and the requests the server received.

Asserts nothing but that every run succeeded.

    .venv/bin/python bench/cache.py [--steps 200] [--repeat 3] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from brain import llm, step, workflow  # noqa: E402
from brain.testing import FakeChatServer  # noqa: E402


class SlowServer(FakeChatServer):
    """A fake chat server that answers after ``latency`` seconds."""

    def __init__(self, latency: float) -> None:
        super().__init__(reply="an answer")
        self.latency = latency

    def _next(self) -> Any:
        answer = super()._next()
        answer.delay = self.latency
        return answer


def chain(steps: int, cache: str | None) -> Any:
    """A workflow of ``steps`` small ``@step`` calls in a chain."""

    @step(cache=cache)
    def add(text: str, n: int) -> str:
        return f"{text}+{n}"[-50:]

    @workflow(name=f"chain_{'cached' if cache else 'plain'}")
    def flow() -> None:
        out = add("start", 0)
        for i in range(1, steps):
            out = add.with_options(name=f"add_{i}")(out, i)

    return flow


def llm_flow(url: str, cache: str | None) -> Any:
    """Twenty LLM steps in a chain, each reading the one before."""

    @workflow(name=f"llm_{'cached' if cache else 'plain'}")
    def flow() -> None:
        out = llm("ask_0", prompt="Begin a story.", model="m", provider_url=url, cache=cache)
        for i in range(1, 20):
            out = llm(f"ask_{i}", prompt=f"Go on from: {out}", model="m", provider_url=url,
                      cache=cache)

    return flow


def timed(wf: Any, store: str) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = wf.run(store=store)
    seconds = time.perf_counter() - t0
    if not result.succeeded:
        sys.exit(f"{wf.name} failed: {result.error}")
    return seconds, result


def hit_cost(steps: int, repeat: int, folder: Path) -> None:
    store = f"sqlite:///{folder / 'hits.db'}"
    plain, cached = chain(steps, None), chain(steps, "1d")
    timed(plain, store)  # the file, the schema and the imports, once
    plain_runs = [timed(plain, store)[0] for _ in range(repeat)]
    miss, _ = timed(cached, store)
    hits: list[float] = []
    hit_runs = []
    for _ in range(repeat):
        seconds, result = timed(cached, store)
        hit_runs.append(seconds)
        assert all(s.cached for s in result.steps.values())
        hits += [(s.ended_at - s.started_at).total_seconds() for s in result.steps.values()]
    hits.sort()
    print(f"hit cost on SQLite ({steps} steps in a chain, {repeat} runs of each):")
    print(f"  a hit step as recorded (inputs, key, lookup): median "
          f"{statistics.median(hits) * 1000:.3f} ms, p95 {hits[int(len(hits) * .95)] * 1000:.3f}"
          f" ms (target: at most 1 ms)")
    print(f"  {'':28} {'per step':>12} {'run':>10}")
    for label, runs in (("no cache", plain_runs), ("cache, every step a miss", [miss]),
                        ("cache, every step a hit", hit_runs)):
        best = min(runs)
        print(f"  {label:28} {best / steps * 1000:9.3f} ms {best:9.3f} s")


def llm_rerun(latency: float, folder: Path) -> None:
    with SlowServer(latency) as server:
        store = f"sqlite:///{folder / 'llm.db'}"
        plain, cached = llm_flow(server.url, None), llm_flow(server.url, "1d")
        rows = []
        for label, wf in (("no cache", plain), ("cache, first run (misses)", cached),
                          ("cache, re-run (hits)", cached)):
            before = len(server.requests)
            seconds, _ = timed(wf, store)
            rows.append((label, seconds, len(server.requests) - before))
    print(f"\n20-step LLM workflow, model answering in {latency:g} s (fake server on 127.0.0.1):")
    print(f"  {'':28} {'run':>9} {'requests':>9}")
    for label, seconds, requests in rows:
        print(f"  {label:28} {seconds:8.3f}s {requests:9d}")
    print(f"  re-run fully cached: {rows[0][1] / rows[2][1]:.0f}x faster than uncached")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()
    for key in [k for k in os.environ if k.startswith(("BRAIN_", "LLM_"))]:
        del os.environ[key]
    with tempfile.TemporaryDirectory() as folder:
        hit_cost(args.steps, args.repeat, Path(folder))
        llm_rerun(args.latency, Path(folder))


if __name__ == "__main__":
    main()
