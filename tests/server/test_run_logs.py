"""Logs (SPEC §14): ``brain serve`` writes one line per run start and end and per step
failure, with the run id, the workflow and the step, as text or as JSON
(``BRAIN_LOG_FORMAT``); a secret never reaches them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from serve_support import BrainServer, brain_argv, clean_env
from support import write_source

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

TOKEN = "s3cr3t-Value-that-must-never-be-logged"

FLOWS = """
    from brain import secret, shell, workflow

    @workflow
    def fine():
        shell("hi", argv=["echo", "hi"])

    @workflow
    def broken():
        shell("boom", command='echo "$TOKEN" >&2; echo "token $TOKEN is wrong"; exit 3',
              env={"TOKEN": secret("API_TOKEN")})
"""


def _serve_and_run(tmp_path: Path, log_format: str) -> tuple[str, str, str]:
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    env = clean_env(tmp_path / "brain.db", {"BRAIN_LOG_FORMAT": log_format, "API_TOKEN": TOKEN})
    server = BrainServer(brain_argv(), folder, tmp_path, env)
    try:
        server.wait_healthy()
        ok = server.client.post("/api/workflows/fine/runs", json={}).json()["run_id"]
        bad = server.client.post("/api/workflows/broken/runs", json={}).json()["run_id"]
        assert server.wait_run(ok)["status"] == "succeeded"
        assert server.wait_run(bad)["status"] == "failed"
    finally:
        server.stop()
    return server.stderr(), ok, bad


def test_json_lines_carry_the_run_workflow_and_step(tmp_path: Path) -> None:
    stderr, ok, bad = _serve_and_run(tmp_path, "json")
    assert TOKEN not in stderr
    lines = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    runs = [line for line in lines if line["logger"] == "brain.runs"]
    mine = {(line.get("run_id"), line.get("workflow"), line.get("step"), line.get("status"))
            for line in runs}
    assert (ok, "fine", None, None) in mine  # started
    assert (ok, "fine", None, "succeeded") in mine
    assert (bad, "broken", None, None) in mine
    assert (bad, "broken", "boom", None) in mine  # the step failure
    assert (bad, "broken", None, "failed") in mine
    assert len([r for r in runs if r["run_id"] == ok]) == 2  # start and end, nothing more
    assert len([r for r in runs if r["run_id"] == bad]) == 3
    failed_step = next(r for r in runs if r.get("step") == "boom")
    assert failed_step["level"] == "WARNING"
    assert "exit code 3" in failed_step["message"] and "***" in failed_step["message"]
    end = next(r for r in runs if r.get("status") == "failed")
    assert "step 'boom' failed" in end["message"]


def test_text_lines_name_the_run_and_are_one_per_event(tmp_path: Path) -> None:
    stderr, ok, bad = _serve_and_run(tmp_path, "text")
    assert TOKEN not in stderr
    run_lines = [line for line in stderr.splitlines() if " brain.runs: " in line]
    assert sum(ok in line for line in run_lines) == 2
    assert sum(bad in line for line in run_lines) == 3
    assert any(f"run {ok} of fine succeeded in " in line for line in run_lines)
    assert any(f"run {bad} of broken: step 'boom' failed (try 1)" in line for line in run_lines)
    assert any(f"run {bad} of broken failed in " in line for line in run_lines)
