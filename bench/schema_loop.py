"""``/health`` latency of ``brain serve`` while a model's answer meets a pathological schema
(issue 30, item 3).

Prints figures; asserts nothing.   .venv/bin/python bench/schema_loop.py [RUNS]

A ``brain serve`` subprocess holds two workflows with one ``llm(schema=...)`` step each,
answered by a fake model on 127.0.0.1: ``plain`` (a small schema, an answer that matches)
and ``backtracking`` (``"pattern": "^(a+)+$"`` against ``"aaaa…a!"``, minutes of
backtracking in Python's ``re``; the step's timeout is 3 s). For each, RUNS runs are queued
one after the other while ``/health`` is asked every 20 ms; the median, 99th percentile and
worst latency are printed. Target: worst under 0.5 s while the pathological check runs.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _serve import brain_serve, serve_env

from brain.testing import FakeChatServer

WORKFLOWS = """\
from brain import llm, workflow

PLAIN = {"type": "object", "properties": {"a": {"type": "string"}}}
BACKTRACKING = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}


@workflow
def plain():
    llm("ask", prompt="Say a", model="m", provider_url=PLAIN_URL, schema=PLAIN)


@workflow
def backtracking():
    llm("ask", prompt="Say a", model="m", provider_url=BAD_URL, schema=BACKTRACKING,
        timeout_seconds=3)
"""


def measure(url: str, workflow: str, runs: int) -> tuple[list[float], list[str]]:
    """``/health`` latencies while ``runs`` runs of ``workflow`` go on, and their ends."""
    latencies: list[float] = []
    ends: list[str] = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(runs):
            run_id = client.post(f"/api/workflows/{workflow}/runs", json={}).json()["run_id"]
            while True:
                t0 = time.perf_counter()
                client.get("/health").raise_for_status()
                latencies.append(time.perf_counter() - t0)
                run = client.get(f"/api/runs/{run_id}").json()
                if run["status"] in ("succeeded", "failed", "cancelled"):
                    step = run["steps"][0]
                    ends.append(step.get("error") or f"output {step.get('output')}")
                    break
                time.sleep(0.02)
    return latencies, ends


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    answer = json.dumps({"a": "a" * 34 + "!"})
    with tempfile.TemporaryDirectory() as tmp, FakeChatServer(reply='{"a": "fine"}') as good, \
            FakeChatServer(reply=answer) as bad:
        folder = Path(tmp) / "flows"
        folder.mkdir()
        (folder / "flows.py").write_text(WORKFLOWS.replace("PLAIN_URL", repr(good.url))
                                         .replace("BAD_URL", repr(bad.url)))
        with brain_serve(folder, serve_env(Path(tmp) / "brain.db"), Path(tmp) / "serve.log") as url:
            measure(url, "plain", 1)  # warm: the checking child starts, modules load
            print(f"brain serve, /health every 20 ms while {runs} runs go on, one after another:")
            for workflow in ("plain", "backtracking"):
                latencies, ends = measure(url, workflow, runs)
                ms = sorted(x * 1000 for x in latencies)
                p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
                print(f"  {workflow:13} {len(ms):4} answers  median {statistics.median(ms):6.1f} ms"
                      f"  p99 {p99:6.1f} ms  worst {ms[-1]:6.1f} ms  -> {ends[-1][:60]}")
    print("target: worst under 500 ms while the pathological check runs")


if __name__ == "__main__":
    main()
