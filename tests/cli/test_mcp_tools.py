"""``brain mcp tools -- COMMAND`` (SPEC §6): the real ``brain`` command against real servers.

The servers are ``tests/mcp_servers/tools_server.py`` (the SDK, many tools) and the
third-party ``mcp-server-time``. Each ``brain`` invocation starts a Python process
and a server (about two seconds of CPU together), so the module fixture starts every
invocation at once and the tests assert on their results.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PY = sys.executable
TOOLS = str(Path(__file__).resolve().parent.parent / "mcp_servers" / "tools_server.py")
TIME_SERVER = os.path.join(os.path.dirname(sys.executable), "mcp-server-time")
TOOL_NAMES = {
    "echo_args", "echo", "fail_with_error", "rpc_error", "die", "kill_self", "hang",
    "flood_stderr", "chatty", "two_texts", "text_and_image", "structured_only", "image_only",
    "get_pid", "get_group", "flaky", "show_env", "show_argv", "ask_sampling", "ask_elicitation", "ask_roots",
    "trace_meta",
}
MISSING_PATH = "/nonexistent-brain-test-dir/mcp-server"


@dataclass
class Done:
    argv: list[str]
    code: int
    out: str
    err: str


def _brain() -> list[str]:
    exe = shutil.which("brain", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "brain.cli"]


@pytest.fixture(scope="module")
def listings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Done]:
    """Every invocation below, started at the same time, run to completion."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "THE_BRAIN_"))}
    env["BRAIN_DATABASE_URL"] = (
        f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('mcp_cli') / 'brain.db'}")
    tools = ["mcp", "tools"]
    commands = {
        "tools_text": [*tools, "--", PY, TOOLS],
        "tools_json": [*tools, "--json", "--", PY, TOOLS],
        "time_text": [*tools, "--", TIME_SERVER],
        "time_json": [*tools, "--json", "--", TIME_SERVER],
        "missing": [*tools, "--", "no-such-mcp-server-zz", "--flag"],
        "missing_path": [*tools, "--", MISSING_PATH],
        "no_command": tools,
        "empty_command": [*tools, "--"],
    }
    procs = {key: subprocess.Popen([*_brain(), *argv], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                   env=env)
             for key, argv in commands.items()}
    done: dict[str, Done] = {}
    for key, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        done[key] = Done(commands[key], proc.returncode, out, err)
    return done


def _no_traceback(done: Done) -> None:
    assert "Traceback" not in done.err, done.err
    assert "Traceback" not in done.out, done.out


def test_lists_every_tool_with_its_description_and_input_schema(listings: dict[str, Done]):
    done = listings["tools_text"]
    assert done.code == 0, done.err
    _no_traceback(done)
    lines = done.out.splitlines()
    for name in TOOL_NAMES:
        assert name in lines, f"{name} missing from:\n{done.out}"
    # The echo tool's block: its name, its description, then its input schema as JSON.
    start = lines.index("echo")
    block = lines[start + 1:lines.index("", start)]
    assert block[0].strip() == "Return the text unchanged."
    assert block[1].strip() == "input schema:"
    schema = json.loads("\n".join(block[2:]))
    assert schema["properties"]["text"]["type"] == "string"
    assert schema["required"] == ["text"]
    assert schema["type"] == "object"


def test_lists_the_tools_of_mcp_server_time(listings: dict[str, Done]):
    done = listings["time_text"]
    assert done.code == 0, done.err
    _no_traceback(done)
    lines = done.out.splitlines()
    assert "get_current_time" in lines and "convert_time" in lines
    assert "Get current time in a specific timezone" in done.out
    assert '"timezone"' in done.out and "input schema:" in done.out


def test_json_gives_names_descriptions_and_input_schemas(listings: dict[str, Done]):
    done = listings["tools_json"]
    assert done.code == 0, done.err
    tools = json.loads(done.out)  # stdout holds only the JSON
    assert {t["name"] for t in tools} == TOOL_NAMES
    for tool in tools:
        assert tool["inputSchema"]["type"] == "object", tool
        assert tool["description"], tool
    echo = next(t for t in tools if t["name"] == "echo")
    assert echo["description"] == "Return the text unchanged."
    assert echo["inputSchema"]["properties"]["text"]["type"] == "string"
    assert echo["inputSchema"]["required"] == ["text"]
    flaky = next(t for t in tools if t["name"] == "flaky")
    assert set(flaky["inputSchema"]["required"]) == {"marker", "pid_log"}

    done = listings["time_json"]
    assert done.code == 0, done.err
    tools = json.loads(done.out)
    assert {t["name"] for t in tools} == {"get_current_time", "convert_time"}
    now = next(t for t in tools if t["name"] == "get_current_time")
    assert now["inputSchema"]["required"] == ["timezone"]
    assert now["inputSchema"]["properties"]["timezone"]["type"] == "string"


def test_missing_program_exits_2_with_a_clear_message(listings: dict[str, Done]):
    done = listings["missing"]
    assert done.code == 2
    _no_traceback(done)
    assert "no-such-mcp-server-zz" in done.err
    assert "not on PATH" in done.err or "not found" in done.err, done.err
    assert done.out == ""

    done = listings["missing_path"]
    assert done.code == 2
    _no_traceback(done)
    assert MISSING_PATH in done.err
    assert any(w in done.err for w in ("No such file", "not found", "does not exist")), done.err


def test_no_command_exits_2(listings: dict[str, Done]):
    for key in ("no_command", "empty_command"):
        done = listings[key]
        assert done.code == 2, key
        _no_traceback(done)
        assert "server command" in done.err, done.err
        assert done.out == ""
