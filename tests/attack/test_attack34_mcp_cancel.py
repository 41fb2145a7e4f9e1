"""Attack on SPEC §23 (cancel): a client's cancel of a call cancels that run and no other run —
two clients using the same request ids (every SDK client numbers its requests from 0 or 1).
Raw JSON-RPC over real HTTP, handshake era (``notifications/cancelled``)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.append(str(Path(__file__).resolve().parent))
from attack34_support import LEGACY, call
from serve_support import AppServer
from support import serving

FLOWS = '''
import asyncio
from brain import step, workflow

@step
async def nap(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "rested"

@workflow(mcp=True)
def slow(seconds: float = 1.0) -> str:
    """Rest."""
    nap(seconds)
    return nap(seconds)
'''


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    folder = tmp_path_factory.mktemp("atk34-cancel")
    (folder / "flows.py").write_text(FLOWS)
    with serving(lambda: AppServer(folder / "flows.py"),
                 folder / "brain.db", BRAIN_MCP_WAIT_SECONDS="6", BRAIN_API_TOKEN=None) as app:
        yield app


@pytest.fixture(autouse=True)
def _database(served: AppServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_DATABASE_URL", served.db_url)  # type: ignore[attr-defined]


def _running_run(served: AppServer, known: set[str]) -> str:
    assert served.client is not None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        runs = served.client.get("/api/runs", params={"workflow": "slow"}).json()
        fresh = [r["run_id"] for r in runs if r["run_id"] not in known
                 and r["status"] == "running"]
        if fresh:
            return str(fresh[0])
        time.sleep(0.05)
    raise AssertionError("the call's run never ran")


def _cancel_notification(served: AppServer, request_id: int) -> None:
    body = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": request_id, "reason": "client B gave up"}})
    with httpx.Client(base_url=served.url, timeout=30) as other:  # another client
        answer = other.post("/mcp", content=body, headers=LEGACY)
    assert answer.status_code in (200, 202), answer.text


def test_another_clients_cancel_with_the_same_request_id_leaves_my_run_alone(
        served: AppServer) -> None:
    assert served.client is not None
    known = {r["run_id"] for r in served.client.get("/api/runs").json()}
    answers: list[httpx.Response] = []

    def client_a() -> None:
        with httpx.Client(base_url=served.url, timeout=30) as mine:
            answers.append(call(mine, "slow", {"seconds": 1.0}, rid=1))

    thread = threading.Thread(target=client_a)
    thread.start()
    try:
        run_id = _running_run(served, known)
        # Client B's request 1 was answered long ago (or timed out on its side): it says so.
        _cancel_notification(served, 1)
    finally:
        thread.join(30)
    run = served.client.get(f"/api/runs/{run_id}").json()
    assert run["status"] == "succeeded", run["status"]


def test_a_cancel_for_an_id_nobody_uses_cancels_nothing(served: AppServer) -> None:
    assert served.client is not None
    known = {r["run_id"] for r in served.client.get("/api/runs").json()}
    answers: list[httpx.Response] = []

    def client_a() -> None:
        with httpx.Client(base_url=served.url, timeout=30) as mine:
            answers.append(call(mine, "slow", {"seconds": 0.5}, rid="a-7f1"))

    thread = threading.Thread(target=client_a)
    thread.start()
    try:
        run_id = _running_run(served, known)
        for other_id in (1, 0, 2, 7):
            _cancel_notification(served, other_id)
    finally:
        thread.join(30)
    assert served.client.get(f"/api/runs/{run_id}").json()["status"] == "succeeded"
