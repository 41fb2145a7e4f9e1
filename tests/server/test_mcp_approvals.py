"""Approvals through MCP (SPEC §23): in the 2026-07-28 era a client that can ask its user is
asked with the approval's prompt (an ``input_required`` answer), and the answer is the
decision (``by: "mcp"``), first decision winning; a handshake-era client of the stateless
server, and a client that cannot ask, get the run's waiting state and the console link."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from mcp_support import FLOWS, mcp_client
from serve_support import AppServer
from support import serving

from brain.store import Store


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    db = tmp_path_factory.mktemp("mcp-approvals") / "brain.db"
    with serving(lambda: AppServer(FLOWS),
                 db, BRAIN_MCP_WAIT_SECONDS="10") as app:
        yield app


@pytest.fixture(autouse=True)
def _database(server: AppServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_DATABASE_URL", server.db_url)  # type: ignore[attr-defined]


async def _run(run_id: str) -> Any:
    async with Store(os.environ["BRAIN_DATABASE_URL"]) as store:
        return await store.get_run(run_id)


def _answering(action: str, content: dict[str, Any] | None, asked: list[str]) -> Any:
    from mcp_types import ElicitResult

    async def answer(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action=action, content=content)  # type: ignore[arg-type]

    return answer


async def test_the_2026_era_asks_the_user_and_records_the_decision(server: AppServer) -> None:
    asked: list[str] = []
    answer = _answering("accept", {"approve": True, "comment": "ship it"}, asked)
    async with mcp_client(server.url + "/mcp", elicitation_callback=answer) as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("deploy", {"service": "api"})
    assert not result.is_error, result.content
    assert result.structured_content["result"] == "deployed api"
    assert len(asked) == 1 and "Deploy api to production?" in asked[0] and "'go'" in asked[0]
    run = await _run(result.structured_content["run_id"])
    decision = run.steps["go"].decision
    assert decision["approved"] is True and decision["by"] == "mcp"
    assert decision["comment"] == "ship it"


async def test_a_rejection_is_recorded_too(server: AppServer) -> None:
    answer = _answering("accept", {"approve": False}, [])
    async with mcp_client(server.url + "/mcp", elicitation_callback=answer) as client:
        result = await client.call_tool("deploy", {"service": "db"})
    assert result.structured_content["result"] is None  # apply was skipped
    run = await _run(result.structured_content["run_id"])
    assert run.steps["go"].decision["approved"] is False
    assert run.steps["apply"].status == "skipped"


async def test_a_declined_question_decides_nothing_and_says_where_to_decide(
        server: AppServer) -> None:
    answer = _answering("decline", None, [])
    async with mcp_client(server.url + "/mcp", elicitation_callback=answer) as client:
        result = await client.call_tool("deploy", {"service": "web"})
    assert not result.is_error
    state = result.structured_content
    assert state["status"] in ("running", "waiting")
    assert state["waiting_for"][0]["kind"] == "approval"
    assert state["console"].endswith(f"/runs/{state['run_id']}")
    assert "declined" in result.content[0].text
    assert (await _run(state["run_id"])).steps["go"].decision is None


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_that_cannot_ask_gets_the_waiting_state_and_the_console_link(
        server: AppServer, mode: str) -> None:
    asked: list[str] = []
    options = {"elicitation_callback": _answering("accept", {"approve": True}, asked)} \
        if mode == "legacy" else {}  # legacy: it could, but a stateless server cannot ask
    async with mcp_client(server.url + "/mcp", mode=mode, **options) as client:
        result = await client.call_tool("deploy", {"service": "cache"})
    state = result.structured_content
    run_id = state["run_id"]
    # The step waits at once; the run is "waiting" once its execution has let it go.
    assert not result.is_error and state["status"] in ("running", "waiting") and not asked
    assert state["waiting_for"] == [{"step": "go", "kind": "approval",
                                     "prompt": "Deploy cache to production?",
                                     **{k: v for k, v in state["waiting_for"][0].items()
                                        if k not in ("step", "kind", "prompt")}}]
    text = result.content[0].text
    assert f"brain approve {run_id} go" in text and f"/runs/{run_id}" in text
    assert "an agent cannot" in text


async def test_the_first_decision_wins(server: AppServer) -> None:
    import httpx

    run_ids: list[str] = []

    async def decide_elsewhere_first(context: Any, params: Any) -> Any:
        from mcp_types import ElicitResult

        run_id = params.message.split("run ", 1)[1].split(" ", 1)[0]
        run_ids.append(run_id)
        async with httpx.AsyncClient(base_url=server.url) as http:
            taken = await http.post(f"/api/runs/{run_id}/steps/go/decision",
                                    json={"approve": False, "comment": "not today"})
            assert taken.status_code == 200
        return ElicitResult(action="accept", content={"approve": True})

    async with mcp_client(server.url + "/mcp", elicitation_callback=decide_elsewhere_first) as c:
        result = await c.call_tool("deploy", {"service": "queue"})
    run = await _run(run_ids[0])
    assert run.steps["go"].decision["by"] == "api"
    assert run.steps["go"].decision["approved"] is False
    assert result.structured_content["status"] == "succeeded"


async def _waiting_run(server: AppServer, service: str) -> str:
    """A run of ``deploy`` started through the API, once its approval waits."""
    import asyncio

    import httpx

    async with httpx.AsyncClient(base_url=server.url) as http:
        run_id = (await http.post("/api/workflows/deploy/runs",
                                  json={"params": {"service": service}})).json()["run_id"]
        for _ in range(300):
            run = (await http.get(f"/api/runs/{run_id}")).json()
            if any(s["status"] == "waiting" for s in run["steps"]):
                return str(run_id)
            await asyncio.sleep(0.05)
    raise AssertionError("the approval never waited")


async def test_brain_run_asks_the_approval_and_records_the_answer_like_a_tool_call(
        server: AppServer) -> None:
    """``brain_run`` on a run waiting for an approval asks the user (``input_required``), and
    its next round records the answer ``by: "mcp"``: asked once, first decision winning."""
    import httpx
    from mcp.shared.exceptions import MCPError
    from mcp_types import InputRequiredResult

    run_id = await _waiting_run(server, "via-brain-run")
    other_id = await _waiting_run(server, "not-this-one")
    no = {"go": {"action": "accept", "content": {"approve": False, "comment": "no"}}}
    yes = {"go": {"action": "accept", "content": {"approve": True}}}
    async with mcp_client(server.url + "/mcp", elicitation_callback=_answering(
            "accept", {"approve": True}, [])) as client:
        arguments = {"run_id": run_id, "wait_seconds": 5}
        first = await client.session.call_tool("brain_run", arguments,
                                               allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        assert run_id in first.input_requests["go"].params.message
        # The sealed state is the call's: another run's brain_run cannot spend it.
        with pytest.raises(MCPError):
            await client.session.call_tool("brain_run", {"run_id": other_id, "wait_seconds": 1},
                                           input_responses=yes,
                                           request_state=first.request_state,
                                           allow_input_required=True)
        rejected = await client.session.call_tool("brain_run", arguments, input_responses=no,
                                                  request_state=first.request_state,
                                                  allow_input_required=True)
        assert not isinstance(rejected, InputRequiredResult)
        assert rejected.structured_content["status"] == "succeeded"
        # Replaying the round to approve changes nothing: the first decision stands.
        again = await client.session.call_tool("brain_run", arguments, input_responses=yes,
                                               request_state=first.request_state,
                                               allow_input_required=True)
        assert not isinstance(again, InputRequiredResult)
    run = await _run(run_id)
    assert run.steps["go"].decision["approved"] is False
    assert run.steps["go"].decision["by"] == "mcp" and run.steps["go"].decision["comment"] == "no"
    assert run.steps["apply"].status == "skipped"
    assert (await _run(other_id)).steps["go"].decision is None
    async with httpx.AsyncClient(base_url=server.url) as http:
        await http.post(f"/api/runs/{other_id}/cancel")
