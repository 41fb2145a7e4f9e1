"""MCP tool steps on remote servers (SPEC §17): ``mcp_tool(url=...)`` over streamable HTTP
and legacy HTTP+SSE, with a bearer token and headers.

The servers are real processes on loopback (``tests/mcp_servers/http_server.py`` and
``sse_server.py``, started by :mod:`mcp_servers.fixtures`), behind a bearer check that
answers 401, or a fixed status (500, 403) when told to. The first tests prove the servers
themselves with the bare SDK client; the rest run workflows against them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import string
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_servers.fixtures import HttpMcpServer, http_server, sdk_call, sdk_session, text_of
from support import free_port

from brain import WorkflowDefinitionError, mcp_tool, parallel, secret, workflow

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

TOKEN = "test-bearer-6f1d2c9a8b7e"
HEADER_SECRET = "header-secret-0a9b8c7d6e"


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpMcpServer]:
    """A streamable-HTTP server wanting ``TOKEN``."""
    with http_server(tmp_path_factory.mktemp("mcp_http"), token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def sse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpMcpServer]:
    """A legacy HTTP+SSE server wanting ``TOKEN``."""
    with http_server(tmp_path_factory.mktemp("mcp_sse"), transport="sse", token=TOKEN) as server:
        yield server


@pytest.fixture
def bearer_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TEST_BEARER", TOKEN)
    monkeypatch.setenv("MCP_TEST_HEADER", HEADER_SECRET)


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def step_log(db_url: str, run_id: str, step: str) -> list[tuple[str, str]]:
    """``(stream, text)`` of a step's stored log."""
    from brain.store import Store

    async def read() -> list[tuple[str, str]]:
        async with Store(db_url) as store:
            return [(line.stream, line.text) for line in await store.read_log(run_id, step)]

    return asyncio.run(read())


def db_bytes(tmp_path: Path) -> bytes:
    """Every byte SQLite wrote for this test's database (main file, WAL, shared memory)."""
    return b"".join(p.read_bytes() for p in sorted(tmp_path.glob("brain.db*")))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# --- the servers, with the bare SDK client -------------------------------------------------------


@pytest.mark.parametrize("kind", ["http", "sse"])
def test_the_test_servers_answer_the_bare_sdk_client(kind: str, request: pytest.FixtureRequest):
    server: HttpMcpServer = request.getfixturevalue(kind)
    tag = unique("bare")
    progress: list[tuple[float, float | None, str | None]] = []

    async def work(session: Any) -> dict[str, Any]:
        return {
            "echo": text_of(await sdk_call(session, "echo", {"text": tag})),
            "pids": [json.loads(text_of(await sdk_call(session, "pid"))) for _ in range(3)],
            "count": text_of(await sdk_call(session, "count", {"n": 4, "delay": 0.01},
                                            progress=progress)),
            "headers": json.loads(text_of(await sdk_call(session, "headers"))),
            "digests": json.loads(text_of(await sdk_call(session, "header_digests"))),
        }

    seen = asyncio.run(sdk_session(server.url, transport=server.transport,
                                   headers={**auth(), "X-Team": "core"}, work=work))
    assert seen["echo"] == tag
    # One session: one process, and its pid calls counted 1, 2, 3.
    assert {p["pid"] for p in seen["pids"]} == {server.proc.pid}
    assert [p["calls"] for p in seen["pids"]] == [1, 2, 3]
    assert len({p["session"] for p in seen["pids"]}) == 1
    assert seen["count"] == "counted 4"
    assert progress == [(float(i), 4.0, f"step {i}") for i in range(1, 5)]
    assert seen["headers"]["x-team"] == "core"
    assert seen["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert seen["digests"]["x-team"] == hashlib.sha256(b"core").hexdigest()
    # The server recorded the session's methods, the tools/call with its arguments.
    (call,) = server.calls_tagged(tag)
    assert call["params"]["name"] == "echo"
    methods = server.methods_of_session(call["session"])
    assert methods[:2] == ["initialize", "notifications/initialized"]
    assert methods.count("tools/call") == 7


@pytest.mark.parametrize("kind", ["http", "sse"])
def test_the_test_servers_refuse_a_missing_or_wrong_token_with_401(
        kind: str, request: pytest.FixtureRequest):
    server: HttpMcpServer = request.getfixturevalue(kind)
    assert httpx.get(f"{server.base}/health", timeout=5).status_code == 200
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for headers in ({}, auth("wrong-token-123456"), {"Authorization": TOKEN}):
        answer = httpx.post(server.url, json=body, headers=headers, timeout=5)
        assert answer.status_code == 401, headers
        assert answer.headers["www-authenticate"].startswith("Bearer")
    # The SDK client fails too (how it says so differs between the transports).
    with pytest.raises(BaseException):  # noqa: B017 - an ExceptionGroup or httpx2's error
        asyncio.run(sdk_session(server.url, transport=server.transport,
                                headers=auth("wrong-token-123456"),
                                work=lambda s: sdk_call(s, "echo", {"text": "x"})))


def test_a_failing_test_server_answers_its_status_to_everything_but_health(tmp_path: Path):
    with http_server(tmp_path / "failing", token=TOKEN, fail_status=500) as server:
        assert httpx.get(f"{server.base}/health", timeout=5).status_code == 200
        answer = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                            headers=auth(), timeout=5)
        assert answer.status_code == 500
    assert server.proc.poll() is not None  # stopped on the way out


# --- definitions (SPEC §17: exactly one of server_command and url; never substituted) ------------


def _both() -> None:
    mcp_tool("m", server_command="python server.py", url="http://127.0.0.1:1/mcp", tool="t")


def _neither() -> None:
    mcp_tool("m", tool="t")


def _url_placeholder() -> None:
    mcp_tool("m", url="http://{trigger.body}/mcp", tool="t")


def _header_placeholder() -> None:
    mcp_tool("m", url="http://127.0.0.1:1/mcp", tool="t", headers={"X-Team": "{trigger.body}"})


def _bearer_placeholder() -> None:
    mcp_tool("m", url="http://127.0.0.1:1/mcp", tool="t", bearer="{trigger.body}")


def _env_with_url() -> None:
    mcp_tool("m", url="http://127.0.0.1:1/mcp", tool="t", env={"A": "b"})


def _sse_with_command() -> None:
    mcp_tool("m", server_command="python server.py", tool="t", transport="sse")


def _not_http() -> None:
    mcp_tool("m", url="ftp://127.0.0.1/mcp", tool="t")


def _bad_reuse() -> None:
    mcp_tool("m", url="http://127.0.0.1:1/mcp", tool="t", reuse="forever")


@pytest.mark.parametrize("define", [_both, _neither, _url_placeholder, _header_placeholder,
                                    _bearer_placeholder, _env_with_url, _sse_with_command,
                                    _not_http, _bad_reuse],
                         ids=lambda f: f.__name__.strip("_"))
def test_definition_errors(define: Callable[[], None]):
    name = f"mcp_remote_bad_{define.__name__.strip('_')}"
    with pytest.raises(WorkflowDefinitionError) as info:
        workflow(name=name)(define)
    assert name in str(info.value) and "'m'" in str(info.value), str(info.value)


# --- calls ---------------------------------------------------------------------------------------


def test_call_over_streamable_http_with_a_bearer_secret(http: HttpMcpServer, bearer_env: None,
                                                        db_url: str):
    tag = unique("hello")

    @workflow
    def mcp_remote_echo():
        mcp_tool("echo", url=http.url, tool="echo", args={"text": tag},
                 bearer=secret("MCP_TEST_BEARER"))

    r = mcp_remote_echo()
    step = r.steps["echo"]
    assert r.status == "succeeded", r.error
    assert step.status == "succeeded", step.error
    assert step.output == tag
    assert step.tries == 1
    # One session: negotiated, exactly one tools/call, no tools/list.
    (call,) = http.calls_tagged(tag)
    methods = http.methods_of_session(call["session"])
    assert methods.count("tools/call") == 1, methods
    assert "tools/list" not in methods, methods
    assert TOKEN not in json.dumps(r.to_json_dict())
    assert all(TOKEN not in text for _, text in step_log(db_url, r.run_id, "echo"))


def test_a_literal_bearer_works_and_is_not_shown(http: HttpMcpServer, db_url: str):
    tag = unique("literal")

    @workflow
    def mcp_remote_literal_bearer():
        mcp_tool("echo", url=http.url, tool="echo", args={"text": tag}, bearer=TOKEN)

    r = mcp_remote_literal_bearer()
    assert r.steps["echo"].status == "succeeded", r.steps["echo"].error
    assert r.steps["echo"].output == tag
    assert TOKEN not in json.dumps(r.to_json_dict())
    assert all(TOKEN not in text for _, text in step_log(db_url, r.run_id, "echo"))


def test_sse_transport(sse: HttpMcpServer, bearer_env: None):
    tag = unique("sse")

    @workflow
    def mcp_remote_sse():
        with parallel():
            mcp_tool("echo", url=sse.url, transport="sse", tool="echo", args={"text": tag},
                     bearer=secret("MCP_TEST_BEARER"))
            mcp_tool("pid", url=sse.url, transport="sse", tool="pid",
                     bearer=secret("MCP_TEST_BEARER"))

    r = mcp_remote_sse()
    assert r.status == "succeeded", r.error
    assert r.steps["echo"].output == tag
    assert json.loads(r.steps["pid"].output or "")["pid"] == sse.proc.pid
    (call,) = sse.calls_tagged(tag)
    assert sse.methods_of_session(call["session"]).count("tools/call") == 1


def test_headers_arrive_and_secret_values_are_not_shown(http: HttpMcpServer, bearer_env: None,
                                                        tmp_path: Path, db_url: str):
    @workflow
    def mcp_remote_headers():
        with parallel():
            mcp_tool("headers", url=http.url, tool="headers", bearer=secret("MCP_TEST_BEARER"),
                     headers={"X-Team": "core", "X-Api-Key": secret("MCP_TEST_HEADER")})
            mcp_tool("digests", url=http.url, tool="header_digests",
                     bearer=secret("MCP_TEST_BEARER"),
                     headers={"X-Team": "core", "X-Api-Key": secret("MCP_TEST_HEADER")})

    r = mcp_remote_headers()
    assert r.status == "succeeded", r.error
    seen = json.loads(r.steps["headers"].output or "")
    assert seen["x-team"] == "core"
    # The server got the values; what is stored has them scrubbed.
    assert seen["x-api-key"] == "***"
    assert seen["authorization"] == "Bearer ***"
    digests = json.loads(r.steps["digests"].output or "")
    assert digests["x-api-key"] == hashlib.sha256(HEADER_SECRET.encode()).hexdigest()
    assert digests["authorization"] == hashlib.sha256(f"Bearer {TOKEN}".encode()).hexdigest()
    stored = db_bytes(tmp_path)
    for value in (TOKEN, HEADER_SECRET):
        assert value.encode() not in stored, value
        assert value not in json.dumps(r.to_json_dict())


# --- failures ------------------------------------------------------------------------------------


def test_wrong_or_missing_token_fails_at_once_saying_authentication_failed(
        http: HttpMcpServer, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MCP_TEST_BEARER", "wrong-token-0123456789")

    @workflow
    def mcp_remote_wrong_token():
        mcp_tool("call", url=http.url, tool="echo", args={"text": "x"},
                 bearer=secret("MCP_TEST_BEARER"), retries=2, retry_delay_seconds=0)

    @workflow
    def mcp_remote_no_token():
        mcp_tool("call", url=http.url, tool="echo", args={"text": "x"}, retries=2,
                 retry_delay_seconds=0)

    for wf in (mcp_remote_wrong_token, mcp_remote_no_token):
        r = wf()
        step = r.steps["call"]
        assert step.status == "failed", wf.name
        assert "authentication failed" in (step.error or "").lower(), step.error
        assert step.tries == 1, f"{wf.name}: an authentication failure was retried"
        assert r.error == f"step 'call' failed: {step.error}"
        assert "wrong-token-0123456789" not in json.dumps(r.to_json_dict())


def test_403_fails_at_once_saying_authentication_failed(tmp_path: Path):
    with http_server(tmp_path / "forbidden", fail_status=403) as server:
        @workflow
        def mcp_remote_forbidden():
            mcp_tool("call", url=server.url, tool="echo", args={"text": "x"}, retries=2,
                     retry_delay_seconds=0)

        r = mcp_remote_forbidden()
    step = r.steps["call"]
    assert step.status == "failed"
    assert "authentication failed" in (step.error or "").lower(), step.error
    assert step.tries == 1


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
def test_a_5xx_is_retried(transport: str, tmp_path: Path):
    with http_server(tmp_path / "failing", transport=transport, fail_status=500) as server:
        @workflow
        def mcp_remote_500():
            mcp_tool("call", url=server.url, transport=transport, tool="echo",
                     args={"text": "x"}, retries=2, retry_delay_seconds=0)

        r = mcp_remote_500()
    step = r.steps["call"]
    assert step.status == "failed"
    assert step.tries == 3, f"a 500 was not retried: {step.tries} tries, {step.error!r}"
    assert "authentication" not in (step.error or "").lower()
    assert r.error == f"step 'call' failed: {step.error}"


def test_connection_refused_is_retryable():
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nobody listens there

    @workflow
    def mcp_remote_refused():
        mcp_tool("call", url=url, tool="echo", args={"text": "x"}, retries=1,
                 retry_delay_seconds=0, timeout_seconds=10)

    r = mcp_remote_refused()
    step = r.steps["call"]
    assert step.status == "failed"
    assert step.tries == 2, f"a refused connection was not retried: {step.error!r}"
    assert step.error and "timed out" not in step.error  # refused at once, not waited for


def test_the_timeout_covers_a_slow_call_and_is_retryable(http: HttpMcpServer, bearer_env: None):
    tag = unique("slow")

    @workflow
    def mcp_remote_slow():
        mcp_tool("slow", url=http.url, tool="slow", args={"seconds": 60, "tag": tag},
                 bearer=secret("MCP_TEST_BEARER"), timeout_seconds=3, retries=1,
                 retry_delay_seconds=0)

    r = mcp_remote_slow()
    step = r.steps["slow"]
    assert step.status == "failed"
    assert step.error == "timed out after 3 s"
    assert step.tries == 2
    assert r.error == "step 'slow' failed: timed out after 3 s"
    # The call itself was under way when the time ran out (not only connecting).
    assert http.events("slow-started") and any(
        e["tag"] == tag for e in http.events("slow-started"))


def test_the_timeout_covers_connect_and_handshake():
    """A server that accepts the connection and never answers: the handshake times out."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # connections wait in the backlog, never accepted, never answered
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"

        @workflow
        def mcp_remote_silent():
            mcp_tool("call", url=url, tool="echo", args={"text": "x"}, timeout_seconds=1)

        r = mcp_remote_silent()
    step = r.steps["call"]
    assert step.status == "failed"
    assert step.error == "timed out after 1 s"


# --- secrets never shown -------------------------------------------------------------------------

# RFC 6750's b64token: what a bearer token is made of. Every value ends in a salt of hex
# digits: hypothesis also tries strings it finds in the source (index names, workflow
# names), which a run stores for reasons of their own.
B64TOKEN = string.ascii_letters + string.digits + "-._~+/"
salts = st.uuids().map(lambda u: u.hex[:10])
tokens = st.builds(lambda body, salt, pad: body + salt + "=" * pad,
                   st.text(alphabet=B64TOKEN, min_size=8, max_size=48), salts, st.integers(0, 2))
# A header value: any visible ASCII (no spaces: HTTP trims them at the ends).
header_values = st.builds(
    lambda body, salt: body + salt,
    st.text(alphabet=string.ascii_letters + string.digits + string.punctuation, min_size=8,
            max_size=48), salts)


def test_bearer_tokens_and_secret_header_values_never_appear_in_what_is_stored(
        http: HttpMcpServer, tmp_path: Path, db_url: str):
    """For generated tokens and header values: the successful call, the refused one (a
    wrong token) and the server's echo of the headers leave no trace of any of them in the
    run JSON, the errors, the stored logs, or any byte of the database."""

    @workflow
    def mcp_remote_secret_ok():
        mcp_tool("headers", url=http.url, tool="headers", bearer=secret("MCP_GEN_BEARER"),
                 headers={"X-Api-Key": secret("MCP_GEN_HEADER")})

    @workflow
    def mcp_remote_secret_refused():
        mcp_tool("refused", url=http.url, tool="headers", bearer=secret("MCP_GEN_WRONG"),
                 headers={"X-Api-Key": secret("MCP_GEN_HEADER")}, retries=1,
                 retry_delay_seconds=0)

    @settings(max_examples=8, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(token=tokens, header=header_values, wrong=tokens)
    def check(token: str, header: str, wrong: str) -> None:
        if wrong == token:
            wrong = token[::-1] + "x"
        http.set_token(token)
        values = {"MCP_GEN_BEARER": token, "MCP_GEN_HEADER": header, "MCP_GEN_WRONG": wrong}
        saved = {k: os.environ.get(k) for k in values}
        os.environ.update(values)
        try:
            ok = mcp_remote_secret_ok()
            refused = mcp_remote_secret_refused()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        assert ok.status == "succeeded", ok.error
        seen = json.loads(ok.steps["headers"].output or "")
        assert seen["authorization"] == "Bearer ***"
        assert seen["x-api-key"] == "***"
        assert refused.status == "failed"
        assert "authentication failed" in (refused.steps["refused"].error or "").lower()
        shown = [json.dumps(r.to_json_dict()) for r in (ok, refused)]
        shown += [r.error or "" for r in (ok, refused)]
        shown += [text for r, step in ((ok, "headers"), (refused, "refused"))
                  for _, text in step_log(db_url, r.run_id, step)]
        stored = db_bytes(tmp_path)
        for value in (token, header, wrong):
            assert all(value not in text for text in shown), value
            assert value.encode() not in stored, value

    try:
        check()
    finally:
        http.set_token(TOKEN)
