"""``brain mcp tools --url`` (SPEC §17): the real ``brain`` command against the SDK's own
server over streamable HTTP and legacy SSE, behind a bearer check, on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVERS = Path(__file__).resolve().parent.parent / "mcp_servers"
TOKEN = "cli-test-token-5f1c9e"


def _brain() -> list[str]:
    exe = shutil.which("brain", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "brain.cli"]


def _start(script: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, str(SERVERS / script), "--port", "0", "--token",
                             TOKEN, "--watch-stdin"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    """The streamable HTTP and SSE servers' URLs, while the module runs."""
    http, http_port = _start("http_server.py")
    sse, sse_port = _start("sse_server.py")
    try:
        yield {"http": f"http://127.0.0.1:{http_port}/mcp",
               "sse": f"http://127.0.0.1:{sse_port}/sse"}
    finally:
        for proc in (http, sse):
            proc.kill()
            proc.wait()


def _run(tmp_path: Path, *args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "THE_BRAIN_"))}
    env["BRAIN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"
    if token is not None:
        env["MCP_TOKEN"] = token
    return subprocess.run([*_brain(), "mcp", "tools", *args], env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_lists_a_remote_servers_tools_with_a_bearer_token(servers: dict[str, str],
                                                          tmp_path: Path) -> None:
    done = _run(tmp_path, "--json", "--url", servers["http"], "--bearer-env", "MCP_TOKEN")
    assert done.returncode == 0, done.stderr
    names = {tool["name"] for tool in json.loads(done.stdout)}
    assert {"echo", "pid", "count", "slow", "headers"} <= names


def test_lists_over_sse_with_a_header(servers: dict[str, str], tmp_path: Path) -> None:
    done = _run(tmp_path, "--url", servers["sse"], "--transport", "sse", "--header",
                f"Authorization: Bearer {TOKEN}", token=None)
    assert done.returncode == 0, done.stderr
    assert "echo" in done.stdout and "input schema" in done.stdout


def test_a_wrong_token_says_authentication_failed_and_never_shows_it(
        servers: dict[str, str], tmp_path: Path) -> None:
    wrong = "wrong-token-that-must-not-show"
    done = _run(tmp_path, "--url", servers["http"], "--bearer-env", "MCP_TOKEN", token=wrong)
    assert done.returncode == 2
    assert "authentication failed" in done.stderr and "401" in done.stderr
    assert "--bearer-env" in done.stderr
    assert wrong not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreachable_server_and_bad_arguments_are_clear(tmp_path: Path) -> None:
    done = _run(tmp_path, "--url", "http://127.0.0.1:1/mcp")
    assert done.returncode == 2 and "cannot reach the MCP server" in done.stderr
    done = _run(tmp_path, "--url", "ftp://example/mcp")
    assert done.returncode == 2 and "must start with http" in done.stderr
    done = _run(tmp_path, "--url", "http://127.0.0.1:1/mcp", "--bearer-env", "NOT_SET_ANYWHERE")
    assert done.returncode == 2 and "NOT_SET_ANYWHERE is not set" in done.stderr
    done = _run(tmp_path, "--header", "X: y", "--", "mcp-server-time")
    assert done.returncode == 2 and "go with --url" in done.stderr
    for args in (("--url", "http://127.0.0.1:1/mcp", "--header", "no colon here"),):
        done = _run(tmp_path, *args)
        assert done.returncode == 2 and "Name: value" in done.stderr
    assert "Traceback" not in done.stderr
