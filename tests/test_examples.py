"""The shipped examples run, as a user would run them.

LLM steps talk to a FakeChatServer on loopback (LLM_BASE_URL), the only thing
standing in for something off this machine. Examples that name another host
are traced and validated with ``brain check``; their steps are tested with
mocks in examples/tests/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from brain.testing import FakeChatServer

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.py"))
# two_models.py talks to two model hosts; digest_memories.py to the Memory Vault MCP server,
# not installable here. Both are run with mocks in examples/tests/. notes_digest.py appends
# to digest.md beside itself: it runs from a copy (the README's first block), below.
NEEDS_OTHER_SERVERS = {"two_models.py", "digest_memories.py"}
RUN_FROM_A_COPY = {"notes_digest.py"}
# approve_deploy.py waits for a person and a CI signal: run below, answered by the commands
# docs/waiting.md shows.
WAITS_FOR_ANSWERS = {"approve_deploy.py", "mcp_deploy.py"}  # mcp_deploy: tests/mcp_server


@pytest.fixture(scope="module")
def chat_server() -> Iterator[FakeChatServer]:
    with FakeChatServer(reply="A short summary.") as server:
        yield server


@pytest.mark.parametrize("path", [p for p in EXAMPLES
                                  if p.name not in NEEDS_OTHER_SERVERS | RUN_FROM_A_COPY
                                  | WAITS_FOR_ANSWERS],
                         ids=lambda p: p.name)
def test_example_runs_to_success(path: Path, brain_cmd: list[str], tmp_path: Path,
                                 chat_server: FakeChatServer) -> None:
    env = dict(os.environ, LLM_BASE_URL=chat_server.url, LLM_MODEL="fake-model")
    proc = subprocess.run([*brain_cmd, "run", str(path), "--json"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["status"] == "succeeded"
    assert all(step["status"] == "succeeded" for step in run["steps"])


def test_every_example_traces_and_validates(brain_cmd: list[str], tmp_path: Path) -> None:
    proc = subprocess.run([*brain_cmd, "check", *map(str, EXAMPLES)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for path in EXAMPLES:
        assert path.name in proc.stdout  # the verdicts are the command's result: stdout


def test_hello_greets_with_the_first_steps_output(brain_cmd: list[str], tmp_path: Path) -> None:
    hello = EXAMPLES[0].parent / "hello.py"
    proc = subprocess.run([*brain_cmd, "run", str(hello)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "hello, world!"


def test_the_docker_mcp_example_runs_here_with_the_time_server_on_path(
        brain_cmd: list[str], tmp_path: Path) -> None:
    """examples/docker-mcp's workflow, outside its image: the dev install has mcp-server-time
    beside this Python, and the image puts that folder on PATH the same way."""
    flow = EXAMPLES[0].parent / "docker-mcp" / "flows" / "what_time.py"
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run([*brain_cmd, "run", str(flow), "--json"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    steps = {s["name"]: s for s in json.loads(proc.stdout)["steps"]}
    assert [line.split(":")[0] for line in steps["clocks"]["output"].splitlines()] == [
        "Europe/Bucharest", "Asia/Tokyo"]


def _when_step_waits(brain_cmd: list[str], cwd: Path, step: str) -> str:
    """The id of the one waiting run, once its step ``step`` waits."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = subprocess.run([*brain_cmd, "runs", "--status", "waiting", "--json"],
                                capture_output=True, text=True, cwd=cwd, timeout=30)
        for run in json.loads(listed.stdout or "[]"):
            shown = subprocess.run([*brain_cmd, "show", run["run_id"], "--json"],
                                   capture_output=True, text=True, cwd=cwd, timeout=30)
            steps = {s["name"]: s for s in json.loads(shown.stdout)["steps"]}
            if steps[step]["status"] == "waiting":
                return str(run["run_id"])
        time.sleep(0.2)
    raise AssertionError(f"step {step!r} never waited")


def test_the_deploy_example_is_approved_and_signalled_from_a_second_terminal(
        brain_cmd: list[str], tmp_path: Path) -> None:
    """docs/waiting.md's walk-through: `brain run` waits in the foreground and says how to
    decide; `brain approve` and `brain signal` (a second terminal) end its waits."""
    example = REPO / "examples" / "approve_deploy.py"
    run = subprocess.Popen([*brain_cmd, "run", str(example), "--header", "X-Commit: 4f2a9c1",
                            "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, cwd=tmp_path)
    try:
        run_id = _when_step_waits(brain_cmd, tmp_path, "go")
        approve = subprocess.run([*brain_cmd, "approve", run_id[:8], "go", "--comment",
                                  "looks right"], capture_output=True, text=True, cwd=tmp_path,
                                 timeout=30)
        assert approve.returncode == 0, approve.stderr
        assert _when_step_waits(brain_cmd, tmp_path, "ci") == run_id   # after the settle sleep
        signal = subprocess.run([*brain_cmd, "signal", "ci-finished", "--key", "4f2a9c1",
                                 "--body", '{"passed": true}', "--json"],
                                capture_output=True, text=True, cwd=tmp_path, timeout=30)
        assert json.loads(signal.stdout) == {"resumed": [{"run_id": run_id, "step": "ci"}]}
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, err
    assert f"decide with `brain approve {run_id} go` (or --reject)" in err
    assert "send it with `brain signal ci-finished --key 4f2a9c1 --body TEXT`" in err
    result = json.loads(out)
    assert result["status"] == "succeeded", result
    steps = {s["name"]: s for s in result["steps"]}
    assert [s["status"] for s in result["steps"]] == ["succeeded"] * 7
    assert steps["go"]["decision"] | {"at": None} == {"approved": True, "comment": "looks right",
                                                     "by": "cli", "at": None}
    assert steps["report"]["output"] == 'plan applied; CI said: {"passed": true}'


def readme_first_python_block() -> str:
    """The first ```python block of README.md, as written."""
    found = re.search(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    assert found is not None
    return found.group(1)


def test_the_readmes_first_example_runs_as_written(brain_cmd: list[str], tmp_path: Path,
                                                    chat_server: FakeChatServer) -> None:
    """A newcomer's first try: the README's first block, saved as a file beside the MCP
    server it names (the layout of examples/), runs with `brain run` to success; only the
    LLM endpoint is a stand-in."""
    block = readme_first_python_block()
    assert block in (REPO / "examples" / "notes_digest.py").read_text()  # the shipped file
    (tmp_path / "notes_digest.py").write_text(block)
    shutil.copytree(REPO / "examples" / "servers", tmp_path / "servers")
    env = dict(os.environ, LLM_BASE_URL=chat_server.url, LLM_MODEL="fake-model")
    proc = subprocess.run([*brain_cmd, "run", "notes_digest.py", "--body", "db outage", "--json"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["status"] == "succeeded", run
    steps = {s["name"]: s for s in run["steps"]}
    # The real MCP server answered: the two notes about a db outage, best first.
    recalled = steps["recall"]["output"].splitlines()
    assert [line.split(":")[0] for line in recalled] == ["db outage, 3 Nov", "db outage follow-up"]
    prompts = [r.json["messages"][-1]["content"] for r in chat_server.requests]
    assert f"Two sentences: {steps['recall']['output']}" in prompts
    assert (tmp_path / "digest.md").read_text() == (
        "# A short summary.\nA short summary.\n\nA short summary.\n")
