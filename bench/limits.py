"""Rate limits across worker processes on PostgreSQL (SPEC §26): the measured overshoot at
10x oversubscription.

One limit, ``Limit(requests=--requests, tokens=--tokens, per=--per)`` (default 20
requests and 1,000 tokens per 2 s), used by a one-step workflow (an ``llm()`` step with
``max_tokens=50``). ``--workers`` ``brain worker`` processes (default 2, ``--concurrency``
10 each) on a fresh database take ``--runs`` queued runs (default 200). The model is a fake
OpenAI-compatible server on 127.0.0.1 answering after ``--latency`` seconds (default 0.2)
and reporting a usage of 30 to 53 tokens (the step reserves 53: 50 plus its prompt's
estimate). Without the limit, the executors could send ``workers * concurrency / latency``
requests a second: with the defaults 100 a second, 10x the limit's 10.

Printed, from the arrival times the server noted: the most requests and the most tokens
that reached it in any window of ``per`` seconds, against the limit (the overshoot; target
at most 1%), and how much of the limit the runs used on average.

Asserts nothing but that every run succeeded. The database (``bench_limits_<pid>``) is
dropped and the workers stopped.

    .venv/bin/python bench/limits.py [--runs 200] [--workers 2] [--concurrency 10]
        [--requests 20] [--tokens 1000] [--per 2] [--latency 0.2] [--pg URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _scale_workers import database, workers  # noqa: E402

from brain.testing import FakeChatServer, completion  # noqa: E402

FLOWS = '''
from brain import Limit, llm, trigger, workflow


@workflow(limits={{"model": Limit(requests={requests}, tokens={tokens}, per={per})}})
def ask():
    llm("ask", prompt=f"question {{trigger.body}}", model="m", provider_url="{url}",
        max_tokens=50, limit="model", timeout_seconds=60)
'''


class CountingServer(FakeChatServer):
    """Answers after ``latency`` s with a usage of 30 to 53 tokens; notes arrivals."""

    def __init__(self, latency: float) -> None:
        super().__init__()
        self.latency = latency
        self.arrivals: list[tuple[float, int]] = []
        self._noted = threading.Lock()

    def _next(self) -> Any:
        spent = random.randint(30, 53)
        with self._noted:
            self.arrivals.append((time.time(), spent))
        answer = super()._next()
        answer.delay = self.latency
        answer.json = {**completion("ok"), "usage": {"prompt_tokens": 3,
                                                     "completion_tokens": spent - 3}}
        return answer


def most_in_window(arrivals: list[tuple[float, int]], per: float) -> tuple[int, int]:
    """The most requests and the most tokens that arrived within any ``per`` seconds."""
    arrivals = sorted(arrivals)
    most_requests = most_tokens = 0
    end = tokens = 0
    for start, (t0, _) in enumerate(arrivals):
        while end < len(arrivals) and arrivals[end][0] < t0 + per:
            tokens += arrivals[end][1]
            end += 1
        most_requests = max(most_requests, end - start)
        most_tokens = max(most_tokens, tokens)
        tokens -= arrivals[start][1]
    return most_requests, most_tokens


async def queue_and_drain(url: str, flows: Path, runs: int) -> float:
    from brain.loader import load_file
    from brain.results import TriggerData
    from brain.runner.queueing import enqueue, new_run
    from brain.store import Store

    wf = load_file(flows)["ask"]
    async with Store(url) as store:
        t0 = time.time()
        for i in range(runs):
            await enqueue(store, new_run(wf, TriggerData(body=str(i))), trigger_key="api",
                          max_queued=None)
        while True:
            found = await store.list_runs(status="succeeded", limit=runs + 1)
            failed = await store.list_runs(status="failed", limit=1)
            if failed:
                sys.exit(f"a run failed: {failed[0].error}")
            if len(found) >= runs:
                return time.time() - t0
            await asyncio.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--per", type=float, default=2.0)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--pg", default=os.environ.get(
        "BRAIN_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"))
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "LLM_"))}
    offered = args.workers * args.concurrency / args.latency * args.per
    with tempfile.TemporaryDirectory() as tmp, CountingServer(args.latency) as server:
        folder = Path(tmp)
        flows = folder / "flows" / "flows.py"
        flows.parent.mkdir()
        flows.write_text(FLOWS.format(requests=args.requests, tokens=args.tokens, per=args.per,
                                      url=server.url))
        with database(args.pg, f"bench_limits_{os.getpid()}", env) as url, \
                workers(args.workers, flows, url, args.concurrency, env, folder):
            seconds = asyncio.run(queue_and_drain(url, flows, args.runs))
        arrivals = list(server.arrivals)
    requests, tokens = most_in_window(arrivals, args.per)
    span = max(t for t, _ in arrivals) - min(t for t, _ in arrivals)
    print(f"{args.runs} runs, {args.workers} workers x {args.concurrency} executors, a model "
          f"answering in {args.latency:g} s: up to {offered:.0f} requests per {args.per:g} s "
          f"window offered, {offered / args.requests:.0f}x the limit")
    print(f"  {'':26} {'limit':>8} {'most seen':>10} {'overshoot':>10}")
    for label, limit, seen in (("requests per window", args.requests, requests),
                               ("tokens per window", args.tokens, tokens)):
        print(f"  {label:26} {limit:8d} {seen:10d} {max(seen / limit - 1, 0) * 100:9.1f}%")
    windows = span / args.per
    print(f"  used on average: {len(arrivals) / windows:.1f} requests per window over "
          f"{span:.1f} s ({len(arrivals) / windows / args.requests * 100:.0f}% of the limit); "
          f"all {args.runs} runs done in {seconds:.1f} s")


if __name__ == "__main__":
    main()
