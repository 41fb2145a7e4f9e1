"""Helpers of the attack34 tests (The Brain as an MCP server, SPEC §23; traces, §25): an app
served by uvicorn in a thread of this process (``create_app`` options passed through), and
raw JSON-RPC over ``/mcp`` (no SDK client: what an attacker sends)."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx

#: The headers the streamable HTTP transport wants; the handshake era needs no initialize
#: on the stateless server.
LEGACY = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
          "MCP-Protocol-Version": "2025-11-25"}


class Served:
    """``brain.server.create_app(paths, **options)`` on 127.0.0.1 (a port of the system's
    choosing), in a thread; settings from this process's environment, set before."""

    def __init__(self, *paths: Path, **options: Any) -> None:
        import uvicorn

        from brain.server import create_app

        config = uvicorn.Config(create_app([str(p) for p in paths], **options),
                                host="127.0.0.1", port=0, log_config=None, lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self.client: httpx.Client | None = None

    def __enter__(self) -> Served:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise AssertionError("the app never started serving")
            time.sleep(0.02)
        self.client = httpx.Client(base_url=self.url, timeout=60)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        self._server.should_exit = True
        self._thread.join(60)

    @property
    def url(self) -> str:
        sockets = self._server.servers[0].sockets
        return f"http://127.0.0.1:{sockets[0].getsockname()[1]}"


def rpc_body(method: str, params: dict[str, Any] | None = None, rid: int | str = 1) -> str:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body)


def sse_messages(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a streamable HTTP answer (SSE events or one JSON body)."""
    text = text.strip()
    if text.startswith("{"):
        return [json.loads(text)]
    # SSE ends lines at CR, LF or CRLF only (str.splitlines would also cut at U+0085,
    # U+2028..., which JSON text may hold as is).
    return [json.loads(line[5:].strip()) for line in re.split(r"\r\n|\r|\n", text)
            if line.startswith("data:") and line[5:].strip()]


def answer_of(text: str) -> dict[str, Any]:
    """The JSON-RPC response (``result`` or ``error``) among an answer's messages."""
    for message in sse_messages(text):
        if "result" in message or "error" in message:
            return message
    raise AssertionError(f"no response in {text[:500]!r}")


def call(client: httpx.Client, tool: str, arguments: Any, *, rid: int | str = 1,
         headers: dict[str, str] | None = None, raw: str | None = None,
         meta: dict[str, Any] | None = None) -> httpx.Response:
    """A handshake-era ``tools/call`` as raw JSON-RPC (``raw``: the body as given)."""
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    body = raw if raw is not None else rpc_body("tools/call", params, rid)
    return client.post("/mcp", content=body, headers={**LEGACY, **(headers or {})})


def run_count(client: httpx.Client, headers: dict[str, str] | None = None) -> int:
    """How many runs the database holds (through the API)."""
    answer = client.get("/api/runs", params={"limit": 1000}, headers=headers or {})
    assert answer.status_code == 200, answer.text
    return len(answer.json())
