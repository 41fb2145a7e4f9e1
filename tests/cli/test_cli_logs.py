"""Reading what steps printed from the command line (SPEC §20): ``brain show`` beside a
failed step's error, ``brain logs`` for every step or one, and ``brain run``'s lines on
stderr (never in its ``--json``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support import write_source

FLOWS = """
    from brain import shell, step, workflow

    @step
    def greet() -> str:
        print("hello from a step")
        return "hi"

    @workflow
    def breaks():
        greet()
        shell("tests", command="echo collected 3 items; echo 'E assert 1 == 2' >&2; "
                               "printf 'esc \\\\033[31mred\\\\n'; echo FAILED test_x; exit 1")
"""


def brain(cmd: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_show_logs_and_run_say_what_a_failed_step_printed(tmp_path: Path,
                                                         brain_cmd: list[str]) -> None:
    write_source(tmp_path, "flows.py", FLOWS)
    run = brain(brain_cmd, "run", "flows.py", cwd=tmp_path)
    assert run.returncode == 1
    lines = run.stderr.splitlines()
    assert "greet | hello from a step" in lines
    assert "tests | collected 3 items" in lines and "tests ! E assert 1 == 2" in lines
    assert "tests | esc \\x1b[31mred" in lines  # a terminal's escape is shown, not obeyed
    assert "\x1b[31m" not in run.stderr

    as_json = brain(brain_cmd, "run", "flows.py", "--json", cwd=tmp_path)
    result = json.loads(as_json.stdout)
    assert "greet | " not in as_json.stderr  # --json: the result alone, no lines
    tests = next(s for s in result["steps"] if s["name"] == "tests")
    assert tests["output"] == "collected 3 items\nesc \x1b[31mred\nFAILED test_x"
    assert tests["stderr"] == "E assert 1 == 2\n"
    run_id = result["run_id"]

    show = brain(brain_cmd, "show", run_id[:10], cwd=tmp_path)
    assert show.returncode == 0, show.stderr
    out = show.stdout.splitlines()
    assert out.index("output of tests:") < out.index("  FAILED test_x") < out.index(
        "stderr of tests:")
    assert "  E assert 1 == 2" in out

    every = brain(brain_cmd, "logs", run_id, cwd=tmp_path)
    assert every.returncode == 0, every.stderr
    assert every.stdout.splitlines()[0] == "greet | hello from a step"
    assert {"tests | collected 3 items", "tests ! E assert 1 == 2",
            "tests | FAILED test_x"} <= set(every.stdout.splitlines())
    one = brain(brain_cmd, "logs", run_id, "greet", cwd=tmp_path)
    assert one.stdout == "greet | hello from a step\n"
    missing = brain(brain_cmd, "logs", run_id, "nope", cwd=tmp_path)
    assert missing.returncode == 2
    assert "has no step 'nope' (its steps: greet, tests)" in missing.stderr
    unknown = brain(brain_cmd, "logs", "ffffffff", cwd=tmp_path)
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
