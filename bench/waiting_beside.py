"""A new run beside 1,000 runs waiting for a decision: how long a one-step run takes,
from ``POST /api/workflows/quick/runs`` to seeing it succeeded, with none waiting and with
1,000 waiting, on one ``brain serve --concurrency 2`` (SQLite file in a temp dir).

The test (``tests/server/test_waiting_serve.py``) checks the behaviour: the new run goes
through at all, since waiting runs hold no executor slot. This prints the speed: the median
and worst of ``--quick`` runs each way and their ratio. Target: beside 1,000 waiting, the
median under 5 times the one with none waiting (or under 3 s).

Prints figures; asserts nothing.   .venv/bin/python bench/waiting_beside.py [--quick 5]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx
from _serve import free_port, serve_env, start, stop, wait_healthy

FLOWS = textwrap.dedent('''
    from brain import approval, shell, trigger, workflow

    @workflow
    def held():
        approval("go", prompt=f"Release {trigger.body}?")
        shell("release", argv=["echo", "released"])

    @workflow
    def quick():
        shell("hi", argv=["echo", "hi"])
''')
HELD = 1000


def quick_run(client: httpx.Client) -> float:
    """Seconds from queueing a ``quick`` run to reading it succeeded."""
    t0 = time.monotonic()
    run_id = client.post("/api/workflows/quick/runs", json={"body": ""}).json()["run_id"]
    while True:
        status = client.get(f"/api/runs/{run_id}").json()["status"]
        if status in ("succeeded", "failed", "cancelled"):
            if status != "succeeded":
                sys.exit(f"the quick run {run_id} {status}")
            return time.monotonic() - t0
        time.sleep(0.005)


def hold(url: str, first: int) -> int:
    """Queue every 8th of the held runs from ``first``; how many."""
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(first, HELD, 8):
            r = client.post("/api/workflows/held/runs", json={"body": f"v{i}"})
            r.raise_for_status()
    return len(range(first, HELD, 8))


def waiting(client: httpx.Client) -> int:
    """How many runs are waiting now."""
    return len(client.get("/api/runs", params={"status": "waiting", "limit": HELD}).json())


def main() -> None:
    """Print the quick run's median and worst, none waiting and 1,000 waiting."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", type=int, default=5, help="quick runs each way (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_waiting_beside_") as tmp:
        folder = Path(tmp) / "flows"
        folder.mkdir()
        (folder / "flows.py").write_text(FLOWS)
        env = {**serve_env(Path(tmp) / "brain.db"), "BRAIN_MAX_QUEUED_RUNS": "5000"}
        port, log = free_port(), Path(tmp) / "serve.log"
        proc = start([str(Path(sys.executable).with_name("brain")), "serve", str(folder),
                      "--port", str(port), "--concurrency", "2"], env, log)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc, log)
            with httpx.Client(base_url=url, timeout=30) as client:
                quick_run(client)  # the first run creates what later ones reuse
                alone = [quick_run(client) for _ in range(args.quick)]
                with concurrent.futures.ThreadPoolExecutor(8) as pool:
                    assert sum(pool.map(lambda first: hold(url, first), range(8))) == HELD
                deadline = time.monotonic() + 300
                while waiting(client) < HELD:
                    if time.monotonic() > deadline:
                        sys.exit(f"only {waiting(client)} of {HELD} runs came to wait")
                    time.sleep(0.2)
                beside = [quick_run(client) for _ in range(args.quick)]
        finally:
            stop(proc)
    print(f"a one-step run on brain serve --concurrency 2, {args.quick} runs each:")
    for label, took in (("none waiting", alone), (f"{HELD} waiting", beside)):
        print(f"  {label:<13} median {statistics.median(took) * 1000:7.1f} ms, "
              f"worst {max(took) * 1000:7.1f} ms")
    print(f"  ratio of medians {statistics.median(beside) / statistics.median(alone):.2f}x "
          f"(target under 5x, or under 3 s)")


if __name__ == "__main__":
    main()
