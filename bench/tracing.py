"""The cost of traces (SPEC §25): the 1,000-step chain of ``bench/step_overhead.py`` with
traces off, and on with the OTLP/HTTP exporter batching to a local receiver this script
starts, side by side in one run. Prints figures; it asserts nothing (target: on within
1.1x of off).

    .venv/bin/python bench/tracing.py [--steps 1000] [--rounds 3]

Each run is a fresh process (``wf.run()`` on its own SQLite file), alternating off and on,
so both see the same machine; the median of the rounds is compared. "on" is configured
only by the standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT``), as a user would; its
time includes flushing the last batch at the end, not the once-per-process import of the
SDK and making of the tracer (printed apart, and with it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: The child's first line: ``bench/`` on its path, for ``_chain``.
FIND_CHAIN = f"import sys; sys.path.insert(0, {str(REPO / 'bench')!r})\n"

CHAIN = FIND_CHAIN + r'''
import json, sys, time
from _chain import chain_workflow

N = int(sys.argv[1]); URL = sys.argv[2]
wf = chain_workflow(N)
# The process's tracer is made once (importing the SDK and the exporter): timed apart.
from brain.runner.context import RunContext
t0 = time.perf_counter()
RunContext.from_environment()
setup_s = time.perf_counter() - t0
t0 = time.perf_counter()
result = wf(store=URL)
run_s = time.perf_counter() - t0
assert result.succeeded, result.error
flush_s = 0.0
if "opentelemetry" in sys.modules:
    from brain.runner.tracing import process_tracing
    t1 = time.perf_counter()
    process_tracing().force_flush()
    flush_s = time.perf_counter() - t1
print(json.dumps({"run_s": run_s, "flush_s": flush_s, "setup_s": setup_s,
                  "otel": "opentelemetry" in sys.modules}))
'''


class Receiver:
    """A local OTLP/HTTP endpoint that counts what it receives (bytes, requests)."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.requests += 1
                receiver.bytes += len(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def one(steps: int, folder: Path, env: dict[str, str], name: str) -> dict[str, Any]:
    url = f"sqlite:///{folder}/{name}.db"
    done = subprocess.run([sys.executable, "-c", CHAIN, str(steps), url], env=env,
                          capture_output=True, text=True, check=True, cwd=folder)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    receiver = Receiver()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "BRAIN_"))}
    base["PYTHONPATH"] = str(REPO)
    on_env = {**base, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
    off: list[float] = []
    on: list[float] = []
    setup: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for i in range(args.rounds):
            a = one(args.steps, folder, base, f"off{i}")
            b = one(args.steps, folder, on_env, f"on{i}")
            assert not a["otel"] and b["otel"]
            off.append(a["run_s"])
            on.append(b["run_s"] + b["flush_s"])
            setup.append(b["setup_s"])
            print(f"round {i + 1}: off {a['run_s']:.3f} s   on {b['run_s']:.3f} s "
                  f"(+ flush {b['flush_s'] * 1000:.0f} ms; tracer made before, in "
                  f"{b['setup_s'] * 1000:.0f} ms)")
    off_s, on_s = statistics.median(off), statistics.median(on)
    print(f"\n{args.steps}-step chain, median of {args.rounds}:")
    print(f"  traces off: {off_s:.3f} s ({off_s / args.steps * 1000:.3f} ms/step)")
    print(f"  traces on:  {on_s:.3f} s ({on_s / args.steps * 1000:.3f} ms/step), "
          f"{receiver.requests} exports, {receiver.bytes / 1024:.0f} KiB received")
    print(f"  on / off:   {on_s / off_s:.3f}x   (target <= 1.1x)")
    setup_s = statistics.median(setup)
    print(f"  once per process when on: {setup_s * 1000:.0f} ms to import and make the tracer "
          f"({(on_s + setup_s) / off_s:.3f}x with it)")


if __name__ == "__main__":
    main()
