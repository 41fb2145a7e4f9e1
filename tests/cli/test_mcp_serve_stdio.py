"""``brain mcp serve`` (SPEC §23): the ``mcp=True`` workflows over stdio, called by the
official SDK's stdio client as a desktop client would start it; runs recorded in
``BRAIN_DATABASE_URL``."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from brain.store import Store

FLOWS = Path(__file__).resolve().parents[1] / "mcp_server" / "flows.py"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp_deploy.py"


def _brain() -> tuple[str, list[str]]:
    exe = shutil.which("brain", path=os.path.dirname(sys.executable))
    return (exe, []) if exe else (sys.executable, ["-m", "brain.cli"])


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_brain_mcp_serve_answers_the_sdk_stdio_client(tmp_path: Path, mode: str) -> None:
    from mcp import Client, StdioServerParameters
    from mcp_types import ElicitResult

    db = f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"
    command, args = _brain()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "THE_BRAIN_"))}
    env.update(BRAIN_DATABASE_URL=db, BRAIN_MCP_WAIT_SECONDS="20")
    server = StdioServerParameters(command=command, args=[*args, "mcp", "serve", str(FLOWS)],
                                   env=env, cwd=str(tmp_path))
    asked: list[str] = []

    async def approve(context: object, params: object) -> ElicitResult:
        asked.append(params.message)  # type: ignore[attr-defined]
        return ElicitResult(action="accept", content={"approve": True})

    async with Client(server, mode=mode, elicitation_callback=approve) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        hello = await client.call_tool("hello", {"name": "bo"})
        # Over stdio a handshake-era client is asked too: stdio has a back-channel.
        deployed = await client.call_tool("deploy", {"service": "api"})
    assert names == ["broken", "deploy", "hello", "slow", "brain_run"]
    assert hello.structured_content["result"] == {"text": "hello bo", "loud": False}
    assert deployed.structured_content["result"] == "deployed api" and len(asked) == 1
    async with Store(db) as store:
        run = await store.get_run(deployed.structured_content["run_id"])
    assert run.trigger.event == "mcp" and run.steps["go"].decision["by"] == "mcp"


async def test_the_docs_deploy_example_is_approved_from_the_agents_window(tmp_path: Path) -> None:
    """examples/mcp_deploy.py (docs/mcp-server.md's worked example), as a desktop client
    configured like the docs say would call it."""
    from mcp import Client, StdioServerParameters
    from mcp_types import ElicitResult

    command, args = _brain()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "THE_BRAIN_"))}
    env["BRAIN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"
    server = StdioServerParameters(command=command, args=[*args, "mcp", "serve", str(EXAMPLE)],
                                   env=env, cwd=str(tmp_path))
    prompts: list[str] = []

    async def person(context: object, params: object) -> ElicitResult:
        prompts.append(params.message)  # type: ignore[attr-defined]
        return ElicitResult(action="accept", content={"approve": True, "comment": "go ahead"})

    async with Client(server, elicitation_callback=person) as client:
        tool, = [t for t in (await client.list_tools()).tools if t.name == "deploy"]
        result = await client.call_tool("deploy", {"service": "api", "env": "prod"})
    assert tool.input_schema["properties"]["env"]["enum"] == ["staging", "prod"]
    assert "would deploy api latest to prod" in prompts[0]
    assert result.structured_content["result"] == {"service": "api", "version": "latest",
                                                   "env": "prod", "approved": True}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_cancelled_call_cancels_its_run_over_stdio(tmp_path: Path, mode: str) -> None:
    """Over stdio the client cancels with ``notifications/cancelled``, which the SDK matches
    to that connection's own request (one client): the run is cancelled."""
    import asyncio

    from mcp import Client, StdioServerParameters

    db = f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"
    command, args = _brain()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "THE_BRAIN_"))}
    env.update(BRAIN_DATABASE_URL=db, BRAIN_MCP_WAIT_SECONDS="30")
    server = StdioServerParameters(command=command, args=[*args, "mcp", "serve", str(FLOWS)],
                                   env=env, cwd=str(tmp_path))
    async with Client(server, mode=mode) as client:
        started: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            if not started.done():
                started.set_result("yes")

        call = asyncio.ensure_future(client.call_tool("slow", {"seconds": 20},
                                                      progress_callback=on_progress))
        await asyncio.wait_for(started, 30)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        async with Store(db) as store:
            for _ in range(100):
                runs = await store.list_runs(workflow="slow", limit=1)
                if runs and runs[0].status == "cancelled":
                    break
                await asyncio.sleep(0.1)
    assert runs[0].status == "cancelled"
