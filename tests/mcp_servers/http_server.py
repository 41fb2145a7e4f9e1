"""A real MCP server (official SDK) over HTTP, behind a bearer-token check, for the
remote ``mcp_tool(url=...)`` tests (SPEC §17).

Run as ``python tests/mcp_servers/http_server.py --port 0`` (streamable HTTP at ``/mcp``;
``sse_server.py`` serves the same tools over the legacy HTTP+SSE transport at ``/sse``).
The first line on stdout is the port it listens on (useful with ``--port 0``); anything
it prints after that goes to stderr. ``GET /health`` answers 200 without a token, so a
starter can wait until it answers. Options:

- ``--port N``: the loopback port (``0``: any free port).
- ``--token T`` / ``--token-env NAME`` / ``--token-file PATH``: requests need
  ``Authorization: Bearer T``, else 401; a token file is read again on every request
  (tests change it between runs). Without any, no check.
- ``--fail-status CODE`` (``--fail-500`` for 500): answer every MCP request with this
  HTTP status (500, 503, 403, ...).
- ``--events PATH``: append one JSON line per event: every inbound JSON-RPC method
  (``{"event": "method", "method": ..., "session": ..., "params": ...}``, params only for
  ``tools/call`` and ``notifications/cancelled``; ``session`` is ``conn-N``, the N-th MCP
  session this process saw); what arrived on the wire (``{"event": "http", "verb": "POST",
  "method": ..., "id": ..., "session_id": ...}`` for each JSON-RPC message posted,
  ``"verb": "DELETE"`` for a session's end); and what the ``slow`` tool does
  (``slow-started`` with its JSON-RPC request id, ``slow-cancelled`` saying whether the
  client's cancel had arrived, ``slow-finished``).
- ``--watch-stdin``: exit when stdin reaches its end (the starter died or closed it), so
  a server cannot outlive the test that started it.

Tools: ``echo(text)``, ``pid()`` (``{"pid", "calls", "session"}``: this process's id and
how many ``pid`` calls this MCP session made), ``count(n, delay)`` (``n`` progress
notifications), ``slow(seconds, tag)``, ``headers()`` (the HTTP request headers seen) and
``header_digests()`` (their SHA-256: proves a secret value arrived without showing it).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

app = MCPServer("brain-test-http", log_level="WARNING")
_events: Path | None = None
_lock = threading.Lock()
#: ``pid`` calls per MCP session (by its label).
_calls: dict[str, int] = {}
_sessions: list[object] = []  # the SDK's connections seen (kept alive: ids stay unique)


def record(event: str, **fields: Any) -> None:
    """Append one event to the ``--events`` file (when given)."""
    if _events is None:
        return
    line = json.dumps({"event": event, **fields}, sort_keys=True)
    with _lock, _events.open("a") as f:
        f.write(line + "\n")


def session_label(session: object) -> str:
    """Which MCP session a message came in: ``conn-N`` for the N-th session this process
    has seen (one per streamable-HTTP session, one per SSE stream, one on stdio)."""
    # The SDK makes a session object per message; the connection behind it is shared.
    session = getattr(session, "_connection", session)
    with _lock:
        for i, seen in enumerate(_sessions):
            if seen is session:
                return f"conn-{i + 1}"
        _sessions.append(session)
        return f"conn-{len(_sessions)}"


def _label(ctx: Context) -> str:
    return session_label(ctx.session)


@app.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@app.tool()
def pid(ctx: Context) -> str:
    """This process's id, how many ``pid`` calls this session made (this one counted) and
    the session's id, as JSON."""
    key = _label(ctx)
    with _lock:
        _calls[key] = _calls.get(key, 0) + 1
        calls = _calls[key]
    return json.dumps({"pid": os.getpid(), "calls": calls, "session": key})


@app.tool()
async def count(n: int, ctx: Context, delay: float = 0.05) -> str:
    """Send ``n`` progress notifications (``i`` of ``n``, ``"step i"``), a short pause
    between them, then answer."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
        await anyio.sleep(delay)
    return f"counted {n}"


@app.tool()
async def slow(seconds: float, ctx: Context, tag: str = "") -> str:
    """Sleep ``seconds``; record when it starts (with its JSON-RPC request id), ends, or is
    cancelled (a client's ``notifications/cancelled``, or the session ending)."""
    record("slow-started", tag=tag, pid=os.getpid(), request=ctx.request_id)
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        # Whether the client's notifications/cancelled for this call had arrived (else the
        # session ended under it).
        dispatch = getattr(ctx.session, "_request_outbound", None)
        requested = getattr(dispatch, "cancel_requested", None)
        record("slow-cancelled", tag=tag, pid=os.getpid(),
               requested=None if requested is None else requested.is_set())
        raise
    record("slow-finished", tag=tag, pid=os.getpid())
    return f"slept {seconds:g}"


@app.tool()
def headers(ctx: Context) -> str:
    """The HTTP headers of the request that carried this call, as JSON (names in lower case)."""
    return json.dumps({k.lower(): v for k, v in (ctx.headers or {}).items()}, sort_keys=True)


@app.tool()
def header_digests(ctx: Context) -> str:
    """The SHA-256 (hex) of each header value of the request that carried this call, as JSON."""
    return json.dumps({k.lower(): hashlib.sha256(v.encode()).hexdigest()
                       for k, v in (ctx.headers or {}).items()}, sort_keys=True)


async def _observe(ctx: Any, call_next: Any) -> Any:
    """Middleware: record every inbound request's and notification's method."""
    fields: dict[str, Any] = {"method": ctx.method,
                              "session": session_label(ctx.session)}
    if ctx.method in ("tools/call", "notifications/cancelled"):
        fields["params"] = ctx.params
    record("method", **fields)
    return await call_next(ctx)


app.middleware.append(_observe)


class Gate:
    """ASGI middleware in front of the SDK's app: ``/health`` answers 200; every other
    HTTP request needs the bearer token (401 without it or with a wrong one), or gets
    ``fail_status`` when one is set. Lifespan events pass through (they start the SDK's
    session manager)."""

    def __init__(self, inner: ASGIApp, token: Callable[[], str | None],
                 fail_status: int | None) -> None:
        self.inner = inner
        self.token = token
        self.fail_status = fail_status

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        if scope["path"] == "/health":
            await _answer(send, 200, b"ok")
            return
        if self.fail_status is not None:
            await _answer(send, self.fail_status, b"this server always answers so")
            return
        expected = self.token()
        if expected is not None:
            sent = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(sent, f"Bearer {expected}".encode()):
                await _answer(send, 401, b"authentication required",
                              [(b"www-authenticate", b'Bearer realm="brain-test"')])
                return
        await self.inner(scope, _on_the_wire(scope, receive), send)


def _on_the_wire(scope: Scope, receive: Receive) -> Receive:
    """``receive``, recording what arrived over HTTP as it passes: each JSON-RPC message
    posted (an ``http`` event with its method and id, and its params for ``tools/call``
    and ``notifications/cancelled``), and each ``DELETE`` (a session's end), with the MCP
    session id the request named (SSE: its query string), if any. This is what the client
    sent, whatever the SDK's server did with it afterwards."""
    verb = scope["method"]
    headers = dict(scope["headers"])
    sid = headers.get(b"mcp-session-id", b"").decode() or scope.get("query_string", b"").decode()
    if verb == "DELETE":
        record("http", verb=verb, session_id=sid)
    if verb != "POST":
        return receive
    body = bytearray()

    async def watched() -> Message:
        message = await receive()
        if message["type"] == "http.request":
            body.extend(message.get("body", b""))
            if not message.get("more_body", False):
                _record_posted(bytes(body), sid)
        return message

    return watched


def _record_posted(body: bytes, sid: str) -> None:
    try:
        parsed = json.loads(body)
    except ValueError:
        return
    for message in parsed if isinstance(parsed, list) else [parsed]:
        if isinstance(message, dict) and "method" in message:
            fields: dict[str, Any] = {"verb": "POST", "method": message["method"],
                                      "session_id": sid, "id": message.get("id")}
            if message["method"] in ("tools/call", "notifications/cancelled"):
                fields["params"] = message.get("params")
            record("http", **fields)


async def _answer(send: Send, status: int, body: bytes,
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"),
                            (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


def _token_source(args: argparse.Namespace) -> Callable[[], str | None]:
    if args.token_file:
        path = Path(args.token_file)
        return lambda: path.read_text().strip() if path.exists() else None
    token = args.token or (os.environ[args.token_env] if args.token_env else None)
    return lambda: token


def _watch_stdin() -> None:
    """Exit at once when stdin ends: the process that started this server is gone."""
    def watch() -> None:
        while sys.stdin.buffer.read(4096):
            pass
        os._exit(0)

    threading.Thread(target=watch, name="watch-stdin", daemon=True).start()


def main(transport: str = "streamable-http") -> None:
    global _events
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token")
    parser.add_argument("--token-env")
    parser.add_argument("--token-file")
    parser.add_argument("--fail-status", type=int)
    parser.add_argument("--fail-500", dest="fail_status", action="store_const", const=500)
    parser.add_argument("--events")
    parser.add_argument("--watch-stdin", action="store_true")
    args = parser.parse_args()
    _events = Path(args.events) if args.events else None
    if args.watch_stdin:
        _watch_stdin()

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    print(sock.getsockname()[1], flush=True)
    os.dup2(2, 1)  # nothing else on stdout: the starter may stop reading it now

    inner = app.sse_app() if transport == "sse" else app.streamable_http_app()
    gate = Gate(inner, _token_source(args), args.fail_status)
    config = uvicorn.Config(gate, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=1)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
