"""Logs (SPEC §14): ``brain serve`` writes one line per run start and end and per step
failure, with the run id, the workflow and the step, as text or as JSON
(``BRAIN_LOG_FORMAT``); a secret never reaches them."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sqlite3
import sys
import unicodedata
from collections.abc import Iterator
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

    @step
    def noisy(key: str) -> str:
        # What else a process prints: Python warnings, prints to stdout and stderr, an
        # exception no thread caught, a logger with a strange name.
        import sys
        import threading
        import warnings

        warnings.warn("warned " + key + "\\nFAKE 2026-11-30 INFO brain.runs: forged")
        print("hello\\nworld")
        print("printed " + key, file=sys.stderr)
        def boom():
            raise RuntimeError("thread boom " + key + "\\nsecond line")
        thread = threading.Thread(target=boom)
        thread.start()
        thread.join()
        logging.getLogger("name-" + key + "\\nFAKE").warning("odd logger")
        return "done"

    @workflow
    def everything():
        noisy(secret("API_TOKEN"))

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


def _serve_and_run(tmp_path: Path, log_format: str,
                   more: tuple[str, ...] = ()) -> tuple[str, str, str]:
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
        for name in more:
            run_id = server.client.post(f"/api/workflows/{name}/runs", json={}).json()["run_id"]
            assert server.wait_run(run_id)["status"] == "succeeded"
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


def _step_log(tmp_path: Path, step: str) -> list[tuple[str, str]]:
    """``(stream, text)`` of a step's stored log lines, read from the server's database."""
    with contextlib.closing(sqlite3.connect(tmp_path / "brain.db")) as db:
        rows = db.execute("SELECT stream, text FROM brain_step_logs WHERE step = ? "
                          "ORDER BY seq", (step,)).fetchall()
    return [(str(stream), str(text)) for stream, text in rows]


def test_json_lines_carry_the_run_workflow_and_step(tmp_path: Path) -> None:
    stderr, ok, bad = _serve_and_run(tmp_path, "json", more=("everything",))
    stdout = (tmp_path / "serve.stdout").read_text()
    lines = [json.loads(line) for line in (stderr + stdout).splitlines() if line.strip()]
    for line in lines:  # strict UTF-8 too
        json.dumps(line, ensure_ascii=False).encode("utf-8")
    by_logger = {}
    for line in lines:
        by_logger.setdefault(line["logger"], []).append(line["message"])
    assert "some.library" in by_logger  # every logger, as JSON
    assert any("warned ***" in m for m in by_logger["py.warnings"])
    # A step's prints go to its own log (SPEC §20), not the server's
    assert "stdout" not in by_logger and "stderr" not in by_logger
    logged = _step_log(tmp_path, "noisy")
    assert [line for line in logged if line[0] != "log"] == [
        ("stdout", "hello"), ("stdout", "world"), ("stderr", "printed ***")]
    assert ("log", "WARNING name-***") in [(s, t[:16]) for s, t in logged]  # its logging too
    assert not any(TOKEN in text for _, text in logged)
    assert any(m.startswith("uncaught exception in thread") and m.endswith("(boom)")
               for m in by_logger["brain.server"])
    assert any(name.startswith("name-***") for name in by_logger)
    assert TOKEN not in stdout
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
    stderr, ok, bad = _serve_and_run(tmp_path, "text", more=("everything",))
    assert (tmp_path / "serve.stdout").read_text() == ""  # prints are records too
    # A step's prints are in its own log (SPEC §20), not the server's
    assert "hello" not in stderr and "printed ***" not in stderr
    assert ("stdout", "hello") in _step_log(tmp_path, "noisy")
    stamp = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")
    for line in stderr.splitlines():  # a record's line, a traceback's, or the command's own
        assert stamp.match(line) or line.startswith("    ") or line.startswith(
            ("The Brain: ", "stopping: ", "stopped")), line
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


# Secrets with anything inside, tabs, newlines and spaces too (a PEM key, a pasted token).
SECRET = st.text(st.characters(blacklist_categories=["Cs"]), min_size=8,
                 max_size=40).filter(lambda s: s.strip() == s and len(s) >= 8)


@settings(max_examples=300, deadline=None)
@given(before=st.text(), secret=SECRET, after=st.text(), step=st.text(), name=st.text(),
       level=st.text(min_size=1))
def test_any_record_is_one_line_of_storable_text_without_the_secret(
        before: str, secret: str, after: str, step: str, name: str, level: str) -> None:
    """Whatever a record holds (its message, a run's field, the logger's name, a level's
    name, an exception): one JSON line, or one text line plus indented traceback lines;
    strict UTF-8; no known secret."""
    remember(secret)
    message = before + secret + after
    try:
        raise RuntimeError(before + secret + "\n2026-11-30 00:00:00,000 INFO brain.runs: x")
    except RuntimeError:
        exc_info = sys.exc_info()
    for with_exception in (False, True):
        record = _record(message, name=name or "root", step=step)
        record.levelname = level
        record.exc_info = exc_info if with_exception else None
        line = JsonFormatter().format(record)
        assert "\n" not in line and secret not in line
        for value in json.loads(line).values():  # strict UTF-8: no lone surrogate escapes
            value.encode("utf-8")
            assert secret not in value
        record.exc_text = None
        text = TextFormatter().format(record)
        assert secret not in text
        text.encode("utf-8")
        first, *rest = text.split("\n")
        assert all(line.startswith("    ") for line in rest)  # only a traceback, indented
        assert bool(rest) == with_exception
        for part in (first, *rest):
            assert not any(unicodedata.category(c) == "Cc" and c != "\t" for c in part)
            assert "\u2028" not in part and "\u2029" not in part


def test_an_error_before_serving_is_a_json_line_too(tmp_path: Path) -> None:
    import subprocess

    env = clean_env(tmp_path / "brain.db", {"BRAIN_LOG_FORMAT": "json"})
    proc = subprocess.run([*brain_argv(), "serve", str(tmp_path / "missing"), "--port", "0"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    error = json.loads(line)
    assert error["level"] == "ERROR" and "missing" in error["message"]


@contextlib.contextmanager
def _json_lines_of(name: str) -> Iterator[list[str]]:
    """The JSON lines logger ``name`` writes within the block (from INFO)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(JsonFormatter().format(record))

    logger = logging.getLogger(name)
    logger.handlers[:] = [keep := Keep()]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield lines
    finally:
        logger.removeHandler(keep)


@settings(max_examples=200, deadline=None)
@given(secret=SECRET, before=st.text(), after=st.text())
def test_what_a_step_prints_is_one_record_per_print_without_the_secret(
        secret: str, before: str, after: str) -> None:
    from brain.cli.logs import _LinesToLog

    remember(secret)
    with _json_lines_of("test-prints") as lines:
        stream = _LinesToLog("test-prints", logging.WARNING, 2)
        print(before + secret + after, file=stream)
        print("second", file=stream, end="")
        stream.flush()
    assert len(lines) == 2 if (before + secret + after).strip() else len(lines) == 1
    for line in lines:
        assert "\n" not in line and secret not in json.loads(line)["message"]
    assert json.loads(lines[-1])["message"] == "second"


def test_a_long_unended_print_is_cut_without_splitting_a_secret() -> None:
    from brain.cli.logs import _HOLD_AT_MOST, _LinesToLog

    secret = "Sekr3t-VALUE-0123456789"
    remember(secret)
    with _json_lines_of("test-long-prints") as lines:
        for split in range(1, len(secret)):
            stream = _LinesToLog("test-long-prints", logging.INFO, 1)
            stream.write("a" * (_HOLD_AT_MOST - split) + secret[:split])
            stream.write(secret[split:] + "\n")
    messages = [json.loads(line)["message"] for line in lines]
    assert len(messages) == 2 * (len(secret) - 1)  # each long print: its start, then its end
    shown = "\n".join(messages)
    for size in range(8, len(secret) + 1):
        assert secret[:size] not in shown and secret[-size:] not in shown
