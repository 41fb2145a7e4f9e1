"""A hostile MCP server over HTTP that answers ``tools/call`` with as many bytes as it is
told to, for the bounded-answer tests and ``bench/hostile_mcp.py`` (SPEC §2, §17).

Written on asyncio streams, not the SDK, so that it controls every byte: it speaks just
enough MCP to pass ``initialize``, then answers the call. Run as
``python tests/mcp_servers/flood_server.py --port 0 --events FILE [--watch-stdin]``; the
first line on stdout is its port. ``GET /health`` answers 200.

A step reaches it at ``/{mode}/{size}/{fill}/{tag}/mcp`` (streamable HTTP) or
``/{mode}/{size}/{fill}/{tag}/sse`` (legacy HTTP+SSE). ``size`` is the number of
characters of the tool's text (``json``, ``sse``, ``legacy``), or of bytes of
notifications sent before the answer (``flood``); ``fill`` is what each character is:
``ascii`` (``x``) or ``escaped`` (``\\x01``, six bytes once JSON-escaped). ``mode``:

- ``json``: one ``application/json`` answer, with its ``Content-Length``;
- ``sse``: a ``text/event-stream`` answer of one ``data:`` event holding the whole result;
- ``flood``: an event stream of ``notifications/message`` events, ``size`` bytes of them
  (``0``: without end), then a short result;
- ``legacypost``: legacy transport whose message ``POST`` answers are ``size`` bytes long
  (the result itself is small, on the event stream);
- ``legacy``: legacy transport whose result arrives as one huge event on the stream;
- ``gzip``: a result of ``size`` characters, gzip-compressed (``Content-Encoding: gzip``)
  whatever the client asked for.

For every answer that carried (or tried to carry) a result, it appends one JSON line to
the events file once the answer ended: ``{"tag", "mode", "sent", "total", "complete"}``,
``sent`` being how many bytes of the body the client took before it went away (what sits
in the kernel's socket buffers counts as taken). ``total`` is ``-1`` for an endless one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

CHUNK = 64 * 1024
FILLS = {"ascii": ("x", "x"), "escaped": ("\x01", "\\u0001")}
_events: Path | None = None
#: Legacy sessions: their event stream's queue, by session id.
_outboxes: dict[str, asyncio.Queue[bytes]] = {}


def record(**fields: Any) -> None:
    if _events is not None:
        with _events.open("a") as f:
            f.write(json.dumps(fields) + "\n")


def result_parts(mid: Any, size: int, fill: str) -> tuple[bytes, bytes, bytes]:
    """A ``tools/call`` result whose text is ``size`` characters: its start, the JSON of
    one character, and its end."""
    start = json.dumps({"jsonrpc": "2.0", "id": mid}, separators=(",", ":"))[:-1]
    start += ',"result":{"content":[{"type":"text","text":"'
    return start.encode(), FILLS[fill][1].encode(), b'"}]}}'


async def result_body(mid: Any, size: int, fill: str) -> AsyncIterator[bytes]:
    """The result of :func:`result_parts`, in chunks."""
    start, unit, end = result_parts(mid, size, fill)
    yield start
    per_chunk = max(1, CHUNK // len(unit))
    block = unit * per_chunk
    left = size
    while left > 0:
        n = min(left, per_chunk)
        yield block if n == per_chunk else unit * n
        left -= n
    yield end


def result_size(mid: Any, size: int, fill: str) -> int:
    start, unit, end = result_parts(mid, size, fill)
    return len(start) + len(unit) * size + len(end)


def small(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def initialized(message: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message.get("id"), "result": {
        "protocolVersion": (message.get("params") or {}).get("protocolVersion"),
        "capabilities": {"tools": {}}, "serverInfo": {"name": "flood", "version": "1"}}}


class Answer:
    """Writes one HTTP answer and counts the body bytes the client took."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.sent = 0

    async def head(self, status: int, ctype: str, length: int | None = None,
                   encoding: str | None = None) -> None:
        lines = [f"HTTP/1.1 {status} {'OK' if status < 300 else 'Error'}",
                 f"Content-Type: {ctype}", "Connection: close", "Cache-Control: no-cache"]
        if encoding is not None:
            lines.append(f"Content-Encoding: {encoding}")
        if length is not None:
            lines.append(f"Content-Length: {length}")
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await self.writer.drain()

    async def body(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()
        self.sent += len(data)

    async def whole(self, status: int, data: bytes, ctype: str = "application/json") -> None:
        await self.head(status, ctype, len(data))
        await self.body(data)


async def huge_result(answer: Answer, tag: str, mode: str, mid: Any, size: int, fill: str,
                      sse: bool, head: bool = True) -> None:
    """Send a ``size``-character result (as one event when ``sse``; on an answer already
    begun unless ``head``), recording what the client took."""
    total = result_size(mid, size, fill) + (len(b"event: message\ndata: \n\n") if sse else 0)
    complete, before = False, answer.sent
    try:
        if sse:
            if head:
                await answer.head(200, "text/event-stream")
            await answer.body(b"event: message\ndata: ")
        else:
            await answer.head(200, "application/json", total)
        async for part in result_body(mid, size, fill):
            await answer.body(part)
        if sse:
            await answer.body(b"\n\n")
        complete = True
    except (ConnectionError, OSError):
        pass
    finally:
        record(tag=tag, mode=mode, sent=answer.sent - before, total=total, complete=complete)


async def flood(answer: Answer, tag: str, mid: Any, size: int) -> None:
    """Notifications, ``size`` bytes of them (``0``: endless), then a short result."""
    note = b"event: message\ndata: " + small({
        "jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "y" * 100}}) + b"\n\n"
    burst = note * max(1, CHUNK // len(note))
    complete = False
    try:
        await answer.head(200, "text/event-stream")
        while size == 0 or answer.sent < size:
            await answer.body(burst)
        await answer.body(b"event: message\ndata: " + small({
            "jsonrpc": "2.0", "id": mid,
            "result": {"content": [{"type": "text", "text": "done"}]}}) + b"\n\n")
        complete = True
    except (ConnectionError, OSError):
        pass
    finally:
        record(tag=tag, mode="flood", sent=answer.sent, total=-1 if size == 0 else size,
               complete=complete)


async def gzipped(answer: Answer, tag: str, mid: Any, size: int, fill: str) -> None:
    """The result, compressed (a bomb, for a large ``size``: ~1 KiB per MiB)."""
    import zlib

    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = b"".join([packer.compress(part) async for part in result_body(mid, size, fill)])
    data += packer.flush()
    await answer.head(200, "application/json", len(data), encoding="gzip")
    await answer.body(data)
    record(tag=tag, mode="gzip", sent=answer.sent, total=len(data), complete=True)


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    verb, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length") or 0))
    return verb, path, headers, body


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        verb, path, _, body = await read_request(reader)
    except (asyncio.IncompleteReadError, ValueError, ConnectionError):
        writer.close()
        return
    answer = Answer(writer)
    parts = path.split("?")[0].strip("/").split("/")
    try:
        if path == "/health":
            await answer.whole(200, b"ok", "text/plain")
        elif len(parts) < 5:
            await answer.whole(404, b"no such place", "text/plain")
        elif verb == "GET" and parts[4] == "sse":
            await legacy_stream(answer, path.rsplit("/", 1)[0])
        elif verb == "POST":
            mode, size, fill, tag = parts[0], int(parts[1]), parts[2], parts[3]
            query = path.partition("?")[2]
            await post(answer, mode, size, fill, tag, json.loads(body or b"null"), query)
        elif verb == "DELETE":
            await answer.whole(200, b"")
        else:
            await answer.whole(405, b"", "text/plain")
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def post(answer: Answer, mode: str, size: int, fill: str, tag: str, message: Any,
               query: str) -> None:
    if not isinstance(message, dict):
        await answer.whole(400, b"not JSON", "text/plain")
        return
    method, mid = message.get("method"), message.get("id")
    if mode.startswith("legacy"):
        outbox = _outboxes.get(query.partition("session_id=")[2])
        if outbox is None:
            await answer.whole(404, b"no session", "text/plain")
            return
        if mode == "legacypost" and method == "tools/call":
            await huge_result(answer, tag, mode, "post", size, fill, sse=False)
        else:
            await answer.whole(202, b"Accepted", "text/plain")
        if mid is None:
            return
        if method == "initialize":
            await outbox.put(b"event: message\ndata: " + small(initialized(message)) + b"\n\n")
        elif method == "tools/call" and mode == "legacy":
            await outbox.put(b"huge " + small([tag, mid, size, fill]))
        else:
            await outbox.put(b"event: message\ndata: " + small({
                "jsonrpc": "2.0", "id": mid,
                "result": {"content": [{"type": "text", "text": "small"}]}}) + b"\n\n")
        return
    if mid is None:
        await answer.whole(202, b"")
    elif method == "initialize":
        await answer.whole(200, small(initialized(message)))
    elif method != "tools/call":
        await answer.whole(200, small({"jsonrpc": "2.0", "id": mid, "result": {}}))
    elif mode == "flood":
        await flood(answer, tag, mid, size)
    elif mode == "gzip":
        await gzipped(answer, tag, mid, size, fill)
    else:
        await huge_result(answer, tag, mode, mid, size, fill, sse=mode == "sse")


async def legacy_stream(answer: Answer, base: str) -> None:
    """A legacy session's event stream: the message endpoint, then what POSTs queue (a
    ``huge`` item: one result event of that many characters)."""
    sid = os.urandom(8).hex()
    outbox: asyncio.Queue[bytes] = asyncio.Queue()
    _outboxes[sid] = outbox
    try:
        await answer.head(200, "text/event-stream")
        await answer.body(f"event: endpoint\ndata: {base}/messages?session_id={sid}\n\n".encode())
        while True:
            item = await outbox.get()
            if item.startswith(b"huge "):
                tag, mid, size, fill = json.loads(item[5:])
                await huge_result(answer, tag, "legacy", mid, size, fill, sse=True, head=False)
                return
            await answer.body(item)
    finally:
        del _outboxes[sid]


def _watch_stdin() -> None:
    """Exit at once when stdin ends: the process that started this server is gone."""
    def watch() -> None:
        while sys.stdin.buffer.read(4096):
            pass
        os._exit(0)

    threading.Thread(target=watch, name="watch-stdin", daemon=True).start()


async def serve(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print(server.sockets[0].getsockname()[1], flush=True)
    os.dup2(2, 1)
    async with server:
        await server.serve_forever()


def main() -> None:
    global _events
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--events")
    parser.add_argument("--watch-stdin", action="store_true")
    args = parser.parse_args()
    _events = Path(args.events) if args.events else None
    if args.watch_stdin:
        _watch_stdin()
    asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()
