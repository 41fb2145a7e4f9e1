"""``brain serve`` and ``brain worker``."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import signal
import socket
import time
from typing import TYPE_CHECKING, Any

from brain._errors import BrainError
from brain.cli.logs import announce, say, setup_logging
from brain.cli.startup import root_warning, serving_lock

if TYPE_CHECKING:
    from litestar import Litestar

    from brain.server.app import BrainPlugin
    from brain.service import BrainService

log = logging.getLogger("brain.server")

# HTTP limits of `brain serve` (SPEC §7: slow or idle connections cannot exhaust the server).
KEEP_ALIVE_SECONDS = 5
HEADER_TIMEOUT_SECONDS = 10.0  # from connecting (or the end of the last response) to full headers
BODY_TIMEOUT_SECONDS = 15.0  # from the end of the headers to the end of the body
MAX_HEADER_BYTES = 32 * 1024  # h11's buffer for an incomplete request line + headers
# Runs still running get this long after a stop is asked (BrainService.stop's default).
STOP_GRACE_SECONDS = 10
# accept() errors meaning "out of descriptors/memory": asyncio reports them once per queued
# connection (thousands a second); they are logged at most once a second instead.
_ACCEPT_RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


def _load(paths: list[str]) -> dict[str, object]:
    from brain.loader import discover

    workflows = discover(paths or ["."])
    if not workflows:
        raise BrainError(f"no @workflow found in {', '.join(paths or ['.'])}")
    return workflows  # type: ignore[return-value]


def connection_limit() -> int:
    """Connections (plus running requests) served at once: half the descriptor limit, so
    steps, the database and logs keep the other half; uvicorn answers 503 beyond it."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 2048
    return max(8, min(2048, soft // 2))


class AcceptErrorLimiter:
    """Event loop exception handler: accept() failing for lack of descriptors or memory
    (EMFILE...) is logged at most once a second, as one line; anything else goes to the
    loop's default handler."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._last = -interval
        self._hidden = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if not (isinstance(exc, OSError) and exc.errno in _ACCEPT_RESOURCE_ERRNOS
                and str(context.get("message", "")).startswith("socket.accept()")):
            loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            self._hidden += 1
            return
        hidden, self._hidden, self._last = self._hidden, 0, now
        log.error("cannot accept connections: %s (%s)%s; new connections wait until some close",
                  exc.strerror or exc, context.get("message", "accept failed"),
                  f"; {hidden} more like it in the last second" if hidden else "")


class _StopAfterResourceError:
    """A listening socket whose ``accept()`` says "nothing more" (BlockingIOError) once it
    has failed for lack of descriptors in this round. asyncio (before cpython#151615) keeps
    calling accept() after such an error, once per queued connection, each time reporting it
    and scheduling another retry: thousands of errors a second, growing."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._failed = False

    def accept(self) -> tuple[socket.socket, Any]:
        if self._failed:
            raise BlockingIOError(errno.EAGAIN, "accept paused after a resource error")
        try:
            return self.sock.accept()
        except OSError as exc:
            if exc.errno in _ACCEPT_RESOURCE_ERRNOS:
                self._failed = True
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


class ServeLoop(asyncio.SelectorEventLoop):
    """The event loop of ``brain serve``: one accept() error per round, not one per queued
    connection (see :class:`_StopAfterResourceError`)."""

    def _accept_connection(self, protocol_factory: Any, sock: Any, *args: Any,
                           **kwargs: Any) -> None:
        if isinstance(sock, _StopAfterResourceError):
            sock = sock.sock  # a retry scheduled with the wrapper: wrap the real socket afresh
        super()._accept_connection(  # type: ignore[misc]
            protocol_factory, _StopAfterResourceError(sock), *args, **kwargs)


def _h11_protocol() -> type[Any]:
    """uvicorn's h11 protocol with read deadlines: a connection must send a whole request
    head within HEADER_TIMEOUT_SECONDS (of connecting, or of its last response) and then
    its body within BODY_TIMEOUT_SECONDS, else it is closed. uvicorn's own keep-alive
    timeout stops at the first byte received."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderTimeoutH11Protocol(H11Protocol):
        # One deadline at a time, for the part of the request still awaited (h11's state).
        _deadline: asyncio.TimerHandle | None = None
        _awaited: type[h11.IDLE] | type[h11.SEND_BODY] | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await(h11.IDLE, HEADER_TIMEOUT_SECONDS)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            state = self.conn.their_state
            if state is h11.IDLE:  # no whole request head yet
                if self.timeout_keep_alive_task is None:
                    self._await(h11.IDLE, HEADER_TIMEOUT_SECONDS)
            elif state is h11.SEND_BODY:  # the head is in; the body must follow in time
                self._await(h11.SEND_BODY, BODY_TIMEOUT_SECONDS)
            else:
                self._cancel_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._cancel_deadline()  # keep-alive timeout governs the idle time now

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_deadline()
            super().connection_lost(exc)

        def _await(self, state: Any, seconds: float) -> None:
            """Start the deadline for ``state``, unless one for it already runs."""
            if self._deadline is not None and self._awaited is state:
                return
            self._cancel_deadline()
            self._awaited = state
            self._deadline = self.loop.call_later(seconds, self._deadline_passed)

        def _cancel_deadline(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _deadline_passed(self) -> None:
            self._deadline = None
            if self.conn.their_state is self._awaited and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutH11Protocol


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound now, so a taken port is one clear error before anything
    says it is serving."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, as getaddrinfo would: asyncio sets TCP_NODELAY only on accepted
    # sockets that say TCP, and without it a response written in two parts (head, body)
    # waits ~40 ms for the client's delayed ACK on every kept-alive request.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise BrainError(f"port {port} on {host} is already in use (another brain serve?): "
                             f"stop that process or choose another --port") from None
        if exc.errno == errno.EACCES:
            raise BrainError(f"no permission to listen on port {port} of {host}: choose a port "
                             f"above 1023 with --port") from None
        reason = exc.strerror or str(exc)
        raise BrainError(f"cannot listen on {host}:{port}: {reason}; check --host and --port") \
            from None
    sock.set_inheritable(True)
    return sock


def _server_class() -> type[Any]:
    import uvicorn

    class BrainServer(uvicorn.Server):
        """uvicorn's server, saying at once what a Ctrl-C does; a second Ctrl-C stops the
        running steps now (their runs stay resumable) instead of waiting the grace period."""

        plugin: BrainPlugin | None = None
        loop: asyncio.AbstractEventLoop | None = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            first = not self.should_exit
            super().handle_exit(sig, frame)
            # Stopping is handled here; uvicorn would re-raise the signal once stopped.
            self._captured_signals.clear()
            if first:
                say(f"stopping: no new runs; waiting up to {STOP_GRACE_SECONDS} s for running "
                     f"steps (press Ctrl-C again to stop them now; they resume on the next start)")
            elif self.force_exit and self.plugin is not None and self.loop is not None:
                say("stopping now: running steps are stopped; their runs resume on the next start")
                self.loop.call_soon_threadsafe(self.plugin.stop_now_soon)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await super().shutdown(sockets)
            if self.force_exit and self.plugin is not None:
                # uvicorn skips the app's shut-down on a forced exit; runs still need their
                # leases handed back, or they would be recorded cancelled.
                await self.plugin.stop_now()

    return BrainServer


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the HTTP server with executors, schedules, webhooks and watchers."""
    from brain.server import create_app
    from brain.server.security import api_token, is_loopback_host

    if api_token() is None and not is_loopback_host(args.host):
        raise BrainError(f"refusing to listen on {args.host} without BRAIN_API_TOKEN: set a token "
                         f"(then every /api request needs it) or keep the default 127.0.0.1")
    if args.concurrency is not None and args.concurrency < 1:
        raise BrainError("--concurrency must be at least 1")
    setup_logging()
    workflows = _load(args.paths)
    app = create_app(workflows, concurrency=args.concurrency,  # type: ignore[arg-type]
                     reload_paths=(args.paths or ["."]) if args.reload else None)
    service = app.state["brain"]
    asyncio.run(service.preflight())
    with serving_lock(service.store.url, "serve"):
        return _serve(app, service, workflows, args)


def _warn_if_root() -> None:
    """The root warning (SPEC §11) as a line of the log, when running as root."""
    warning = root_warning()
    if warning:
        log.warning("%s", warning)


def _serve(app: Litestar, service: BrainService, workflows: dict[str, object],
           args: argparse.Namespace) -> int:
    """Bind, say so, and serve until stopped (the database's serving lock held)."""
    import uvicorn

    from brain.server.app import BrainPlugin

    sock = bind_socket(args.host, args.port)
    # The port bound, which is the system's choice for --port 0: the start-up line says it,
    # so whoever started the server (a test, a script) reads it there, without a race.
    port = int(sock.getsockname()[1])
    _warn_if_root()
    hooks = ", ".join(f"/hooks/{p}" for p in service.hooks) or "none"
    announce(f"The Brain: {_workflows(len(workflows))} ({', '.join(workflows)}) on "
              f"http://{args.host}:{port}  ·  page /  ·  API /api  ·  OpenAPI /schema  ·  "
              f"webhooks {hooks}  ·  database {service.store.shown_url}")
    config = uvicorn.Config(app, host=args.host, port=port, log_config=None,
                            lifespan="on", timeout_graceful_shutdown=15,
                            http=_h11_protocol(), timeout_keep_alive=KEEP_ALIVE_SECONDS,
                            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
                            limit_concurrency=connection_limit())
    server = _server_class()(config)
    server.plugin = app.plugins.get(BrainPlugin)

    async def serve() -> None:
        server.loop = asyncio.get_running_loop()
        server.loop.set_exception_handler(AcceptErrorLimiter())
        await server.serve(sockets=[sock])

    try:
        with asyncio.Runner(loop_factory=ServeLoop) as runner:
            runner.run(serve())
    finally:
        sock.close()
    if server.should_exit and server.started:
        announce("stopped")
    return 0 if server.started else 2


def cmd_mcp_serve(args: argparse.Namespace) -> int:
    """``brain mcp serve``: the ``mcp=True`` workflows as MCP tools over stdio (SPEC §23)."""
    from brain.mcp_server.stdio import serve_stdio, stdio_service

    workflows = _load(args.paths)
    service = stdio_service(workflows)  # type: ignore[arg-type]

    async def go() -> None:
        await service.preflight()
        with serving_lock(service.store.url, "mcp"):
            await serve_stdio(service, claimed=setup_logging)

    asyncio.run(go())
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Execute queued runs until SIGTERM/SIGINT."""
    from brain.service import BrainService

    if args.concurrency is not None and args.concurrency < 1:
        raise BrainError("--concurrency must be at least 1")
    setup_logging()
    workflows = _load(args.paths)

    async def go() -> None:
        service = BrainService(workflows, kind="worker",  # type: ignore[arg-type]
                               concurrency=args.concurrency,
                               triggers=False)
        await service.preflight()
        with serving_lock(service.store.url, "worker"):
            _warn_if_root()
            await _work(service, workflows)

    asyncio.run(go())
    return 0


async def _work(service: BrainService, workflows: dict[str, object]) -> None:
    """Start the worker's executors; stop them on SIGTERM/SIGINT (a second one stops the
    running steps at once)."""
    await service.start()
    announce(f"The Brain worker: {_workflows(len(workflows))}, {service.concurrency} runs at "
             f"once, database {service.store.shown_url}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Future[None]] = []

    def on_signal() -> None:
        if not stop.is_set():
            stop.set()
            return
        # A second Ctrl-C: stop at once (unfinished runs stay resumable).
        say("stopping now: running steps are stopped, their runs resume on the next start")
        stopping.append(asyncio.ensure_future(service.stop(grace_seconds=0)))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    await stop.wait()
    say(f"stopping: letting running steps finish (up to {STOP_GRACE_SECONDS}s; "
        f"Ctrl-C again to stop now)")
    await service.stop(grace_seconds=STOP_GRACE_SECONDS)
    for hurry in stopping:
        await hurry


def _workflows(count: int) -> str:
    """``1 workflow``, ``2 workflows``."""
    return f"{count} workflow{'' if count == 1 else 's'}"
