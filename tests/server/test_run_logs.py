"""Logs (SPEC §14): ``brain serve`` writes one line per run start and end and per step
failure, with the run id, the workflow and the step, as text or as JSON
(``BRAIN_LOG_FORMAT``); a secret never reaches them."""

from __future__ import annotations

import json
import logging
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from serve_support import BrainServer, brain_argv, clean_env
from support import write_source

from brain._secrets import remember
from brain.cli.logs import JsonFormatter, TextFormatter

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

TOKEN = "s3cr3t-Value-that-must-never-be-logged"

FLOWS = """
    import logging

    from brain import secret, shell, step, workflow

    @step
    def chatty(key: str) -> str:
        # A library that logs what it was given, on a logger of its own.
        logging.getLogger("some.library").error("connecting with %s\\r\\nforged line", key)
        return "done"

    @workflow
    def library():
        chatty(secret("API_TOKEN"))

    @workflow
    def flaky():
        shell("wobble", command="exit 4", retries=1, retry_delay_seconds=0.1)

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
        chatty = server.client.post("/api/workflows/library/runs", json={}).json()["run_id"]
        flaky = server.client.post("/api/workflows/flaky/runs", json={}).json()["run_id"]
        assert server.wait_run(ok)["status"] == "succeeded"
        assert server.wait_run(bad)["status"] == "failed"
        assert server.wait_run(chatty)["status"] == "succeeded"
        assert server.wait_run(flaky)["status"] == "failed"
    finally:
        server.stop()
    stderr = server.stderr()
    assert TOKEN not in stderr
    assert "connecting with ***" in stderr  # the library's line, scrubbed
    assert "\r" not in stderr and "\nforged line" not in stderr
    # Each try of a retried step that fails is a line.
    assert stderr.count(f"run {flaky} of flaky: step 'wobble' failed (try 1, retrying)") == 1
    assert stderr.count(f"run {flaky} of flaky: step 'wobble' failed (try 2)") == 1
    return stderr, ok, bad


def test_json_lines_carry_the_run_workflow_and_step(tmp_path: Path) -> None:
    stderr, ok, bad = _serve_and_run(tmp_path, "json")
    lines = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert any(line["logger"] == "some.library" for line in lines)  # every logger, as JSON
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
    run_lines = [line for line in stderr.splitlines() if " brain.runs: " in line]
    assert sum(ok in line for line in run_lines) == 2
    assert sum(bad in line for line in run_lines) == 3
    assert any(f"run {ok} of fine succeeded in " in line for line in run_lines)
    assert any(f"run {bad} of broken: step 'boom' failed (try 1)" in line for line in run_lines)
    assert any(f"run {bad} of broken failed in " in line for line in run_lines)


def _record(message: str, name: str = "some.library", **fields: str) -> logging.LogRecord:
    record = logging.LogRecord(name, logging.ERROR, __file__, 1, "%s", (message,), None)
    record.__dict__.update(fields)
    return record


SECRET = st.text(st.characters(blacklist_categories=["Cs", "Cc", "Z"]), min_size=8,
                 max_size=40).filter(lambda s: s.strip() == s)


@settings(max_examples=300, deadline=None)
@given(before=st.text(), secret=SECRET, after=st.text(), step=st.text())
def test_any_message_is_one_line_of_storable_text_without_the_secret(
        before: str, secret: str, after: str, step: str) -> None:
    remember(secret)
    message = before + secret + after
    try:
        raise RuntimeError(secret)
    except RuntimeError:
        failing = _record(message, step=step)
        failing.exc_info = sys.exc_info()
    for record in (_record(message, step=step), failing):
        line = JsonFormatter().format(record)
        assert "\n" not in line and secret not in line
        parsed = json.loads(line)
        for value in parsed.values():  # strict UTF-8: no lone surrogate escapes
            value.encode("utf-8")
            assert secret not in value
        text = TextFormatter().format(_record(message, step=step))
        assert secret not in text
        assert not any(unicodedata.category(c) == "Cc" and c != "\t" for c in text)
        assert "\u2028" not in text and "\u2029" not in text
        text.encode("utf-8")
