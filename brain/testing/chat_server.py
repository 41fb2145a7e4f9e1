"""``FakeChatServer``: a real OpenAI-compatible HTTP endpoint on loopback, for tests.

It records every request and answers with scripted replies, so a workflow's
``llm()`` steps can be tested end to end (real HTTP, real retries) without a
model. Point a step at it with ``provider_url=server.url`` or
``LLM_BASE_URL=server.url``.

>>> with FakeChatServer(reply="hello") as server:       # doctest: +SKIP
...     server.respond(status=503, headers={"Retry-After": "0"})
...     result = wf(trigger="...")                        # first try 503, then "hello"
...     assert server.requests[-1].json["model"] == "m"

Run on its own, it serves until stopped, answering every request with one reply::

    python -m brain.testing.chat_server --port 8088 --reply "hello"
    LLM_BASE_URL=http://127.0.0.1:8088/v1 LLM_MODEL=fake brain run flow.py
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received: path, headers (lower-case names), raw body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


@dataclass
class ScriptedResponse:
    """One answer to give: status, body (bytes, or JSON when ``json`` is set), headers, delay."""

    status: int = 200
    json: Any = None
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


def completion(content: str | None, model: str = "fake") -> dict[str, Any]:
    """A minimal chat-completions answer carrying ``content``."""
    return {"id": "chatcmpl-fake", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}]}


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a cancelled step) is normal here: say nothing."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeChatServer:
    """An OpenAI-compatible ``/v1/chat/completions`` server in a background thread."""

    def __init__(self, reply: str = "ok", *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.reply = reply
        self.requests: list[RecordedRequest] = []
        self._script: deque[ScriptedResponse] = deque()
        self._lock = threading.Lock()
        self._server = _QuietServer((host, port), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL to use as ``provider_url``, ending in ``/v1``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def respond(self, status: int = 200, *, json: Any = None, body: bytes | str | None = None,
                content: str | None = None, headers: dict[str, str] | None = None,
                delay: float = 0.0) -> None:
        """Queue the answer to the next request (after those queued before).

        ``content`` builds a normal completion; ``json`` any JSON body; ``body``
        raw bytes. With none of them, a 200 gets the default ``reply``.
        """
        if content is not None:
            json = completion(content)
        raw = body.encode() if isinstance(body, str) else body
        with self._lock:
            self._script.append(ScriptedResponse(status=status, json=json, body=raw,
                                                 headers=dict(headers or {}), delay=delay))

    def _next(self) -> ScriptedResponse:
        with self._lock:
            if self._script:
                return self._script.popleft()
        return ScriptedResponse(json=completion(self.reply))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # answer at once, not after a delayed ACK

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with server._lock:
                    server.requests.append(RecordedRequest(
                        "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                answer = server._next()
                if answer.delay:
                    time.sleep(answer.delay)
                if answer.body is not None:
                    data = answer.body
                elif answer.json is not None:
                    data = json.dumps(answer.json).encode()
                else:
                    data = json.dumps(completion(server.reply)).encode() \
                        if answer.status < 400 else b'{"error": {"message": "scripted error"}}'
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in answer.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

        return Handler

    def start(self) -> FakeChatServer:
        """Start serving in a daemon thread."""
        if self._thread is None:
            # A short poll interval so stop() returns at once.
            self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                            name="fake-chat-server", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FakeChatServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m brain.testing.chat_server``: serve on loopback until Ctrl-C or SIGTERM,
    saying the base URL to use as ``LLM_BASE_URL``."""
    parser = argparse.ArgumentParser(
        prog="python -m brain.testing.chat_server",
        description="A fake OpenAI-compatible chat endpoint that answers every request "
                    "with one reply (for trying llm() steps without a model).")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on "
                        "(default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8088, help="port (default 8088; 0: any free)")
    parser.add_argument("--reply", default="ok", help="the answer's content (default: ok)")
    args = parser.parse_args(argv)
    try:
        server = FakeChatServer(args.reply, host=args.host, port=args.port)
    except OSError as exc:
        print(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with server:
        print(f"fake chat server at {server.url} (LLM_BASE_URL={server.url}); Ctrl-C stops it",
              flush=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
