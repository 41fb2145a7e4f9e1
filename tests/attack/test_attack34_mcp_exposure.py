"""Attack on SPEC §23 (exposure and approvals): only ``@workflow(..., mcp=True)`` workflows are
tools, nothing else is listed or callable (look-alike names, a workflow named like the
built-in ``brain_run``, a reload that removes ``mcp=True``); ``brain_run`` reads a run as
``/api/runs/{id}`` does (docs/mcp-server.md: "read any run's status and result"); an
approval asked through elicitation is recorded ``by: "mcp"``, first decision winning, and
its sealed state cannot be replayed or bent to decide another run, twice, or after a
cancel."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_support import mcp_client
from support import serving

sys.path.append(str(Path(__file__).resolve().parent))
from attack34_support import answer_of, call, rpc_body, run_count
from serve_support import AppServer

from brain.store import Store

FLOWS = '''
from brain import approval, shell, when, workflow

@workflow(mcp=True)
def deploy(service: str) -> str | None:
    """Deploy SERVICE once a person approves."""
    ok = approval("go", prompt=f"Deploy {service} to production?")
    with when(ok):
        done = shell("apply", argv=["echo", f"deployed {service}"])
    return done

@workflow(mcp=True)
def brain_run(run_id: str = "x") -> str:
    """A workflow named like the built-in tool."""
    return shell("impostor", argv=["echo", "impostor ran"])

@workflow
def hidden(service: str = "x") -> str | None:
    """Not offered: no mcp=True."""
    ok = approval("go", prompt=f"Hidden deploy of {service}?")
    with when(ok):
        done = shell("apply", argv=["echo", f"hidden {service}"])
    return done
'''

RELOADED = '''
from brain import shell, workflow

@workflow(mcp=True)
def fading() -> str:
    """Offered until the file changes."""
    return shell("f", argv=["echo", "fading"])
'''


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    folder = tmp_path_factory.mktemp("atk34-exposure")
    (folder / "flows.py").write_text(FLOWS)
    (folder / "fading.py").write_text(RELOADED)
    with serving(lambda: AppServer(folder / "flows.py", folder / "fading.py",
                     reload_paths=[str(folder / "fading.py")]),
                 folder / "brain.db", BRAIN_MCP_WAIT_SECONDS="4", BRAIN_API_TOKEN=None) as app:
        app.folder = folder  # type: ignore[attr-defined]
        yield app


@pytest.fixture(autouse=True)
def _database(served: AppServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_DATABASE_URL", served.db_url)  # type: ignore[attr-defined]


async def _run(run_id: str) -> Any:
    async with Store(os.environ["BRAIN_DATABASE_URL"]) as store:
        return await store.get_run(run_id)


def _tools(served: AppServer) -> list[str]:
    assert served.client is not None
    answer = served.client.post("/mcp", content=rpc_body("tools/list"), headers={
        "Accept": "application/json, text/event-stream", "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25"})
    return [t["name"] for t in answer_of(answer.text)["result"]["tools"]]


def _waiting(served: AppServer, workflow: str, service: str) -> str:
    assert served.client is not None
    run_id = served.client.post(f"/api/workflows/{workflow}/runs",
                                json={"params": {"service": service}}).json()["run_id"]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        run = served.client.get(f"/api/runs/{run_id}").json()
        if any(s["status"] == "waiting" for s in run["steps"]):
            return str(run_id)
        time.sleep(0.05)
    raise AssertionError("the approval never waited")


# --- exposure --------------------------------------------------------------------------------


def test_only_mcp_workflows_are_listed_and_brain_run_is_the_built_in_once(
        served: AppServer) -> None:
    names = _tools(served)
    assert "hidden" not in names
    assert names.count("brain_run") == 1
    assert sorted(n for n in names if n != "brain_run") == ["deploy", "fading"]


@pytest.mark.parametrize("name", [
    "hidden", "Hidden", "HIDDEN", "hidden ", " hidden", "hidden\u200b", "h\u0456dden",
    "\uff48\uff49\uff44\uff44\uff45\uff4e", "hidden\x00", "flows.hidden", "flows:hidden",
    "../hidden", "hidden/", "hidde", "hidden?x=1", "brain_run ", "BRAIN_RUN"])
def test_a_workflow_not_declared_mcp_cannot_be_called(served: AppServer, name: str) -> None:
    assert served.client is not None
    before = run_count(served.client)
    message = answer_of(call(served.client, name, {}).text)
    assert "error" in message or message["result"].get("isError"), message
    assert run_count(served.client) == before
    assert not [r for r in served.client.get("/api/runs", params={"workflow": "hidden"}).json()
                if r["trigger"]["event"] == "mcp"]


def test_calling_brain_run_never_runs_the_workflow_named_brain_run(served: AppServer) -> None:
    assert served.client is not None
    before = run_count(served.client)
    message = answer_of(call(served.client, "brain_run", {"run_id": "x"}).text)
    assert message["error"]["code"] == -32602
    assert run_count(served.client) == before


def test_a_reload_that_drops_mcp_true_takes_the_tool_away(served: AppServer) -> None:
    assert served.client is not None
    folder: Path = served.folder  # type: ignore[attr-defined]
    assert "fading" in _tools(served)
    source = folder / "fading.py"
    source.write_text(RELOADED.replace("@workflow(mcp=True)", "@workflow") + "\n# changed\n")
    os.utime(source, (time.time() + 5, time.time() + 5))
    deadline = time.monotonic() + 10
    while "fading" in _tools(served) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "fading" not in _tools(served)
    before = run_count(served.client)
    message = answer_of(call(served.client, "fading", {}).text)
    assert "error" in message
    assert run_count(served.client) == before


# --- brain_run: what the docs promise ------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "%", "_", "0" * 33, "g", "' or 1=1 --", "*"])
def test_brain_run_takes_only_what_the_api_takes(served: AppServer, prefix: str) -> None:
    assert served.client is not None
    message = answer_of(call(served.client, "brain_run", {"run_id": prefix}).text)
    assert message["error"]["code"] == -32602
    assert "run_id" in message["error"]["message"] or "no run" in message["error"]["message"]


def test_brain_run_reads_a_run_as_the_api_does(served: AppServer) -> None:
    """The docs promise any run is readable with the MCP door's key (as with the API's);
    an ambiguous prefix is refused, a unique one answers, as ``/api/runs/{id}``."""
    assert served.client is not None
    run_id = _waiting(served, "hidden", "read-me")
    for prefix in (run_id, run_id[:12]):
        message = answer_of(call(served.client, "brain_run", {"run_id": prefix}).text)
        api = served.client.get(f"/api/runs/{prefix}")
        assert api.status_code == 200
        assert message["result"]["structuredContent"]["run_id"] == run_id
    served.client.post(f"/api/runs/{run_id}/cancel")


# --- approvals -----------------------------------------------------------------------------


def _answering(approve: bool, asked: list[str]) -> Any:
    from mcp_types import ElicitResult

    async def answer(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": approve})

    return answer


async def test_an_approval_asked_through_brain_run_is_recorded(served: AppServer) -> None:
    run_id = _waiting(served, "deploy", "via-brain-run")
    asked: list[str] = []
    try:
        async with mcp_client(served.url + "/mcp", elicitation_callback=_answering(True, asked),
                              input_required_max_rounds=3) as client:
            result = await client.call_tool("brain_run", {"run_id": run_id, "wait_seconds": 3})
        assert not result.is_error
        run = await _run(run_id)
        assert run.steps["go"].decision is not None
        assert run.steps["go"].decision["by"] == "mcp"
        assert len(asked) == 1
    finally:
        assert served.client is not None
        served.client.post(f"/api/runs/{run_id}/cancel")


async def _first_round(client: Any, service: str) -> Any:
    from mcp_types import InputRequiredResult

    first = await client.session.call_tool("deploy", {"service": service},
                                           allow_input_required=True)
    assert isinstance(first, InputRequiredResult), first
    return first


def _yes(approve: bool = True, step: str = "go") -> dict[str, Any]:
    return {step: {"action": "accept", "content": {"approve": approve}}}


async def test_sealed_state_cannot_be_replayed_bent_or_used_after_a_cancel(
        served: AppServer) -> None:
    from mcp.shared.exceptions import MCPError

    assert served.client is not None
    async with mcp_client(served.url + "/mcp",
                          elicitation_callback=_answering(True, [])) as client:
        # 1. Other arguments (another service) with a state minted for one call: refused.
        first = await _first_round(client, "svc-one")
        with pytest.raises(MCPError):
            await client.session.call_tool("deploy", {"service": "svc-two"},
                                           input_responses=_yes(),
                                           request_state=first.request_state,
                                           allow_input_required=True)
        # 2. Tampered state: refused.
        state = first.request_state
        bent = state[:-3] + ("A" if state[-3] != "A" else "B") + state[-2:]
        with pytest.raises(MCPError):
            await client.session.call_tool("deploy", {"service": "svc-one"},
                                           input_responses=_yes(), request_state=bent,
                                           allow_input_required=True)
        # 3. Decide (reject), then replay the same state to approve: the first decision stays.
        await client.session.call_tool("deploy", {"service": "svc-one"},
                                       input_responses=_yes(False),
                                       request_state=first.request_state,
                                       allow_input_required=True)
        await client.session.call_tool("deploy", {"service": "svc-one"},
                                       input_responses=_yes(True),
                                       request_state=first.request_state,
                                       allow_input_required=True)
        run_one = first.input_requests["go"].params.message.split()[3]
        decision = (await _run(run_one)).steps["go"].decision
        assert decision["approved"] is False and decision["by"] == "mcp"
        # 4. Same arguments, a later run: the old state still names the old run only.
        second = await _first_round(client, "svc-one")
        run_two = second.input_requests["go"].params.message.split()[3]
        assert run_two != run_one
        await client.session.call_tool("deploy", {"service": "svc-one"},
                                       input_responses=_yes(True),
                                       request_state=first.request_state,
                                       allow_input_required=True)
        assert (await _run(run_two)).steps["go"].decision is None
        # 5. After a cancel, the answer decides nothing.
        served.client.post(f"/api/runs/{run_two}/cancel")
        await client.session.call_tool("deploy", {"service": "svc-one"},
                                       input_responses=_yes(True),
                                       request_state=second.request_state,
                                       allow_input_required=True)
        after = await _run(run_two)
        assert after.status == "cancelled" and after.steps["go"].decision is None


async def test_the_first_decision_wins_between_the_api_and_mcp(served: AppServer) -> None:
    assert served.client is not None
    async with mcp_client(served.url + "/mcp",
                          elicitation_callback=_answering(True, [])) as client:
        for i in range(4):
            first = await _first_round(client, f"race-{i}")
            run_id = first.input_requests["go"].params.message.split()[3]

            async def by_api(run_id: str = run_id) -> int:
                return await asyncio.to_thread(
                    lambda: served.client.post(  # type: ignore[union-attr]
                        f"/api/runs/{run_id}/steps/go/decision",
                        json={"approve": False, "comment": "api"}).status_code)

            mcp_answer, api_status = await asyncio.gather(
                client.session.call_tool("deploy", {"service": f"race-{i}"},
                                         input_responses=_yes(True),
                                         request_state=first.request_state,
                                         allow_input_required=True),
                by_api())
            decision = (await _run(run_id)).steps["go"].decision
            assert decision is not None
            if api_status == 200:
                assert decision["by"] == "api" and decision["approved"] is False
            else:
                assert api_status == 409
                assert decision["by"] == "mcp" and decision["approved"] is True
            assert mcp_answer is not None


async def test_a_client_that_cannot_ask_never_approves(served: AppServer) -> None:
    async with mcp_client(served.url + "/mcp") as client:  # no elicitation callback
        result = await client.call_tool("deploy", {"service": "no-ask"})
    run_id = result.structured_content["run_id"]
    assert not result.is_error and result.structured_content["status"] in ("running", "waiting")
    assert (await _run(run_id)).steps["go"].decision is None
    assert served.client is not None
    served.client.post(f"/api/runs/{run_id}/cancel")
