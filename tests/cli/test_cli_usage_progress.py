"""What steps spent and how far they got, on the command line (SPEC §17, §18): ``brain show``
prints each step's tokens, the run's tokens in all and a step's latest progress; ``brain
run`` prints a progress report as a line of its step while the step runs (``STEP | progress
3/10: copying``), and neither ``-q`` nor ``--json`` does.

A ``@step`` function stands in for the MCP and LLM steps here: it reports progress and
counts tokens through its step's log, as those executors do (their own end-to-end tests
are theirs).
"""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

from support import write_source

from brain._clock import utcnow
from brain.results import LogBatch, StepStatus, TriggerData
from brain.store import Store

FLOWS = """
    import pathlib, time
    from brain import step, workflow
    from brain.executors.capture import current_log

    @step
    def copy() -> str:
        log = current_log.get()
        log.count_usage(120, 7)
        log.progress(3, 10, "copying")
        deadline = time.monotonic() + 60
        while not pathlib.Path("go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        log.progress(10, 10, "done")
        return "copied"

    @workflow
    def copying():
        copy()
"""


def brain(cmd: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def _read_lines(stream: object, into: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line.rstrip("\n"))
    into.put(None)


def test_brain_run_prints_a_steps_progress_while_it_runs(tmp_path: Path,
                                                        brain_cmd: list[str]) -> None:
    write_source(tmp_path, "flows.py", FLOWS)
    proc = subprocess.Popen([*brain_cmd, "run", "flows.py"], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_read_lines, args=(proc.stderr, lines), daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while "copy | progress 3/10: copying" not in seen:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert line is not None, "brain run ended before the progress line:\n" + "\n".join(seen)
            seen.append(line)
        # The line came while the step still runs: it waits for the file made only now.
        assert proc.poll() is None
        assert not any("copy succeeded" in line for line in seen), seen
        (tmp_path / "go").touch()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    while (line := lines.get(timeout=10)) is not None:  # the rest, up to the end of stderr
        seen.append(line)
    assert proc.stdout is not None and proc.stdout.read() == "copied\n"
    assert "copy | progress 10/10: done" in seen
    ended = next(i for i, line in enumerate(seen) if "copy succeeded" in line)
    assert seen.index("copy | progress 10/10: done") < ended, seen

    quiet = brain(brain_cmd, "run", "flows.py", "-q", cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert "copy | " not in quiet.stderr and "copy succeeded" in quiet.stderr

    as_json = brain(brain_cmd, "run", "flows.py", "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert "copy | " not in as_json.stderr and "copy succeeded" not in as_json.stderr
    [step] = json.loads(as_json.stdout)["steps"]
    assert step["usage"] == {"prompt_tokens": 120, "completion_tokens": 7}
    assert step["progress"] == {"progress": 10, "total": 10, "message": "done"}

    show = brain(brain_cmd, "show", json.loads(as_json.stdout)["run_id"][:12], cwd=tmp_path)
    assert show.returncode == 0, show.stderr
    out = show.stdout.splitlines()
    assert "copy: tokens 120 prompt + 7 completion" in out
    assert "copy: progress 10/10: done" in out
    assert out[-1] == "tokens in all: 120 prompt + 7 completion"


async def _record_run(url: str) -> tuple[str, str]:
    """Two runs recorded as executors would have: one with two LLM steps (one failed) and
    two MCP steps (one running), one with neither usage nor progress."""
    async with Store(url) as store:
        spent = uuid.uuid4().hex
        await store.create_run(run_id=spent, workflow="report", definition_hash="h",
                               trigger=TriggerData(), step_rows=[
                                   ("ask", "llm"), ("retry", "llm"), ("copy", "mcp_tool"),
                                   ("count", "mcp_tool")])
        now = utcnow()
        started = now - timedelta(seconds=3)
        await store.step_finished(spent, "ask", status=StepStatus.SUCCEEDED, tries=1,
                                  ended_at=now, started_at=started, inputs={"model": "m"},
                                  output="yes", usage={"prompt_tokens": 1200,
                                                       "completion_tokens": 7})
        await store.step_finished(spent, "retry", status=StepStatus.FAILED, tries=3,
                                  ended_at=now, started_at=started, inputs={"model": "m"},
                                  error="answer does not match the schema: x",
                                  usage={"prompt_tokens": 300, "completion_tokens": 40})
        await store.step_running(spent, "copy", inputs={}, tries=1, started_at=started)
        await store.append_logs(spent, [
            ("copy", LogBatch(progress={"progress": 3, "total": 10,
                                        "message": "copying [bold]a[/bold]"})),
            ("count", LogBatch(progress={"progress": 5, "total": None, "message": None}))])
        plain = uuid.uuid4().hex
        await store.create_run(run_id=plain, workflow="plain", definition_hash="h",
                               trigger=TriggerData(), step_rows=[("echo", "shell")])
        await store.step_finished(plain, "echo", status=StepStatus.SUCCEEDED, tries=1,
                                  ended_at=now, started_at=started, inputs={}, output="hi")
    return spent, plain


def test_show_prints_each_steps_tokens_the_total_and_the_latest_progress(
        tmp_path: Path, db_url: str, brain_cmd: list[str]) -> None:
    spent, plain = asyncio.run(_record_run(db_url))

    show = brain(brain_cmd, "show", spent, cwd=tmp_path)
    assert show.returncode == 0, show.stderr
    out = show.stdout.splitlines()
    figures = out[out.index("ask: tokens 1,200 prompt + 7 completion"):]
    assert figures == ["ask: tokens 1,200 prompt + 7 completion",
                       "retry: tokens 300 prompt + 40 completion",  # a failed step's tries count
                       "copy: progress 3/10: copying [bold]a[/bold]",  # text, not markup
                       "count: progress 5",
                       "tokens in all: 1,500 prompt + 47 completion"]

    as_json = json.loads(brain(brain_cmd, "show", spent, "--json", cwd=tmp_path).stdout)
    steps = {s["name"]: s for s in as_json["steps"]}
    assert steps["retry"]["usage"] == {"prompt_tokens": 300, "completion_tokens": 40}
    assert steps["copy"]["status"] == "running"
    assert steps["copy"]["progress"] == {"progress": 3, "total": 10,
                                         "message": "copying [bold]a[/bold]"}
    assert steps["ask"]["progress"] is None and steps["copy"]["usage"] is None

    nothing = brain(brain_cmd, "show", plain, cwd=tmp_path)
    assert nothing.returncode == 0, nothing.stderr
    assert "tokens" not in nothing.stdout and "progress" not in nothing.stdout
