"""What the CLI says of a run, as a new user reads it (every command a real ``brain``
process on a real SQLite file): a try's lines before the notice that it will be retried,
stderr lines marked ``STEP ! TEXT``, ``brain show`` saying why a step was skipped, since
when a run waits, which run a retry retries and a JSON output in one line, and ``brain
logs`` saying when there is nothing to print."""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
from support import wait_for, write_source

FLOWS = """
    import json

    from brain import approval, shell, step, workflow

    @step
    def data() -> str:
        return json.dumps({"a": 1, "b": [1, 2], "c": "x" * 100}, indent=2)

    @workflow
    def mixed():
        data()
        shell("build", command="echo out; echo err 1>&2; exit 1")
        shell("test", argv=["echo", "never"])

    @workflow
    def flaky():
        shell("flaky", command="echo printed by a try; exit 1", retries=1,
              retry_delay_seconds=0)

    @workflow
    def quiet():
        shell("nothing", argv=["true"])

    @workflow
    def gate():
        shell("before", argv=["true"])
        approval("go", prompt="ship it?")
"""


def brain(brain_cmd: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real ``brain`` command, on this test's database."""
    proc = subprocess.run([*brain_cmd, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**os.environ, "COLUMNS": "200"})
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def run_id_of(proc: subprocess.CompletedProcess[str]) -> str:
    found = re.search(r"\(brain show ([0-9a-f]{12})\)", proc.stderr)
    assert found, proc.stderr
    return found.group(1)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_source(tmp_path, "flows.py", FLOWS)
    return tmp_path


def test_a_tries_lines_come_before_the_notice_that_it_is_retried(folder: Path,
                                                                 brain_cmd: list[str]) -> None:
    ran = brain(brain_cmd, "run", "flows.py:flaky", cwd=folder)
    assert ran.returncode == 1
    lines = ran.stderr.splitlines()
    printed = [i for i, line in enumerate(lines) if line == "flaky | printed by a try"]
    notice = [i for i, line in enumerate(lines) if line.startswith("  ↻ flaky")]
    assert len(printed) == 2 and len(notice) == 1, ran.stderr
    assert printed[0] < notice[0] < printed[1], ran.stderr


def test_stderr_lines_are_marked_in_run_and_logs(folder: Path, brain_cmd: list[str]) -> None:
    ran = brain(brain_cmd, "run", "flows.py:mixed", cwd=folder)
    assert ran.returncode == 1
    assert "build | out" in ran.stderr.splitlines()  # stdout's lines as they were
    assert "build ! err" in ran.stderr.splitlines()
    run_id = run_id_of(ran)

    logs = brain(brain_cmd, "logs", run_id, cwd=folder)
    assert logs.stdout.splitlines() == ["build | out", "build ! err"]


def test_show_says_why_a_step_was_skipped_what_a_retry_retries_and_a_json_output(
        folder: Path, brain_cmd: list[str]) -> None:
    ran = brain(brain_cmd, "run", "flows.py:mixed", cwd=folder)
    assert ran.returncode == 1
    run_id = run_id_of(ran)
    show = brain(brain_cmd, "show", run_id, cwd=folder).stdout
    test_row = next(line for line in show.splitlines() if line.startswith("test "))
    assert test_row.endswith("skipped: step 'build' failed")
    data_row = next(line for line in show.splitlines() if line.startswith("data "))
    one_line = json.dumps({"a": 1, "b": [1, 2], "c": "x" * 100}, separators=(", ", ": "))
    assert data_row.endswith(f"  {one_line[:60]}…")  # not just `{…`: the JSON, compacted

    retried = brain(brain_cmd, "retry", run_id, cwd=folder)
    assert retried.returncode == 0, retried.stderr
    new_id = re.search(r"queued run ([0-9a-f]+)", retried.stderr)
    assert new_id, retried.stderr
    again = brain(brain_cmd, "show", new_id.group(1), cwd=folder).stdout
    full_id = json.loads(brain(brain_cmd, "show", run_id, "--json", cwd=folder).stdout)["run_id"]
    assert f"retry of run {full_id}" in again.splitlines()


def test_logs_says_when_a_run_or_a_step_printed_nothing(folder: Path,
                                                        brain_cmd: list[str]) -> None:
    ran = brain(brain_cmd, "run", "flows.py:quiet", cwd=folder)
    assert ran.returncode == 0
    run_id = json.loads(brain(brain_cmd, "runs", "--json", cwd=folder).stdout)[0]["run_id"]
    every = brain(brain_cmd, "logs", run_id[:12], cwd=folder)
    assert every.returncode == 0 and every.stdout == ""
    assert f"no log lines for run {run_id}" in every.stderr
    one = brain(brain_cmd, "logs", run_id[:12], "nothing", cwd=folder)
    assert one.stdout == ""
    assert f"no log lines for step 'nothing' of run {run_id}" in one.stderr


def test_show_says_since_when_a_run_waits(folder: Path, brain_cmd: list[str]) -> None:
    with (folder / "run.err").open("w") as err:
        proc = subprocess.Popen([*brain_cmd, "run", "flows.py:gate"], cwd=folder,
                                stdout=subprocess.DEVNULL, stderr=err, env=dict(os.environ))
    try:
        def waiting() -> dict | None:
            assert proc.poll() is None, (folder / "run.err").read_text()
            listed = brain(brain_cmd, "runs", "--json", "--status", "waiting", cwd=folder)
            runs = json.loads(listed.stdout or "[]")
            return runs[0] if runs else None

        listed = wait_for(waiting, 60, "the run waiting for its approval")
        run = json.loads(brain(brain_cmd, "show", listed["run_id"], "--json", cwd=folder).stdout)
        shown = brain(brain_cmd, "show", run["run_id"], cwd=folder).stdout
        ends = [s["ended_at"] for s in run["steps"] if s["status"] == "succeeded"]
        starts = [s["started_at"] for s in run["steps"] if s["status"] == "waiting"]
        since = max(datetime.fromisoformat(t) for t in ends + starts)
        assert f"waiting since {since.astimezone():%Y-%m-%d %H:%M:%S}\n" in shown, shown
        assert "ended" not in shown.splitlines()[2]
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_runs_output_on_a_terminal_is_shown_and_into_a_pipe_is_data(
        tmp_path: Path, brain_cmd: list[str]) -> None:
    import pty

    write_source(tmp_path, "flows.py", """
        from brain import shell, workflow

        @workflow
        def titled():
            shell("say", argv=["printf", "\\\\033]0;PWNED\\\\007done"])
    """)
    piped = brain(brain_cmd, "run", "flows.py", cwd=tmp_path)
    assert piped.stdout == "\x1b]0;PWNED\x07done\n"  # data: as the step wrote it
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([*brain_cmd, "run", "flows.py"], cwd=tmp_path, stdin=follower,
                                stdout=follower, stderr=subprocess.DEVNULL, env=dict(os.environ))
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal's other end closed: the command has ended
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(leader)
    assert b"\x1b" not in seen and b"\x07" not in seen
    assert "\\x1b]0;PWNED\\x07done" in seen.decode()
