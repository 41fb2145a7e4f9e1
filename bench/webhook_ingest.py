"""Webhook ingest: signed deliveries per second that ``brain serve`` commits, against a bare route.

Two targets, each served by uvicorn in its own process, each hit for
``--seconds`` (default 10) by a separate client process (httpx, asyncio,
``--connections`` concurrent connections, default 8), every request with its
own body, delivery id and HMAC signature:

* ``brain serve`` on SQLite, executors running normally (the workflow's one
  step is a plain ``@step``), ``BRAIN_MAX_QUEUED_RUNS`` raised so nothing is
  refused with 429. Afterwards the database must hold exactly one run per 202
  (queued, running or finished): accepted means committed.
* a bare Litestar app (``POST /hooks/{path}``) that checks the same signature
  with ``brain.server.webhooks.verify`` and stores nothing.

Prints accepted per second, p50/p99 latency for both, and the ratio (target:
brain at least half of the bare route). Asserts nothing but the commit count.

    .venv/bin/python bench/webhook_ingest.py [--seconds 10] [--connections 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _serve import brain_serve, free_port, start, stop, wait_healthy

REPO = Path(__file__).resolve().parent.parent
SECRET = "bench-webhook-secret"

WORKFLOW = '''
from brain import step, trigger, webhook, workflow

@step
def size(body: str) -> str:
    return str(len(body))

@workflow(triggers=[webhook(secret_env="BENCH_HOOK_SECRET")])
def ingest():
    size(trigger.body)
'''

BARE_APP = '''
import uuid
from litestar import Litestar, Request, Response, post
from litestar.exceptions import NotAuthorizedException
from brain.server.webhooks import verify

SECRET = {secret!r}

@post("/hooks/{{path:path}}", status_code=202)
async def hook(request: Request, path: str) -> Response:
    body = await request.body()
    headers = {{k.lower(): v for k, v in request.headers.items()}}
    if not verify(SECRET, body, headers):
        raise NotAuthorizedException(detail="invalid signature")
    body.decode("utf-8")
    return Response({{"run_id": uuid.uuid4().hex}}, status_code=202)

app = Litestar(route_handlers=[hook], debug=False, logging_config=None)
'''


def run_client(url: str, seconds: float, connections: int, tag: str) -> dict[str, object]:
    """The load, from a separate process (this file with ``--client``)."""
    proc = subprocess.run([sys.executable, __file__, "--client", url, str(seconds), str(connections),
                           tag], capture_output=True, text=True, timeout=seconds + 120)
    if proc.returncode != 0:
        sys.exit(f"the client failed:\n{proc.stderr}")
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def client_main(url: str, seconds: float, connections: int, tag: str) -> None:
    import hashlib
    import hmac

    import httpx

    async def go() -> dict[str, object]:
        latencies: list[float] = []
        statuses: dict[int, int] = {}
        errors = 0
        counter = 0
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        async with httpx.AsyncClient(limits=limits, timeout=30) as client:
            start = time.perf_counter()
            stop_at = start + seconds

            async def worker() -> None:
                nonlocal counter, errors
                while time.perf_counter() < stop_at:
                    counter += 1
                    body = json.dumps({"ref": "refs/heads/main", "n": counter, "tag": tag}).encode()
                    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                    headers = {"X-Brain-Signature": signature, "Content-Type": "application/json",
                               "X-Brain-Delivery": f"{tag}-{counter}"}
                    t0 = time.perf_counter()
                    try:
                        response = await client.post(url, content=body, headers=headers)
                    except httpx.HTTPError:
                        errors += 1
                        continue
                    latencies.append(time.perf_counter() - t0)
                    statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

            await asyncio.gather(*(worker() for _ in range(connections)))
            elapsed = time.perf_counter() - start
        latencies.sort()

        def pct(q: float) -> float:
            return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else 0.0

        return {"elapsed": elapsed, "statuses": statuses, "errors": errors,
                "p50_ms": pct(0.50), "p99_ms": pct(0.99)}

    print(json.dumps(asyncio.run(go())))


def accepted(result: dict[str, object]) -> int:
    statuses = result["statuses"]
    assert isinstance(statuses, dict)
    return int(statuses.get("202", 0))


def report(name: str, result: dict[str, object]) -> float:
    rate = accepted(result) / float(result["elapsed"])  # type: ignore[arg-type]
    print(f"{name:<22} {rate:8.0f} accepted/s   p50 {result['p50_ms']:6.2f} ms   "
          f"p99 {result['p99_ms']:6.2f} ms   answers {result['statuses']}  errors {result['errors']}")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="brain-bench-ingest-") as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "flows").mkdir()
        (tmp / "flows" / "ingest.py").write_text(textwrap.dedent(WORKFLOW))
        (tmp / "bare_app.py").write_text(BARE_APP.format(secret=SECRET))
        db = tmp / "brain.db"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "THE_BRAIN_"))}
        env.update(BENCH_HOOK_SECRET=SECRET, BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{db}",
                   BRAIN_MAX_QUEUED_RUNS="100000000", PYTHONPATH=str(tmp))

        # The bare route first: same uvicorn, same HMAC, nothing stored.
        port = free_port()
        bare = start([sys.executable, "-c", "import uvicorn, bare_app; uvicorn.run(bare_app.app, "
                      f"host='127.0.0.1', port={port}, log_level='warning')"], env, tmp / "bare.log")
        try:
            wait_healthy(f"http://127.0.0.1:{port}", bare, tmp / "bare.log", "/hooks/warmup")
            bare_result = run_client(f"http://127.0.0.1:{port}/hooks/ingest", args.seconds,
                                     args.connections, "bare")
        finally:
            stop(bare)

        with brain_serve(tmp / "flows", env, tmp / "serve.log") as url:
            brain_result = run_client(f"{url}/hooks/ingest", args.seconds, args.connections,
                                      "brain")

        with sqlite3.connect(db) as con:
            by_status = dict(con.execute("SELECT status, count(*) FROM brain_runs "
                                         "WHERE trigger_event = 'webhook' GROUP BY status").fetchall())
        committed = sum(by_status.values())

    print(f"webhook ingest: {args.seconds:g} s per target, {args.connections} connections, "
          f"client in its own process, SQLite, executors running")
    bare_rate = report("bare Litestar + HMAC", bare_result)
    brain_rate = report("brain serve", brain_result)
    ok = committed == accepted(brain_result)
    print(f"runs in the database: {committed} {by_status}; 202 answers: {accepted(brain_result)} "
          f"→ {'every accepted run committed' if ok else 'MISMATCH'}")
    ratio = brain_rate / bare_rate if bare_rate else 0.0
    print(f"ratio brain/bare: {ratio:.2f} (target ≥ 0.50: {'met' if ratio >= 0.5 else 'NOT met'})")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client_main(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main()
