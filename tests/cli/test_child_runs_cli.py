"""Child runs from the command line (SPEC §22): ``brain run`` executes a parent's children
in its own process; ``brain runs --parent ID`` lists them; ``brain show`` links both ways."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

FLOWS = '''
from brain import shell, workflow


@workflow
def greet(name: str) -> str:
    return shell("hello", argv=["echo", f"hello {name}"])


@workflow
def host():
    got = greet(name="ada")
    shell("say", argv=["echo", f"{got}!"])
'''


def brain(cmd: list[str], db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BRAIN_DATABASE_URL": f"sqlite:///{db}"}
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120)


def test_runs_parent_and_show_link_both_ways(tmp_path: Path, brain_cmd: list[str]) -> None:
    flows = tmp_path / "flows.py"
    flows.write_text(FLOWS)
    db = tmp_path / "runs.db"
    ran = brain(brain_cmd, db, "run", f"{flows}:host", "--json", "-q")
    assert ran.returncode == 0, ran.stderr
    parent = json.loads(ran.stdout)
    assert parent["status"] == "succeeded"
    steps = {s["name"]: s for s in parent["steps"]}
    assert steps["say"]["output"] == "hello ada!"
    child_id = steps["greet"]["waiting_for"]["run_id"]

    listed = brain(brain_cmd, db, "runs", "--parent", parent["run_id"][:10], "--json")
    assert listed.returncode == 0, listed.stderr
    children = json.loads(listed.stdout)
    assert [c["run_id"] for c in children] == [child_id]
    assert children[0]["parent"] == {"run_id": parent["run_id"], "step": "greet"}

    shown_child = brain(brain_cmd, db, "show", child_id)
    assert shown_child.returncode == 0, shown_child.stderr
    assert f"child of run {parent['run_id']} (step greet)" in shown_child.stdout
    shown_parent = brain(brain_cmd, db, "show", parent["run_id"])
    assert f"step greet runs child run {child_id} of greet (succeeded)" in shown_parent.stdout

    none = brain(brain_cmd, db, "runs", "--parent", child_id)
    assert none.returncode == 0 and "no runs matching --parent" in none.stderr
