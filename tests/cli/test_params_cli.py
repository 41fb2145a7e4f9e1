"""Typed parameters through ``brain run`` (``-p NAME=VALUE``, ``--params JSON``), ``brain
show`` and ``brain check --json``, as real subprocesses on a real SQLite file (the rule
that reads a ``-p`` value is checked in test_params_rule.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from support import write_source

DEPLOY = """
    from typing import Literal

    from pydantic import BaseModel

    from brain import shell, step, workflow


    class Plan(BaseModel):
        service: str
        replicas: int


    @step
    def plan(service: str, replicas: int) -> Plan:
        return Plan(service=service, replicas=replicas)


    @workflow
    def deploy(service: str, version: str = "latest", replicas: int = 1,
               env: Literal["staging", "prod"] = "staging", dry_run: bool = False,
               tags: list[str] = []) -> Plan:
        \"\"\"Deploy SERVICE at VERSION.\"\"\"
        shell("say", argv=["echo", f"{service}@{version} to {env} dry={dry_run} tags={tags}"])
        return plan(service, replicas)
"""

def brain(brain_cmd: list[str], *args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """Run the real ``brain`` command (the environment carries this test's database)."""
    return subprocess.run([*brain_cmd, *map(str, args)], capture_output=True, text=True,
                          timeout=60, check=False)


def runs_json(brain_cmd: list[str]) -> list[dict[str, Any]]:
    proc = brain(brain_cmd, "runs", "--json")
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout))


def nothing_recorded(brain_cmd: list[str]) -> bool:
    """Not even a database was created: ``brain runs`` (which creates none) says so, exit 2."""
    proc = brain(brain_cmd, "runs", "--json")
    return proc.returncode == 2 and "no database at" in proc.stderr and proc.stdout == ""


# --- brain run, brain show, brain check -----------------------------------------------------------


def test_run_with_p_and_params_prints_the_output_last(tmp_path: Path,
                                                      brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "deploy.py", DEPLOY)
    proc = brain(brain_cmd, "run", flow, "--params", '{"service": "web", "replicas": 5}',
                 "-p", "service=api", "-p", "dry_run=true", "-p", "version=1.10",
                 "-p", 'tags=["a", "b"]', "-q")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"service": "api", "replicas": 5}  # the output, last
    run = runs_json(brain_cmd)[0]
    assert run["params"] == {"service": "api", "version": "1.10", "replicas": 5,
                             "env": "staging", "dry_run": True, "tags": ["a", "b"]}
    assert run["output"] == {"service": "api", "replicas": 5}
    show = brain(brain_cmd, "show", run["run_id"])
    assert show.returncode == 0, show.stderr
    assert '"version": "1.10"' in show.stdout and '"dry_run": true' in show.stdout
    assert "output:" in show.stdout and '"replicas": 5' in show.stdout
    shown = json.loads(brain(brain_cmd, "show", run["run_id"], "--json").stdout)
    assert shown["params"]["env"] == "staging" and shown["output"]["service"] == "api"


def test_run_json_carries_params_and_output(tmp_path: Path, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "deploy.py", DEPLOY)
    proc = brain(brain_cmd, "run", flow, "-p", "service=db", "-p", "env=prod", "--json")
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["params"]["service"] == "db" and run["params"]["env"] == "prod"
    assert run["output"] == {"service": "db", "replicas": 1}


def test_invalid_params_exit_2_one_line_per_field_nothing_stored(tmp_path: Path,
                                                                 brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "deploy.py", DEPLOY)
    proc = brain(brain_cmd, "run", flow, "-p", "replicas=many", "-p", "env=qa")
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 3, proc.stderr  # service missing, replicas not an int, env not allowed
    assert any(ln.startswith("error: service") for ln in lines), proc.stderr
    assert any(ln.startswith("error: replicas") for ln in lines), proc.stderr
    assert any(ln.startswith("error: env") for ln in lines), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert nothing_recorded(brain_cmd)


def test_a_bad_params_option_is_a_usage_error(tmp_path: Path, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "deploy.py", DEPLOY)
    proc = brain(brain_cmd, "run", flow, "--params", "[1, 2]")
    assert proc.returncode == 2 and "--params must be a JSON object" in proc.stderr
    assert nothing_recorded(brain_cmd)


def test_check_json_has_each_workflows_schemas(tmp_path: Path, brain_cmd: list[str]) -> None:
    write_source(tmp_path, "deploy.py", DEPLOY)
    write_source(tmp_path, "plain.py", """
        from brain import shell, workflow

        @workflow
        def plain():
            shell("a", command="echo a")
    """)
    proc = brain(brain_cmd, "check", tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    found = {w["name"]: w for w in json.loads(proc.stdout)}
    assert set(found) == {"deploy", "plain"}
    deploy = found["deploy"]
    assert deploy["description"] == "Deploy SERVICE at VERSION."
    assert deploy["params_schema"]["required"] == ["service"]
    props = deploy["params_schema"]["properties"]
    assert props["replicas"]["type"] == "integer" and props["env"]["enum"] == ["staging", "prod"]
    assert set(deploy["output_schema"]["properties"]) == {"service", "replicas"}
    assert found["plain"]["params_schema"].get("properties", {}) == {}
    assert found["plain"]["output_schema"] is None


def test_check_json_still_says_what_fails_on_stderr(tmp_path: Path, brain_cmd: list[str]) -> None:
    write_source(tmp_path, "deploy.py", DEPLOY)
    (tmp_path / "broken.py").write_text("from brain import workflow\n\n@workflow\ndef b(:\n")
    proc = brain(brain_cmd, "check", tmp_path, "--json")
    assert proc.returncode == 2 and "SyntaxError" in proc.stderr
    assert [w["name"] for w in json.loads(proc.stdout)] == ["deploy"]


def test_a_webhook_run_by_hand_takes_params_from_its_json_body(tmp_path: Path,
                                                               brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "deploy.py", DEPLOY)
    body = '{"service": "api", "replicas": 4, "sender": "ci"}'
    proc = brain(brain_cmd, "run", flow, "--event", "webhook", "--body", body,
                 "-p", "replicas=2", "--json")
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["params"]["service"] == "api" and run["params"]["replicas"] == 2  # -p wins
    assert run["trigger"]["body"] == body
    plain = brain(brain_cmd, "run", flow, "--body", body, "--json")  # a manual run: no params
    assert plain.returncode == 2 and "service: Field required" in plain.stderr
