"""The shipped examples run, as a user would run them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs_to_success(path: Path, brain_cmd: list[str], tmp_path: Path) -> None:
    proc = subprocess.run([*brain_cmd, "run", str(path), "--json"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["status"] == "succeeded"
    assert all(step["status"] == "succeeded" for step in run["steps"])


def test_hello_greets_with_the_first_steps_output(brain_cmd: list[str], tmp_path: Path) -> None:
    hello = EXAMPLES[0].parent / "hello.py"
    proc = subprocess.run([*brain_cmd, "run", str(hello)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "hello, world!"
