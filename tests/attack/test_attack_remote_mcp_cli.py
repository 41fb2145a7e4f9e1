"""Attack (SPEC §6, §11, §17): ``brain mcp tools --url`` and ``brain run`` against a hostile
MCP server, and hostile command-line input.

Promised: secrets never appear in CLI output; a user mistake is "a clear message and exit
2 — never a traceback". ``brain mcp tools`` says itself (``brain/cli/commands.py::
_headers``) that the token and header values are "remembered as secrets, kept out of what
is printed".

Holds: a refusal (401, 403) or a 5xx says so without the token; a malformed ``--header``
is a usage error; ``brain run`` of a workflow whose server echoes the token in its tool
output or error prints it scrubbed.

Found (``xfail(strict=True)`` below):

1. ``brain mcp tools --url`` prints what the server says unscrubbed: a JSON-RPC error that
   quotes the bearer token, tool descriptions that quote it, the ``Basic`` header of a
   ``user:password@`` URL (whose password is not even remembered), and httpx's
   ``Illegal header value b'Bearer <token>\\r\\n'`` for a ``--bearer-env`` value read from
   a file with Windows line ends. ``render.error`` / ``render.tools`` /
   ``render.write_stdout`` print without ``scrub`` (``brain/cli/commands.py::cmd_mcp``,
   ``brain/executors/mcp_tools.py::_remote_tools``).
2. ``brain mcp tools --url`` with a malformed URL (port out of range, an unclosed IPv6
   bracket, a port that is not a number, a control character) ends in a Python traceback
   and exit 1 (``brain/executors/mcp_tools.py::_remote_tools`` re-raises what
   ``RemoteServer.describe_failure`` does not know; ``brain/cli/commands.py::dispatch``
   catches only ``BrainError``/``ValueError``).
3. ``brain run``: the MCP SDK's own log records (``logger.exception("Error parsing JSON
   response")``) reach stderr through Python's last-resort handler, unscrubbed: a server
   whose answer is no JSON-RPC message and quotes the bearer token gets it printed on the
   terminal (the stored error is scrubbed). ``brain run`` installs no scrubbing log handler
   (``brain/cli/logs.py::setup_logging`` is for ``serve``/``worker`` only).

Run: ``.venv/bin/pytest tests/attack/test_attack_remote_mcp_cli.py``
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import write_source

sys.path.append(str(Path(__file__).resolve().parent))
from test_attack_remote_mcp_hostile import HostileMcp

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

TOKEN = "cli-token-4f9e2a7c1b"
PASSWORD = "cli-url-pass-8d3b6e01"


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileMcp]:
    with HostileMcp() as server:
        yield server


def brain(brain_cmd: list[str], tmp_path: Path, *args: str,
          **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("BRAIN_", "THE_BRAIN_", "LLM_"))}
    full.update(BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}", **env)
    return subprocess.run([*brain_cmd, *args], capture_output=True, text=True, env=full,
                          cwd=tmp_path, timeout=60)


def printed(p: subprocess.CompletedProcess[str]) -> str:
    return p.stdout + p.stderr


# --- holds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, words", [("http401", "authentication failed"),
                                         ("http403", "authentication failed"),
                                         ("http503", "answered HTTP 503")])
def test_mcp_tools_says_a_refusal_without_the_token(hostile: HostileMcp, brain_cmd: list[str],
                                                    tmp_path: Path, mode: str, words: str):
    p = brain(brain_cmd, tmp_path, "mcp", "tools", "--url", hostile.url(mode, "bearer"),
              "--bearer-env", "ATK_TOKEN", ATK_TOKEN=TOKEN)
    assert p.returncode == 2, printed(p)
    assert words in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert TOKEN not in printed(p)


@pytest.mark.parametrize("header", ["NoColon", ": value", "X-Team: é", "X-Ä: value"])
def test_mcp_tools_refuses_a_malformed_header_in_one_line(hostile: HostileMcp,
                                                          brain_cmd: list[str], tmp_path: Path,
                                                          header: str):
    p = brain(brain_cmd, tmp_path, "mcp", "tools", "--url", hostile.url("tool"),
              "--header", header)
    assert p.returncode == 2, printed(p)
    assert "Traceback" not in printed(p) and p.stderr.startswith("error:"), printed(p)


def test_brain_run_prints_an_echoed_token_scrubbed(hostile: HostileMcp, brain_cmd: list[str],
                                                   tmp_path: Path):
    write_source(tmp_path, "flows.py", f'''
        from brain import mcp_tool, parallel, secret, workflow

        @workflow
        def atk_cli_echo():
            with parallel():
                mcp_tool("out", url={hostile.url("tool", "bearer", "safe")!r}, tool="t",
                         bearer=secret("ATK_TOKEN"))
                mcp_tool("progress", url={hostile.url("progress", "bearer", "raw")!r}, tool="t",
                         bearer=secret("ATK_TOKEN"))

        @workflow
        def atk_cli_refused():
            mcp_tool("call", url={hostile.url("error", "bearer", "raw")!r}, tool="t",
                     bearer=secret("ATK_TOKEN"))
    ''')
    ok = brain(brain_cmd, tmp_path, "run", "flows.py:atk_cli_echo", ATK_TOKEN=TOKEN)
    assert ok.returncode == 0, printed(ok)
    failed = brain(brain_cmd, tmp_path, "run", "flows.py:atk_cli_refused", ATK_TOKEN=TOKEN)
    assert failed.returncode == 1, printed(failed)
    assert "no access for ***" in failed.stderr, failed.stderr
    shown = brain(brain_cmd, tmp_path, "runs", "--json")
    for p in (ok, failed, shown):
        assert TOKEN not in printed(p), printed(p)


# --- found ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["initialize error", "tool listing", "url password",
                                  "bearer with CRLF"])
def test_mcp_tools_never_prints_the_credentials_a_server_echoes(
        hostile: HostileMcp, brain_cmd: list[str], tmp_path: Path, case: str):
    env = {"ATK_TOKEN": TOKEN}
    if case == "initialize error":
        args = ["--url", hostile.url("initerror", "bearer"), "--bearer-env", "ATK_TOKEN"]
    elif case == "tool listing":
        args = ["--url", hostile.url("tool", "bearer"), "--bearer-env", "ATK_TOKEN", "--json"]
    elif case == "url password":
        args = ["--url", hostile.url("tool", "authorization")
                .replace("http://", f"http://robot:{PASSWORD}@")]
    else:
        env["ATK_TOKEN"] = TOKEN + "\r\n"  # a value read from a file with Windows line ends
        args = ["--url", hostile.url("tool"), "--bearer-env", "ATK_TOKEN"]
    p = brain(brain_cmd, tmp_path, "mcp", "tools", *args, **env)
    text = printed(p)
    basic = base64.b64encode(f"robot:{PASSWORD}".encode()).decode()
    assert TOKEN not in text and PASSWORD not in text and basic not in text, text


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/mcp", "http://[::1/mcp",
                                 "http://127.0.0.1:abc/mcp", "http://127.0.0.1:1/m\rcp"],
                         ids=["port-out-of-range", "open-bracket", "port-not-a-number",
                              "control-character"])
def test_mcp_tools_with_a_malformed_url_says_so_in_one_line(brain_cmd: list[str],
                                                            tmp_path: Path, url: str):
    p = brain(brain_cmd, tmp_path, "mcp", "tools", "--url", url)
    assert "Traceback" not in printed(p), printed(p)[-600:]
    assert p.returncode == 2 and p.stderr.startswith("error:"), printed(p)


def test_brain_run_never_prints_a_token_the_sdk_logs(hostile: HostileMcp, brain_cmd: list[str],
                                                     tmp_path: Path):
    write_source(tmp_path, "flows.py", f'''
        from brain import mcp_tool, secret, workflow

        @workflow
        def atk_cli_sdk_log():
            mcp_tool("call", url={hostile.url("notrpc", "bearer", "raw")!r}, tool="t",
                     bearer=secret("ATK_TOKEN"))
    ''')
    p = brain(brain_cmd, tmp_path, "run", "flows.py", ATK_TOKEN=TOKEN)
    assert p.returncode == 1, printed(p)
    assert "Failed to parse JSON response" in p.stderr  # the step failed, saying why
    assert TOKEN not in printed(p), [line for line in p.stderr.splitlines() if TOKEN in line]
