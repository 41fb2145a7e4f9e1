"""Attack helper (SPEC §17): a hostile MCP server over HTTP, and proof that it speaks MCP.

:class:`HostileMcp` is a small streamable-HTTP (and legacy HTTP+SSE) MCP server written on
the standard library, in a thread of the test process, so that a test controls every byte
it answers. It echoes the credentials it receives back in whatever place and form a test
asks for, or misbehaves on the wire. The other ``test_attack_remote_mcp_*`` files import
it (``from test_attack_remote_mcp_hostile import HostileMcp``).

A step reaches it at ``HostileMcp.url(mode, echo, how)``: ``/{mode}/{echo}/{how}/mcp``.

``echo`` — which credential it echoes: a header name (``authorization``,
``x-api-key``, ...), ``bearer`` (the token after ``Bearer``), ``basic-password`` (the
password of ``Authorization: Basic``), or ``none``.

``how`` — in what form (:data:`TRANSFORMS`): ``raw``, ``safe`` (every form SPEC §11 says
is scrubbed, one after the other: JSON-escaped, URL-quoted, base64 at each alignment,
hex...), ``dotnet`` (JSON as .NET's System.Text.Json writes it: ``+`` as ``\\u002B``),
``form`` (``application/x-www-form-urlencoded`` as Java's ``URLEncoder`` and JavaScript's
``URLSearchParams`` write it: ``~`` as ``%7E``), ``tail`` (the value at the end of a
long text).

``mode`` — where the echo goes, or what goes wrong:

- ``tool``: the ``tools/call`` answer's text block; ``structured``: its
  ``structuredContent``; ``progress``: two ``notifications/progress`` messages on an SSE
  answer, then the result; ``iserror``: a tool result with ``isError``; ``error``: a
  JSON-RPC error (code -32001); ``error32000``: a JSON-RPC error with code -32000 (the
  JSON-RPC "server error" range); ``initerror``: ``initialize`` answered with a JSON-RPC
  error; ``malformed``: a result whose ``content`` is not a list; ``notrpc``: a JSON body
  that is no JSON-RPC message.
- ``httpNNN``: every POST answered with status NNN (the echo in a text body);
  ``callhttpNNN``: only the ``tools/call``.
- ``silent``: reads the request, never answers; ``trickle``: answers ``tools/call`` with
  an SSE stream of keep-alive comments, never a result; ``trickleinit``: the same for
  ``initialize``; ``slowbody``: a JSON answer to ``initialize`` whose body arrives one
  byte a second.
- Legacy SSE (``GET /{mode}/.../sse``): ``sse-silent`` (no ``endpoint`` event ever),
  ``sse-trickle`` (keep-alive comments only), ``sse-foreign`` (an ``endpoint`` on another
  origin), ``sseokNNN`` (a good ``endpoint``; every message POST answered NNN),
  ``sse-tool`` (a working SSE server that echoes like ``tool``).

Run: ``.venv/bin/pytest tests/attack/test_attack_remote_mcp_hostile.py``
"""

from __future__ import annotations

import base64
import json
import queue
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, quote_plus

import pytest


def dotnet_json(value: str) -> str:
    """``value`` inside a JSON string as .NET's System.Text.Json writes it by default: HTML
    characters and ``+`` as upper-case ``\\uXXXX`` escapes (RFC 8259 allows either case)."""
    out = []
    for ch in value:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "+<>&'`" or ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return "".join(out)


def form_encode(value: str) -> str:
    """``application/x-www-form-urlencoded`` as Java's URLEncoder and JavaScript's
    URLSearchParams write it: letters, digits and ``*-._`` kept, space as ``+``, every
    other byte ``%XX``."""
    keep = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789*-._")
    return "".join(chr(b) if chr(b) in keep else "+" if b == 0x20 else f"%{b:02X}"
                   for b in value.encode())


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def safe_forms(value: str) -> list[str]:
    """The forms SPEC §11 promises to scrub: the value, JSON-escaped (once and twice),
    URL-quoted (``quote``, ``quote_plus``, lower-case escapes), base64 (standard, URL-safe,
    unpadded, and inside a longer encoded text at each of the three alignments), hex."""
    data = value.encode()
    forms = [value, json.dumps(value)[1:-1], json.dumps(json.dumps(value))[3:-3],
             quote(value, safe=""), quote_plus(value),
             re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), quote(value, safe="")),
             _b64(data), base64.urlsafe_b64encode(data).decode(), _b64(data).rstrip("="),
             data.hex(), data.hex().upper()]
    forms += [_b64(b"x" * k + b":" + data + b":end") for k in range(3)]
    return forms


TRANSFORMS: dict[str, Callable[[str], str]] = {
    "raw": lambda v: v,
    "safe": lambda v: " | ".join(safe_forms(v)),
    "dotnet": dotnet_json,
    "form": form_encode,
    "tail": lambda v: "padding " * 8 + v,
}


class HostileMcp(ThreadingHTTPServer):
    """The hostile server (see the module); a context manager that serves in a thread."""

    daemon_threads = True
    protocol_version = "HTTP/1.1"

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.stop = threading.Event()
        self.requests: queue.Queue[dict[str, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True,
                                        name="hostile-mcp")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def url(self, mode: str, echo: str = "none", how: str = "raw", *, sse: bool = False) -> str:
        return f"{self.base}/{mode}/{echo}/{how}/{'sse' if sse else 'mcp'}"

    def seen(self) -> list[dict[str, Any]]:
        """Every request received so far (``path``, ``verb``, ``headers``, ``message``)."""
        found = []
        while not self.requests.empty():
            found.append(self.requests.get_nowait())
        for item in found:
            self.requests.put(item)
        return found

    def __enter__(self) -> HostileMcp:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.shutdown()
        self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a step cut off by its timeout) is normal here."""


def _echoed(headers: dict[str, str], echo: str) -> str:
    if echo == "none":
        return ""
    if echo == "bearer":
        return headers.get("authorization", "").removeprefix("Bearer ")
    if echo == "basic-password":
        raw = headers.get("authorization", "").removeprefix("Basic ")
        return base64.b64decode(raw).decode().partition(":")[2] if raw else ""
    return headers.get(echo, "")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HostileMcp

    def log_message(self, format: str, *args: Any) -> None:
        return

    # --- plumbing -----------------------------------------------------------------------

    def _send(self, status: int, body: bytes = b"", ctype: str = "application/json",
              extra: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj: Any) -> None:
        self._send(200, json.dumps(obj).encode())

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

    def _sse(self, obj: Any) -> None:
        self.wfile.write(f"event: message\ndata: {json.dumps(obj)}\n\n".encode())
        self.wfile.flush()

    def _until_stopped(self, every: float, write: bytes | None) -> None:
        try:
            while not self.server.stop.wait(every):
                if write is not None:
                    self.wfile.write(write)
                    self.wfile.flush()
        except OSError:
            return

    def _parts(self) -> tuple[str, str, str]:
        parts = [*self.path.split("?")[0].strip("/").split("/"), "none", "raw"]
        return parts[0], parts[1] if len(parts) > 4 else "none", \
            parts[2] if len(parts) > 5 else "raw"

    # --- verbs --------------------------------------------------------------------------

    def do_DELETE(self) -> None:
        self.server.requests.put({"path": self.path, "verb": "DELETE",
                                  "headers": {k.lower(): v for k, v in self.headers.items()}})
        self._send(200)

    def do_GET(self) -> None:
        mode, echo, how = self._parts()
        self.server.requests.put({"path": self.path, "verb": "GET",
                                  "headers": {k.lower(): v for k, v in self.headers.items()}})
        if not (mode.startswith("sse-") or mode.startswith("sseok")):
            self._send(405)
            return
        self._sse_start()
        endpoint = f"/{mode}/{echo}/{how}/messages/?session_id=hostile"
        try:
            if mode == "sse-foreign":
                self.wfile.write(b"event: endpoint\ndata: http://127.0.0.2:9/messages/?x=1\n\n")
            elif mode in ("sse-tool",) or mode.startswith("sseok"):
                self.wfile.write(f"event: endpoint\ndata: {endpoint}\n\n".encode())
            self.wfile.flush()
        except OSError:
            return
        if mode == "sse-tool":
            self._sse_session(echo, how)
            return
        self._until_stopped(0.2, None if mode == "sse-silent" else b": keep-alive\n\n")

    def _sse_session(self, echo: str, how: str) -> None:
        """A working legacy SSE session: answers what the message POSTs queue."""
        outbox: queue.Queue[Any] = queue.Queue()
        with _SSE_LOCK:
            _SSE_OUTBOXES["hostile"] = outbox
        try:
            while not self.server.stop.is_set():
                try:
                    item = outbox.get(timeout=0.2)
                except queue.Empty:
                    self.wfile.write(b": keep-alive\n\n")
                    self.wfile.flush()
                    continue
                self._sse(item)
        except OSError:
            return
        finally:
            with _SSE_LOCK:
                if _SSE_OUTBOXES.get("hostile") is outbox:
                    del _SSE_OUTBOXES["hostile"]

    def do_POST(self) -> None:
        mode, echo, how = self._parts()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            message = json.loads(body)
        except ValueError:
            message = None
        self.server.requests.put({"path": self.path, "verb": "POST", "headers": headers,
                                  "message": message})
        shown = TRANSFORMS[how](_echoed(headers, echo))
        if mode.startswith("sseok"):
            self._send(int(mode[5:]), b"refused", "text/plain")
            return
        if mode == "sse-tool":
            self._send(202)
            if isinstance(message, dict) and message.get("id") is not None:
                answer = self._answer("tool", message, shown)
                with _SSE_LOCK:
                    outbox = _SSE_OUTBOXES.get("hostile")
                if outbox is not None and answer is not None:
                    outbox.put(answer)
            return
        if not isinstance(message, dict):
            self._send(400, b"not JSON", "text/plain")
            return
        method, mid = message.get("method"), message.get("id")
        if mode == "silent":
            self._until_stopped(0.1, None)
            return
        if mode.startswith("http") and mode[4:].isdigit():
            self._send(int(mode[4:]), f"server says: {shown}".encode(), "text/plain")
            return
        if mid is None:  # a notification
            self._send(202)
            return
        if mode.startswith("callhttp") and method == "tools/call":
            self._send(int(mode[8:]), f"server says: {shown}".encode(), "text/plain")
            return
        if method == "initialize" and mode == "trickleinit":
            self._sse_start()
            self._until_stopped(0.2, b": keep-alive\n\n")
            return
        if method == "initialize" and mode == "slowbody":
            answer = json.dumps(self._answer("tool", message, shown)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            try:
                for i in range(len(answer)):
                    if self.server.stop.wait(1.0):
                        return
                    self.wfile.write(answer[i:i + 1])
                    self.wfile.flush()
            except OSError:
                pass
            return
        if method == "tools/call" and mode == "trickle":
            self._sse_start()
            self._until_stopped(0.2, b": keep-alive\n\n")
            return
        if method == "tools/call" and mode == "progress":
            token = ((message.get("params") or {}).get("_meta") or {}).get("progressToken")
            self._sse_start()
            try:
                for i in (1, 2):
                    self._sse({"jsonrpc": "2.0", "method": "notifications/progress",
                               "params": {"progressToken": token, "progress": i, "total": 2,
                                          "message": f"step {i}: {shown}"}})
                    time.sleep(0.3)  # one at least lands in a stored take of its own
                self._sse({"jsonrpc": "2.0", "id": mid,
                           "result": {"content": [{"type": "text", "text": "done"}]}})
            except OSError:
                pass
            self.close_connection = True
            return
        answer = self._answer(mode, message, shown)
        self._json(answer)

    def _answer(self, mode: str, message: dict[str, Any], shown: str) -> Any:
        method, mid = message.get("method"), message.get("id")
        if method == "initialize":
            if mode == "initerror":
                return {"jsonrpc": "2.0", "id": mid,
                        "error": {"code": -32001, "message": f"client refused: {shown}"}}
            return {"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": (message.get("params") or {}).get("protocolVersion"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"}}}
        if method == "tools/list":
            return {"jsonrpc": "2.0", "id": mid, "result": {"tools": [{
                "name": "leaky", "description": f"echoes {shown}",
                "inputSchema": {"type": "object", "description": shown}}]}}
        if method != "tools/call":
            return {"jsonrpc": "2.0", "id": mid, "result": {}}
        if mode == "error":
            return {"jsonrpc": "2.0", "id": mid,
                    "error": {"code": -32001, "message": f"no access for {shown}"}}
        if mode == "error32000":
            return {"jsonrpc": "2.0", "id": mid,
                    "error": {"code": -32000, "message": f"quota exceeded for {shown}"}}
        if mode == "iserror":
            return {"jsonrpc": "2.0", "id": mid, "result": {
                "isError": True, "content": [{"type": "text", "text": f"denied {shown}"}]}}
        if mode == "malformed":
            return {"jsonrpc": "2.0", "id": mid, "result": {"content": f"oops {shown}"}}
        if mode == "notrpc":
            return {"jsonrpc": "2.0", "id": mid, "oops": shown}
        if mode == "structured":
            return {"jsonrpc": "2.0", "id": mid,
                    "result": {"content": [], "structuredContent": {"seen": shown}}}
        return {"jsonrpc": "2.0", "id": mid,
                "result": {"content": [{"type": "text", "text": f"seen {shown}"}]}}


_SSE_LOCK = threading.Lock()
_SSE_OUTBOXES: dict[str, queue.Queue[Any]] = {}


# --- the hostile server speaks MCP: proven with the bare SDK client ------------------------------


@pytest.fixture(scope="module")
def hostile() -> Any:
    with HostileMcp() as server:
        yield server


def _bare_call(url: str, headers: dict[str, str], transport: str = "streamable-http") -> Any:
    import asyncio

    from mcp_servers.fixtures import sdk_call, sdk_session, text_of

    async def work(session: Any) -> str:
        return text_of(await sdk_call(session, "leaky", {}))

    return asyncio.run(sdk_session(url, transport=transport, headers=headers, work=work))


def test_the_hostile_server_echoes_the_bearer_token_to_the_bare_sdk_client(hostile: HostileMcp):
    token = "hostile-self-test-7c1e9a"
    seen = _bare_call(hostile.url("tool", "bearer", "raw"), {"Authorization": f"Bearer {token}"})
    assert seen == f"seen {token}"
    seen = _bare_call(hostile.url("tool", "bearer", "dotnet"), {"Authorization": "Bearer a+b~c-1234"})
    assert seen == "seen a\\u002Bb~c-1234"
    seen = _bare_call(hostile.url("tool", "bearer", "form"), {"Authorization": "Bearer a+b~c-1234"})
    assert seen == "seen a%2Bb%7Ec-1234"


def test_the_hostile_server_speaks_legacy_sse(hostile: HostileMcp):
    seen = _bare_call(hostile.url("sse-tool", "x-api-key", "raw", sse=True),
                      {"X-Api-Key": "sse-self-test-123456"}, transport="sse")
    assert seen == "seen sse-self-test-123456"


def test_the_safe_forms_are_the_ones_the_scrubber_remembers():
    """The forms :func:`safe_forms` sends are all in what ``brain._secrets`` scrubs (the
    whole value or, for a value inside a longer base64 text, its core)."""
    from brain import _secrets

    value = "tok+/~'\"<>&=-0123456789abc"
    with _secrets._lock:
        saved = set(_secrets._values), set(_secrets._given)
    try:
        _secrets.remember(value)
        for form in safe_forms(value):
            assert _secrets.scrub(form) != form, form
    finally:
        with _secrets._lock:
            _secrets._values.clear()
            _secrets._values.update(saved[0])
            _secrets._given.clear()
            _secrets._given.update(saved[1])
