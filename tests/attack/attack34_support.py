"""Helpers of the attack34 tests (The Brain as an MCP server, SPEC §23; traces, §25): raw
JSON-RPC over ``/mcp`` (no SDK client: what an attacker sends). The app is served by
``serve_support.AppServer``."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

#: The headers the streamable HTTP transport wants; the handshake era needs no initialize
#: on the stateless server.
LEGACY = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
          "MCP-Protocol-Version": "2025-11-25"}


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
