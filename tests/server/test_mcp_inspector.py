"""The MCP Inspector's command line (``@modelcontextprotocol/inspector --cli``, from npm)
lists The Brain's tools and calls one over ``/mcp`` (SPEC §23). ``.ci/run`` installs it
outside the repository and exports ``BRAIN_MCP_INSPECTOR``; without it the test is skipped."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_support import FLOWS
from serve_support import AppServer

INSPECTOR = os.environ.get("BRAIN_MCP_INSPECTOR") or str(
    Path.home() / ".cache/brain-ci/inspector/node_modules/.bin/mcp-inspector")

pytestmark = pytest.mark.skipif(
    not os.access(INSPECTOR, os.X_OK),
    reason="the MCP Inspector is not installed (.ci/run installs it with npm into "
           "~/.cache/brain-ci/inspector and exports BRAIN_MCP_INSPECTOR)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    db = tmp_path_factory.mktemp("inspector") / "brain.db"
    saved = os.environ.get("BRAIN_DATABASE_URL")
    os.environ["BRAIN_DATABASE_URL"] = f"sqlite+aiosqlite:///{db}"
    try:
        with AppServer(FLOWS) as app:  # no token: loopback only, as a local inspector finds it
            yield app
    finally:
        if saved is None:
            os.environ.pop("BRAIN_DATABASE_URL", None)
        else:
            os.environ["BRAIN_DATABASE_URL"] = saved


def _inspect(url: str, *args: str, home: Path) -> dict[str, object]:
    done = subprocess.run([INSPECTOR, "--cli", url, "--transport", "http", *args],
                          capture_output=True, text=True, timeout=90,
                          env={**os.environ, "HOME": str(home)})
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_inspector_lists_and_calls_a_tool(server: AppServer, tmp_path: Path) -> None:
    listed = _inspect(server.url + "/mcp", "--method", "tools/list", home=tmp_path)
    names = [t["name"] for t in listed["tools"]]  # type: ignore[index, union-attr]
    assert names == ["broken", "deploy", "hello", "slow", "brain_run"]
    called = _inspect(server.url + "/mcp", "--method", "tools/call", "--tool-name", "hello",
                      "--tool-arg", "name=inspector", home=tmp_path)
    assert called["structuredContent"]["result"] == {  # type: ignore[index, call-overload]
        "text": "hello inspector", "loud": False}
    assert called["content"][0]["text"] == '{"text":"hello inspector","loud":false}'  # type: ignore[index]
