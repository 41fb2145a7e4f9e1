"""Attack (SPEC §2, §17): what a remote MCP server does on the wire — refusals, errors,
silence, trickles, a foreign SSE endpoint.

Promised: "401/403 fail at once saying authentication failed; connection errors, 5xx
and timeouts are retryable; the timeout covers connect, handshake and call"; a JSON-RPC
error fails the step and "every step's error text is stored".

Holds: 401/403 on the call after a good handshake, and on the legacy SSE stream, fail
at once; 5xx on the call is retried; the step's timeout ends a server that reads the
request and never answers, one that answers the handshake or the call with an endless
SSE stream of keep-alives, one that sends its JSON answer a byte a second, an SSE server
that never names its endpoint, and one that names an endpoint on another origin.

Found (``xfail(strict=True)`` below):

1. Legacy SSE: a server that accepts the event stream but answers the message POSTs
   401/403 is not "authentication failed at once": the handshake waits for an answer
   that never comes, the step times out and is retried. The response hook records the
   refusal (``brain/executors/mcp_remote.py::RemoteServer._watch``), but only a
   ``tools/call`` races it (``LiveSession.call``); ``initialize`` in
   ``brain/executors/mcp_session.py::LiveSession._keep`` does not.
2. A refused handshake loses the server's answer: a JSON-RPC error to ``initialize``,
   or an HTTP 404 (the usual wrong-URL-path mistake, on the SDK's own server), is told as
   ``the MCP server exited before answering (its connection closed)`` — and retried
   (``LiveSession._failure`` drops an ``MCPError``; ``RemoteServer._watch`` keeps only
   401/403/5xx).
3. A JSON-RPC error with code -32000 (the start of JSON-RPC's "server error" range,
   used by many servers) to ``tools/call`` is told as ``the MCP server exited before
   answering (its connection closed)``, its message lost: ``LiveSession.call`` takes
   any error with the SDK's ``CONNECTION_CLOSED`` code (-32000) for a closed
   connection.

Run: ``.venv/bin/pytest tests/attack/test_attack_remote_mcp_wire.py``
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_servers.fixtures import HttpMcpServer, http_server

sys.path.append(str(Path(__file__).resolve().parent))
from test_attack_remote_mcp_hostile import HostileMcp

from brain import mcp_tool, workflow

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileMcp]:
    with HostileMcp() as server:
        yield server


def call(url: str, *, transport: str = "streamable-http", retries: int = 0,
         timeout: float = 10, name: str = "atk_mcp_wire") -> tuple[object, float]:
    @workflow(name=name)
    def flow() -> None:
        mcp_tool("m", url=url, transport=transport, tool="t", retries=retries,
                 retry_delay_seconds=0, timeout_seconds=timeout)

    t0 = time.monotonic()
    r = flow()
    return r, time.monotonic() - t0


# --- holds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [401, 403])
def test_a_refused_call_after_a_good_handshake_fails_at_once(hostile: HostileMcp, code: int):
    r, _ = call(hostile.url(f"callhttp{code}"), retries=2)
    step = r.steps["m"]  # type: ignore[attr-defined]
    # At once: one try of three, failed on the refusal itself (not on the 10 s timeout).
    assert step.status == "failed" and step.tries == 1, step.error
    assert step.error.startswith("authentication failed") and f"HTTP {code}" in step.error


@pytest.mark.parametrize("code", [500, 502, 503])
def test_a_server_error_on_the_call_is_retried(hostile: HostileMcp, code: int):
    r, _ = call(hostile.url(f"callhttp{code}"), retries=2)
    step = r.steps["m"]  # type: ignore[attr-defined]
    assert step.status == "failed" and step.tries == 3, step.error
    assert f"HTTP {code}" in step.error and "authentication" not in step.error


@pytest.fixture(scope="module")
def sse_with_token(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpMcpServer]:
    with http_server(tmp_path_factory.mktemp("atk_sse"), transport="sse",
                     token="right-token-0123456789") as server:
        yield server


def test_a_refused_sse_stream_fails_at_once(sse_with_token: HttpMcpServer):
    @workflow
    def atk_mcp_sse_refused() -> None:
        mcp_tool("m", url=sse_with_token.url, transport="sse", tool="echo",
                 args={"text": "x"}, bearer="wrong-token-0123456789", retries=2,
                 retry_delay_seconds=0)

    r = atk_mcp_sse_refused()
    step = r.steps["m"]
    assert step.status == "failed" and step.tries == 1, step.error
    assert step.error.startswith("authentication failed"), step.error


@pytest.mark.parametrize("mode, transport", [
    ("silent", "streamable-http"), ("trickle", "streamable-http"),
    ("trickleinit", "streamable-http"), ("slowbody", "streamable-http"),
    ("sse-silent", "sse"), ("sse-trickle", "sse"), ("sse-foreign", "sse")])
def test_the_timeout_ends_a_server_that_stalls(hostile: HostileMcp, mode: str, transport: str):
    """Each try ends at its timeout (1 s) with ``timed out after 1 s``, and is retried (how
    long closing each session adds is ``bench/mcp_stall.py``'s figure)."""
    r, _ = call(hostile.url(mode, sse=transport == "sse"), transport=transport, retries=1,
                   timeout=1, name=f"atk_mcp_stall_{mode.replace('-', '_')}")
    step = r.steps["m"]  # type: ignore[attr-defined]
    assert step.status == "failed", step.error
    assert step.error == "timed out after 1 s", step.error
    assert step.tries == 2


# --- found ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [401, 403])
def test_a_refused_sse_message_post_fails_at_once(hostile: HostileMcp, code: int):
    r, took = call(hostile.url(f"sseok{code}", sse=True), transport="sse", retries=1, timeout=1.5,
                   name=f"atk_mcp_sse_post_{code}")
    step = r.steps["m"]  # type: ignore[attr-defined]
    assert step.status == "failed"
    assert (step.error or "").startswith("authentication failed"), (
        f"{step.error!r} after {step.tries} tries, {took:.1f} s")
    assert step.tries == 1


@pytest.fixture(scope="module")
def sdk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpMcpServer]:
    with http_server(tmp_path_factory.mktemp("atk_http")) as server:
        yield server


@pytest.mark.parametrize("case", ["initialize error", "wrong path"])
def test_a_refused_handshake_says_what_the_server_answered(hostile: HostileMcp,
                                                           sdk_server: HttpMcpServer, case: str):
    if case == "wrong path":
        url, said = sdk_server.base + "/not-the-mcp-path", "404"
    else:
        url, said = hostile.url("initerror"), "client refused"
    r, _ = call(url, retries=1, name=f"atk_mcp_refused_{case.replace(' ', '_')}")
    step = r.steps["m"]  # type: ignore[attr-defined]
    assert step.status == "failed"
    assert said in (step.error or ""), f"{step.error!r} ({step.tries} tries)"
    assert "exited" not in (step.error or "")


def test_a_server_error_coded_minus_32000_keeps_its_message(hostile: HostileMcp):
    r, _ = call(hostile.url("error32000"), name="atk_mcp_minus_32000")
    step = r.steps["m"]  # type: ignore[attr-defined]
    assert step.status == "failed"
    assert "quota exceeded" in (step.error or ""), step.error
