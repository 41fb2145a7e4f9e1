"""``/mcp`` on the app ``brain serve`` runs (SPEC §23), called by the official SDK's client
in both protocol eras it offers: the handshake era (``mode="legacy"``, 2025-11-25) and the
2026-07-28 era (``mode="auto"``). Real HTTP on loopback, an in-process uvicorn."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp_support import FLOWS, mcp_client
from serve_support import AppServer
from support import serving

from brain.store import Store

TOKEN = "mcp-test-token-7f3a9c"
ERAS = {"legacy": "2025-11-25", "auto": "2026-07-28"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    """One app for the module: its own database, calls wait 2 s for their run."""
    db = tmp_path_factory.mktemp("mcp") / "brain.db"
    with serving(lambda: AppServer(FLOWS),
                 db, BRAIN_MCP_WAIT_SECONDS="2") as app:
        yield app


@pytest.fixture(autouse=True)
def _token(server: AppServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """``BRAIN_API_TOKEN`` is read at each request: set for every test here."""
    monkeypatch.setenv("BRAIN_API_TOKEN", TOKEN)
    monkeypatch.setenv("BRAIN_DATABASE_URL", server.db_url)  # type: ignore[attr-defined]


async def _run(run_id: str) -> Any:
    async with Store(os.environ["BRAIN_DATABASE_URL"]) as store:
        return await store.get_run(run_id)


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_are_the_mcp_workflows_with_their_schemas(server: AppServer, mode: str) -> None:
    async with mcp_client(server.url + "/mcp", mode=mode, token=TOKEN) as client:
        assert client.protocol_version == ERAS[mode]
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(tools) == ["brain_run", "broken", "deploy", "hello", "slow"]  # not hidden
    hello = tools["hello"]
    assert hello.description == "Greet NAME, loudly when asked."
    assert hello.input_schema["required"] == ["name"]
    assert hello.input_schema["properties"]["loud"]["type"] == "boolean"
    out = hello.output_schema
    assert out is not None and out["required"] == ["run_id", "status"]
    assert out["properties"]["result"]["required"] == ["text", "loud"]
    assert "outputSchema" not in str(tools["deploy"].input_schema)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_typed_call_answers_with_the_output_and_a_failure_is_an_error(
        server: AppServer, mode: str) -> None:
    async with mcp_client(server.url + "/mcp", mode=mode, token=TOKEN) as client:
        good = await client.call_tool("hello", {"name": "ann", "loud": True})
        bad = await client.call_tool("broken", {})
    assert not good.is_error
    assert good.content[0].text == '{"text":"HELLO ANN","loud":true}'
    run_id = good.structured_content["run_id"]
    assert good.structured_content == {"run_id": run_id, "status": "succeeded",
                                       "result": {"text": "HELLO ANN", "loud": True}}
    run = await _run(run_id)
    assert run.trigger.event == "mcp" and run.params == {"name": "ann", "loud": True}
    assert bad.is_error
    assert "failed: step 'boom' failed: command failed with exit code 3" in bad.content[0].text


@pytest.mark.parametrize("mode", ERAS)
async def test_invalid_arguments_are_a_protocol_error_naming_the_fields(
        server: AppServer, mode: str) -> None:
    from mcp import MCPError
    from mcp_types import INVALID_PARAMS

    async with mcp_client(server.url + "/mcp", mode=mode, token=TOKEN) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("hello", {"loud": "very"})
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("hidden", {})
    assert caught.value.code == INVALID_PARAMS
    assert "name: Field required" in caught.value.message
    assert "loud: Input should be a valid boolean" in caught.value.message
    assert {tuple(e["loc"]) for e in caught.value.data["errors"]} == {("name",), ("loud",)}
    assert unknown.value.code == INVALID_PARAMS and "unknown tool 'hidden'" in unknown.value.message


@pytest.mark.parametrize("mode", ERAS)
async def test_a_long_run_is_answered_with_its_state_then_brain_run_gives_its_result(
        server: AppServer, mode: str) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with mcp_client(server.url + "/mcp", mode=mode, token=TOKEN) as client:
        first = await client.call_tool("slow", {"seconds": 0.9}, progress_callback=on_progress)
        assert not first.is_error
        run_id = first.structured_content["run_id"]
        assert first.structured_content["status"] == "running"
        assert f'brain_run (run_id "{run_id}"' in first.content[0].text
        assert f"/runs/{run_id}" in first.structured_content["console"]
        later = await client.call_tool("brain_run", {"run_id": run_id[:12], "wait_seconds": 30})
    assert later.structured_content == {"run_id": run_id, "status": "succeeded",
                                        "result": "rested 0.9s"}
    assert progress[0][:2] == (0, 3) and (1, 3, "step nap succeeded") in progress
    assert [p[0] for p in progress] == sorted({p[0] for p in progress})  # only ever forward


async def _cancelled_call(client: Any, seconds: float) -> None:
    """Call ``slow``, then cancel the call once its first progress arrives."""
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        if not started.done():
            started.set_result("yes")

    call = asyncio.ensure_future(client.call_tool("slow", {"seconds": seconds},
                                                  progress_callback=on_progress))
    await asyncio.wait_for(started, 10)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


async def _last_slow_run(until: tuple[str, ...]) -> Any:
    async with Store(os.environ["BRAIN_DATABASE_URL"]) as store:
        for _ in range(100):
            runs = await store.list_runs(workflow="slow", limit=1)
            if runs[0].status in until:
                break
            await asyncio.sleep(0.1)
    return runs[0]


async def test_a_cancelled_call_cancels_its_run(server: AppServer) -> None:
    """2026-07-28: the client cancels by closing the call's stream."""
    async with mcp_client(server.url + "/mcp", token=TOKEN) as client:
        await _cancelled_call(client, 20)
        run = await _last_slow_run(("cancelled",))
    assert run.status == "cancelled"


async def test_a_handshake_era_cancel_over_stateless_http_cancels_nothing(
        server: AppServer) -> None:
    """The handshake era's ``notifications/cancelled`` comes as a request of its own, which
    nothing ties to the client that made the call (any client may say "cancel 1"): the run
    goes on to its end (docs/mcp-server.md)."""
    async with mcp_client(server.url + "/mcp", mode="legacy", token=TOKEN) as client:
        await _cancelled_call(client, 0.4)
        run = await _last_slow_run(("succeeded", "failed", "cancelled"))
    assert run.status == "succeeded"


def test_a_handshake_era_client_that_closes_the_calls_stream_cancels_its_run(
        server: AppServer) -> None:
    """What only the calling client can do, closing its call's response stream, cancels the
    run in the handshake era too."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "slow", "arguments": {"seconds": 20}}}
    headers = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25", "Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        before = {r["run_id"] for r in http.get("/api/runs", headers=headers).json()}
        with http.stream("POST", "/mcp", json=body, headers=headers) as answer:
            assert answer.status_code == 200
            fresh: list[str] = []
            for _ in range(200):
                fresh = [r["run_id"] for r in httpx.get(server.url + "/api/runs",
                                                        headers=headers).json()
                         if r["run_id"] not in before and r["status"] == "running"]
                if fresh:
                    break
                time.sleep(0.05)
            assert fresh, "the call's run never ran"
        # the stream is closed: the call's handler is cancelled, and its run with it
    run = asyncio.run(_last_slow_run(("cancelled",)))
    assert run.run_id == fresh[0] and run.status == "cancelled"


def test_without_the_token_mcp_answers_401(server: AppServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25"}
    assert httpx.post(server.url + "/mcp", json=body, headers=headers).status_code == 401
    wrong = {**headers, "Authorization": "Bearer nope"}
    assert httpx.post(server.url + "/mcp", json=body, headers=wrong).status_code == 401
    right = {**headers, "Authorization": f"Bearer {TOKEN}"}
    assert httpx.post(server.url + "/mcp", json=body, headers=right).status_code == 200


def test_without_a_token_set_only_loopback_hosts_and_origins_may_call(
        server: AppServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BRAIN_API_TOKEN")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25"}
    url = server.url + "/mcp"
    assert httpx.post(url, json=body, headers=headers).status_code == 200
    rebound = httpx.post(url, json=body, headers={**headers, "Host": "evil.example"})
    assert rebound.status_code == 401 and "loopback" in rebound.text
    other_site = httpx.post(url, json=body, headers={**headers, "Origin": "https://evil.example"})
    assert other_site.status_code == 401 and "cross-origin" in other_site.text
    null = httpx.post(url, json=body, headers={**headers, "Origin": "null"})
    assert null.status_code == 401


def test_no_wrong_token_or_foreign_host_gets_through(server: AppServer) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    base = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28"}
    header_text = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40)

    with httpx.Client(base_url=server.url, timeout=10) as http:
        @settings(max_examples=40, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(token=header_text.filter(lambda t: t != TOKEN))
        def wrong_token(token: str) -> None:
            answer = http.post("/mcp", json=body, headers={**base, "Authorization": f"Bearer {token}"})
            assert answer.status_code == 401

        @settings(max_examples=40, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(host=st.from_regex(r"[a-z][a-z0-9-]{0,20}\.(com|example|net)(:[0-9]{2,5})?",
                                  fullmatch=True))
        def foreign_host(host: str) -> None:
            os.environ.pop("BRAIN_API_TOKEN", None)
            try:
                answer = http.post("/mcp", json=body, headers={**base, "Host": host})
            finally:
                os.environ["BRAIN_API_TOKEN"] = TOKEN
            assert answer.status_code == 401

        wrong_token()
        foreign_host()


async def test_one_brain_calls_another_brains_workflow_with_mcp_tool(
        server: AppServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from brain import mcp_tool, secret, workflow

    monkeypatch.setenv("OTHER_BRAIN_TOKEN", TOKEN)

    @workflow
    def caller() -> str:
        return mcp_tool("ask", url=server.url + "/mcp", tool="hello",
                        args={"name": "from afar", "loud": False},
                        bearer=secret("OTHER_BRAIN_TOKEN"), timeout_seconds=30)

    result = await caller.arun(store=f"sqlite+aiosqlite:///{tmp_path / 'caller.db'}")
    assert result.succeeded, result.error
    assert "hello from afar" in result.steps["ask"].output
