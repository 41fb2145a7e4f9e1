"""``brain serve`` and ``brain worker``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from brain._errors import BrainError
from brain.cli import render

log = logging.getLogger("brain.server")


def _setup_logging() -> None:
    import os

    fmt = os.environ.get("BRAIN_LOG_FORMAT", "text")
    if fmt == "json":
        import json

        class JsonFormatter(logging.Formatter):
            def format(self, record: logging.LogRecord) -> str:
                return json.dumps({"time": self.formatTime(record), "level": record.levelname,
                                   "logger": record.name, "message": record.getMessage()})

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("brain")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def _load(paths: list[str]) -> dict[str, object]:
    from brain.loader import discover

    workflows = discover(paths or ["."])
    if not workflows:
        raise BrainError(f"no @workflow found in {', '.join(paths or ['.'])}")
    return workflows  # type: ignore[return-value]


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the HTTP server with executors, schedules, webhooks and watchers."""
    import uvicorn

    from brain.server import create_app
    from brain.server.security import api_token, is_loopback_host

    if api_token() is None and not is_loopback_host(args.host):
        raise BrainError(f"refusing to listen on {args.host} without BRAIN_API_TOKEN: set a token "
                         f"(then every /api request needs it) or keep the default 127.0.0.1")
    if args.concurrency is not None and args.concurrency < 1:
        raise BrainError("--concurrency must be at least 1")
    _setup_logging()
    workflows = _load(args.paths)
    app = create_app(workflows, concurrency=args.concurrency,  # type: ignore[arg-type]
                     reload_paths=(args.paths or ["."]) if args.reload else None)
    service = app.state["brain"]
    asyncio.run(service.preflight())
    hooks = ", ".join(f"/hooks/{p}" for p in service.hooks) or "none"
    render.ok(f"The Brain: {len(workflows)} workflows ({', '.join(workflows)}) on "
              f"http://{args.host}:{args.port}  ·  page /  ·  API /api  ·  OpenAPI /schema  ·  "
              f"webhooks {hooks}  ·  database {service.store.shown_url}")
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning",
                            lifespan="on", timeout_graceful_shutdown=15)
    server = uvicorn.Server(config)
    server.run()
    return 0 if server.started else 2


def cmd_worker(args: argparse.Namespace) -> int:
    """Execute queued runs until SIGTERM/SIGINT."""
    from brain.server.service import BrainService

    if args.concurrency is not None and args.concurrency < 1:
        raise BrainError("--concurrency must be at least 1")
    _setup_logging()
    workflows = _load(args.paths)

    async def go() -> None:
        service = BrainService(workflows, concurrency=args.concurrency,  # type: ignore[arg-type]
                               triggers=False)
        await service.preflight()
        await service.start()
        render.ok(f"The Brain worker: {len(workflows)} workflows, {service.concurrency} runs at "
                  f"once, database {service.store.shown_url}")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        render.ok("stopping: letting running steps finish")
        await service.stop()

    asyncio.run(go())
    return 0
