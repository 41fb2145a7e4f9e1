"""Two ``brain serve`` processes on one PostgreSQL database answer MCP for each other's runs
(SPEC §23: the server is stateless). A run started by a ``tools/call`` on one is read with
``brain_run`` on the other; an approval asked by one (2026-07-28 era) is answered to the
other, which records the decision."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_support import FLOWS, mcp_client
from serve_support import BrainServer, brain_argv, clean_env

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

TOKEN = "pg-mcp-token-31d9"


@pytest.fixture
def two_servers(tmp_path: Path, pg_url: str) -> Iterator[tuple[BrainServer, BrainServer]]:
    folder = tmp_path / "flows"
    folder.mkdir()
    shutil.copy(FLOWS, folder / "flows.py")
    env = clean_env(tmp_path / "unused.db", {"BRAIN_DATABASE_URL": pg_url,
                                             "BRAIN_API_TOKEN": TOKEN,
                                             "BRAIN_MCP_WAIT_SECONDS": "3"})
    first = BrainServer(brain_argv(), folder, tmp_path, env)
    second = BrainServer(brain_argv(), folder, tmp_path, env)
    try:
        first.wait_healthy()
        second.wait_healthy()
        yield first, second
    finally:
        first.stop()
        second.stop()


async def test_a_run_started_on_one_server_is_answered_by_the_other(
        two_servers: tuple[BrainServer, BrainServer]) -> None:
    from mcp_types import ElicitResult, InputRequiredResult

    one, other = two_servers
    async with mcp_client(one.url + "/mcp", token=TOKEN, mode="legacy") as client:
        started = await client.call_tool("slow", {"seconds": 2})
    run_id = started.structured_content["run_id"]
    assert started.structured_content["status"] in ("queued", "running")
    async with mcp_client(other.url + "/mcp", token=TOKEN) as client:
        done = await client.call_tool("brain_run", {"run_id": run_id, "wait_seconds": 30})
    assert done.structured_content == {"run_id": run_id, "status": "succeeded",
                                       "result": "rested 2.0s"}

    # An approval asked by one server, answered to the other (the SDK's sealed state).
    async def never(context: object, params: object) -> ElicitResult:  # declares it can ask
        raise AssertionError("this test answers by hand")

    async with mcp_client(one.url + "/mcp", token=TOKEN, elicitation_callback=never) as client:
        asked = await client.session.call_tool("deploy", {"service": "api"},
                                               allow_input_required=True)
    assert isinstance(asked, InputRequiredResult), asked
    (step, question), = (asked.input_requests or {}).items()
    assert step == "go" and "Deploy api to production?" in question.params.message
    async with mcp_client(other.url + "/mcp", token=TOKEN, elicitation_callback=never) as client:
        answered = await client.session.call_tool(
            "deploy", {"service": "api"}, allow_input_required=True,
            input_responses={"go": ElicitResult(action="accept", content={"approve": True})},
            request_state=asked.request_state)
        run_id = answered.structured_content["run_id"]
        done = await client.call_tool("brain_run", {"run_id": run_id, "wait_seconds": 30})
    assert done.structured_content["result"] == "deployed api"
