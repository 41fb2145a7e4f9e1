"""``reuse="run"`` and waiting (SPEC §16, §17): a run that waits holds nothing, so the MCP
servers its steps shared end when it lets go, and a fresh one starts when it continues;
a run that ends leaves no server behind."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from brain import mcp_tool, sleep, workflow

SERVER = str(Path(__file__).resolve().parent.parent / "mcp_servers" / "pid_server.py")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_shared_server_ends_when_the_run_waits_and_a_fresh_one_serves_after(
        tmp_path: Path) -> None:
    command = [sys.executable, SERVER, "--pids", str(tmp_path)]

    @workflow
    def napping() -> None:
        first = mcp_tool("first", server_command=command, tool="pid", reuse="run")
        second = mcp_tool("second", server_command=command, tool="pid", reuse="run",
                          after=[first])
        nap = sleep("nap", 0.5, after=[second])
        mcp_tool("third", server_command=command, tool="pid", reuse="run", after=[nap])

    run = napping(store=f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}")
    assert run.succeeded, run.error
    pids = [json.loads(run.steps[name].output or "{}")["pid"]
            for name in ("first", "second", "third")]
    assert pids[0] == pids[1], "steps before the wait share one server"
    assert pids[2] != pids[0], "the run let go while it waited: its server ended"
    assert json.loads(run.steps["second"].output or "{}")["calls"] == 2
    started = {int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()}
    assert started == {pids[0], pids[2]}
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in started), "no server outlives its run"
