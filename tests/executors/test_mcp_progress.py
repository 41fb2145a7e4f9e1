"""Progress and cancelling of MCP tool calls (SPEC §17).

A server's ``notifications/progress`` during the step's ``tools/call`` are kept with the
step (``progress``: ``progress``, ``total``, ``message``, the latest one) and shown in its
log as ``progress 3/10: message``, on stdio and over HTTP alike. Cancelling a run sends
``notifications/cancelled`` for the call in flight before the server or session ends: the
test servers record what they receive, so the tests can see that it arrived.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_servers.fixtures import (
    PID_SERVER,
    PY,
    TOOLS_SERVER,
    HttpMcpServer,
    http_server,
    sdk_call,
    sdk_stdio_session,
    text_of,
)

from brain import mcp_tool, secret, workflow
from brain.runner.events import StepEvent
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

TOKEN = "progress-bearer-3c5e7a9b1d"


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpMcpServer]:
    with http_server(tmp_path_factory.mktemp("mcp_http"), token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def sse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpMcpServer]:
    with http_server(tmp_path_factory.mktemp("mcp_sse"), transport="sse", token=TOKEN) as server:
        yield server


@pytest.fixture(autouse=True)
def _bearer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TEST_BEARER", TOKEN)


def where(kind: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    """``mcp_tool`` options reaching the server of ``kind``: ``stdio`` (``pid_server.py``),
    ``http`` or ``sse`` (the module's servers)."""
    if kind == "stdio":
        return {"server_command": [PY, PID_SERVER]}
    server: HttpMcpServer = request.getfixturevalue(kind)
    return {"url": server.url, "transport": server.transport, "bearer": secret("MCP_TEST_BEARER")}


def step_log(db_url: str, run_id: str, step: str) -> list[tuple[str, str]]:
    async def read() -> list[tuple[str, str]]:
        async with Store(db_url) as store:
            return [(line.stream, line.text) for line in await store.read_log(run_id, step)]

    return asyncio.run(read())


# --- the servers, with the bare SDK client -------------------------------------------------------


def test_the_stdio_test_server_sends_progress_to_the_bare_sdk_client():
    progress: list[tuple[float, float | None, str | None]] = []

    async def work(session: Any) -> str:
        return text_of(await sdk_call(session, "count", {"n": 3, "delay": 0.01},
                                      progress=progress))

    assert asyncio.run(sdk_stdio_session([PY, PID_SERVER], work)) == "counted 3"
    assert progress == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]


# --- progress ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["stdio", "http", "sse"])
def test_progress_is_kept_with_the_step_and_shown_in_its_log(kind: str, db_url: str,
                                                             request: pytest.FixtureRequest):
    options = where(kind, request)

    @workflow(name=f"mcp_progress_{kind.replace('-', '_')}")
    def counting():
        mcp_tool("count", tool="count", args={"n": 10, "delay": 0.02}, **options)

    r = counting()
    step = r.steps["count"]
    assert step.status == "succeeded", step.error
    assert step.output == "counted 10"
    # The latest report, as the server sent it.
    assert step.progress == {"progress": 10, "total": 10, "message": "step 10"}
    assert r.to_json_dict()["steps"][0]["progress"] == step.progress
    lines = step_log(db_url, r.run_id, "count")
    assert ("brain", "progress 10/10: step 10") in lines, lines
    # Every progress line the log shows is one the server sent.
    shown = [text for stream, text in lines if text.startswith("progress ")]
    assert shown and set(shown) <= {f"progress {i}/10: step {i}" for i in range(1, 11)}, shown


def test_progress_is_stored_while_the_step_runs(http: HttpMcpServer, db_url: str):
    """Shown live: the stored step has a progress report before the call ends."""

    @workflow
    def mcp_progress_live():
        mcp_tool("count", url=http.url, bearer=secret("MCP_TEST_BEARER"), tool="count",
                 args={"n": 20, "delay": 0.2})

    async def go() -> tuple[Any, list[dict[str, Any]]]:
        run_ids: list[str] = []
        seen: list[dict[str, Any]] = []

        def on_event(event: StepEvent) -> None:
            run_ids.append(event.run_id)

        async with Store(db_url) as store:
            task = asyncio.create_task(mcp_progress_live.arun(store=store, on_event=on_event))
            while not task.done():
                await asyncio.sleep(0.1)
                if not run_ids:
                    continue
                step = (await store.get_run(run_ids[0])).steps["count"]
                if step.status == "running" and step.progress is not None:
                    seen.append(step.progress)
            return await task, seen

    r, seen = asyncio.run(go())
    assert r.status == "succeeded", r.error
    assert seen, "no progress was stored while the step ran"
    assert any(p["progress"] < 20 for p in seen), seen
    for p in seen:
        assert p["total"] == 20 and p["message"] == f"step {p['progress']:g}", p
    assert r.steps["count"].progress == {"progress": 20, "total": 20, "message": "step 20"}


# --- cancelling ----------------------------------------------------------------------------------


async def _cancel_when(wf: Any, db_url: str, ready: Any, how: str) -> Any:
    """Run ``wf``; once ``ready()`` holds (polled in a thread), cancel the run — through the
    store (``request_cancel``, as ``brain cancel`` and the API do) or by cancelling the task
    executing it — and return its result as stored."""
    run_ids: list[str] = []
    async with Store(db_url) as store:
        task = asyncio.create_task(wf.arun(store=store, on_event=lambda e: run_ids.append(e.run_id)))
        assert await asyncio.to_thread(ready), "the call never reached the server"
        assert run_ids, "no step event came"
        if how == "store":
            _, active = await store.request_cancel(run_ids[0])
            assert active
            result = await asyncio.wait_for(task, 30)
        else:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 30)
            result = await store.get_run(run_ids[0])
        return result


@pytest.mark.parametrize(("kind", "how"), [("http", "store"), ("http", "task"),
                                           ("sse", "store")])
def test_cancelling_a_run_sends_notifications_cancelled_for_the_call_in_flight(
        kind: str, how: str, db_url: str, request: pytest.FixtureRequest):
    server: HttpMcpServer = request.getfixturevalue(kind)
    tag = f"cancel-{uuid.uuid4().hex[:12]}"

    @workflow(name=f"mcp_cancel_{kind}_{how}")
    def cancelled():
        mcp_tool("slow", tool="slow", args={"seconds": 60, "tag": tag}, timeout_seconds=120,
                 **where(kind, request))

    def started() -> bool:
        return server.wait_for(lambda events: any(
            e["event"] == "slow-started" and e["tag"] == tag for e in events), 30)

    r = asyncio.run(_cancel_when(cancelled, db_url, started, how))
    assert r.status == "cancelled", r.error
    assert r.steps["slow"].status == "cancelled"

    def cancel_sent(_: list[dict[str, Any]]) -> bool:
        wire = server.wire_of_call(tag)
        return any(e.get("method") == "notifications/cancelled"
                   and (e.get("params") or {}).get("requestId") == wire[0]["id"] for e in wire)

    # What the client sent, as it arrived on the wire (the SDK's server may end the session
    # before its dispatcher gets to a notification that arrived just before the DELETE).
    assert server.wait_for(cancel_sent, 10), server.wire_of_call(tag)
    wire = server.wire_of_call(tag)
    assert [e.get("method") for e in wire].count("tools/call") == 1
    cancel = next(i for i, e in enumerate(wire) if e.get("method") == "notifications/cancelled")
    ended = [i for i, e in enumerate(wire) if e["verb"] == "DELETE"]
    assert all(cancel < i for i in ended), f"the session was ended before the cancel: {wire}"
    # The tool's work was stopped, not left running.
    assert server.wait_for(lambda events: any(
        e["event"] == "slow-cancelled" and e["tag"] == tag for e in events), 10)


def test_cancelling_a_run_sends_notifications_cancelled_to_a_stdio_server(tmp_path: Path,
                                                                          db_url: str):
    methods = tmp_path / "methods.log"

    @workflow
    def mcp_cancel_stdio():
        mcp_tool("hang", server_command=[sys.executable, TOOLS_SERVER], tool="hang",
                 env={"MCP_METHOD_LOG": str(methods)}, timeout_seconds=120)

    def called() -> bool:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if methods.exists() and "tools/call" in methods.read_text():
                return True
            time.sleep(0.05)
        return False

    r = asyncio.run(_cancel_when(mcp_cancel_stdio, db_url, called, "store"))
    assert r.status == "cancelled", r.error
    assert r.steps["hang"].status == "cancelled"
    seen = methods.read_text().split()
    assert "notifications/cancelled" in seen, seen
    assert seen.index("tools/call") < seen.index("notifications/cancelled")
