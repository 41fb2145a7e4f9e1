"""SPEC §16 on the command line, every command a real subprocess on a real SQLite file:
``brain run`` waiting in the foreground (and Ctrl-C leaving the run waiting), ``brain
approve``, ``brain signal``, ``brain runs --status waiting``, ``brain show``, ``brain
cancel`` and a ``brain worker`` continuing a run nobody waits for any more."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import wait_for, write_source

SECONDS = 30.0

FLOWS = """
    from brain import approval, parallel, shell, trigger, wait_for, when, workflow

    @workflow
    def deploy():
        plan = shell("plan", argv=["echo", "3 to add"])
        ok = approval("go", prompt=f"Apply this plan?\\n\\n{plan}")
        shell("apply", argv=["echo", "applied"], when=ok)
        approval("later", prompt="and the other one?", when=~ok)
        shell("report", argv=["echo", f"go={ok}"])

    @workflow
    def ci():
        with parallel():
            keyed = wait_for("ci", signal="ci-finished", key=trigger.body)
            anyone = wait_for("any", signal="ci-finished")
        shell("report", argv=["echo", f"{keyed} | {anyone}"])
"""


def brain(brain_cmd: list[str], *args: str | os.PathLike[str],
          timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the real ``brain`` command on this test's database (BRAIN_DATABASE_URL)."""
    return subprocess.run([*brain_cmd, *map(str, args)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=timeout, check=False)


def brain_many(brain_cmd: list[str], *arglists: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Several independent ``brain`` commands at once (each a real process)."""
    procs = [subprocess.Popen([*brain_cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=dict(os.environ)) for args in arglists]
    done = []
    for args, proc in zip(arglists, procs, strict=True):
        out, err = proc.communicate(timeout=60)
        done.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
    return done


def one_line(text: str) -> str:
    """Text with every run of whitespace as one space (however a console wrapped it)."""
    return " ".join(text.split())


def clean(proc: subprocess.CompletedProcess[str]) -> str:
    """A command's output, checked to hold no traceback."""
    both = proc.stdout + proc.stderr
    assert "Traceback" not in both, both
    return one_line(both)


class Foreground:
    """``brain run`` in the background of the test, its output in files."""

    def __init__(self, brain_cmd: list[str], folder: Path, *args: str) -> None:
        self.out_file, self.err_file = folder / "run.stdout", folder / "run.stderr"
        with self.out_file.open("wb") as out, self.err_file.open("wb") as err:
            self.proc = subprocess.Popen([*brain_cmd, "run", *args], stdout=out, stderr=err,
                                         env=dict(os.environ), cwd=folder)

    def stdout(self) -> str:
        return self.out_file.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_file.read_text(errors="replace")

    def wait_stderr(self, pattern: str) -> re.Match[str]:
        """Poll (bounded) stderr until ``pattern`` matches it (whitespace made single)."""
        def seen() -> re.Match[str] | None:
            if self.proc.poll() is not None and not re.search(pattern, one_line(self.stderr())):
                raise AssertionError(f"brain run exited {self.proc.returncode}:\n"
                                     f"{self.stdout()}\n{self.stderr()}")
            return re.search(pattern, one_line(self.stderr()))

        return wait_for(seen, SECONDS, f"{pattern!r} on brain run's stderr")

    def ended(self) -> int:
        return self.proc.wait(timeout=SECONDS)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    return write_source(tmp_path, "flows.py", FLOWS)


@pytest.fixture
def foreground(brain_cmd: list[str], tmp_path: Path) -> Iterator[list[Foreground]]:
    started: list[Foreground] = []
    yield started
    for f in started:
        f.stop()


def run_in_foreground(brain_cmd: list[str], tmp_path: Path, started: list[Foreground],
                      *args: str) -> Foreground:
    f = Foreground(brain_cmd, tmp_path, *args)
    started.append(f)
    return f


def db_rows(tmp_path: Path, query: str, *params: object) -> list[tuple[object, ...]]:
    with sqlite3.connect(f"file:{tmp_path / 'brain.db'}?mode=ro", uri=True, timeout=5) as conn:
        return conn.execute(query, params).fetchall()


def run_status(tmp_path: Path, run_id: str) -> str:
    return str(db_rows(tmp_path, "SELECT status FROM brain_runs WHERE id = ?", run_id)[0][0])


def show_json(brain_cmd: list[str], run_id: str) -> dict:
    proc = brain(brain_cmd, "show", run_id, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


APPROVE_LINE = r"brain approve ([0-9a-f]{32}) go"


def test_brain_run_waits_for_brain_approve_in_the_foreground(
        tmp_path: Path, flows: Path, brain_cmd: list[str],
        foreground: list[Foreground]) -> None:
    run = run_in_foreground(brain_cmd, tmp_path, foreground, f"{flows}:deploy")
    run_id = run.wait_stderr(APPROVE_LINE).group(1)
    said = one_line(run.stderr())
    assert "waits for a decision in step 'go': 'Apply this plan? 3 to add'" in said
    assert f"`brain approve {run_id} go` (or --reject)" in said
    assert "brain approve" not in run.stdout()  # the live lines go to stderr

    listed, shown, later, plan, nosuch, norun = brain_many(
        brain_cmd, ["runs", "--status", "waiting", "--json"], ["show", run_id[:12]],
        ["approve", run_id, "later"], ["approve", run_id, "plan"],
        ["approve", run_id, "nosuch"], ["approve", "0" * 32, "go"])
    assert listed.returncode == 0, listed.stderr
    assert [(r["run_id"], r["status"]) for r in json.loads(listed.stdout)] == [(run_id, "waiting")]
    assert shown.returncode == 0, shown.stderr
    assert f"waiting: waits for a decision in step 'go': 'Apply this plan? 3 to add'; decide " \
           f"with `brain approve {run_id} go`" in clean(shown)
    # A step that is not waiting, or no approval, or no such step / run: clear, no traceback.
    assert later.returncode == 1
    assert "step 'later' of run" in clean(later) and "is not waiting for a decision (it is " \
                                                      "pending)" in clean(later)
    assert plan.returncode == 1
    assert "step 'plan' is a shell step, not an approval" in clean(plan)
    assert nosuch.returncode == 2
    assert "has no step 'nosuch'" in clean(nosuch)
    assert norun.returncode == 2
    assert f"no run '{'0' * 32}'" in clean(norun)
    assert run.proc.poll() is None  # none of that ended the wait

    approved = brain(brain_cmd, "approve", run_id[:12], "go", "--comment", "ship it")
    assert approved.returncode == 0, approved.stderr
    assert "step 'go' of run" in clean(approved) and "approved" in clean(approved)
    assert run.ended() == 0, run.stderr()
    assert "succeeded" in one_line(run.stdout() + run.stderr())

    again, shown_after, waiting_after = brain_many(
        brain_cmd, ["approve", run_id, "go", "--reject"], ["show", run_id],
        ["runs", "--status", "waiting", "--json"])
    assert again.returncode == 1
    assert "already decided" in clean(again)
    assert re.search(r"go: approved by cli at \S+: ship it", clean(shown_after)), \
        shown_after.stdout
    assert "waiting:" not in clean(shown_after)
    assert json.loads(waiting_after.stdout) == []
    data = show_json(brain_cmd, run_id)
    steps = {s["name"]: s for s in data["steps"]}
    assert data["status"] == "succeeded"
    assert steps["go"]["output"] == "true"
    assert {k: steps["go"]["decision"][k] for k in ("approved", "comment", "by")} == {
        "approved": True, "comment": "ship it", "by": "cli"}
    assert steps["apply"]["output"] == "applied"
    assert steps["later"]["status"] == "skipped"
    assert steps["report"]["output"] == "go=true"


def test_ctrl_c_while_waiting_leaves_the_run_waiting_for_a_worker(
        tmp_path: Path, flows: Path, brain_cmd: list[str],
        foreground: list[Foreground]) -> None:
    run = run_in_foreground(brain_cmd, tmp_path, foreground, f"{flows}:deploy")
    run_id = run.wait_stderr(APPROVE_LINE).group(1)
    run.proc.send_signal(signal.SIGINT)
    assert run.ended() == 130
    said = one_line(run.stderr())
    assert f"run {run_id} is still waiting" in said
    assert "brain serve or brain worker" in said
    assert "Traceback" not in said
    assert run_status(tmp_path, run_id) == "waiting"
    assert db_rows(tmp_path, "SELECT status FROM brain_steps WHERE run_id = ? AND name = 'go'",
                   run_id) == [("waiting",)]
    # Nobody executes it now: a decision is committed all the same...
    approved = brain(brain_cmd, "approve", run_id, "go")
    assert approved.returncode == 0, approved.stderr
    assert run_status(tmp_path, run_id) == "queued"

    # ...and a serving process on the database continues the run to its end.
    worker = subprocess.Popen([*brain_cmd, "worker", str(flows)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=dict(os.environ))
    try:
        wait_for(lambda: run_status(tmp_path, run_id) in ("succeeded", "failed", "cancelled"),
                 SECONDS, "the worker to continue the run")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker_out, _ = worker.communicate(timeout=SECONDS)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker_out, _ = worker.communicate()
    assert "Traceback" not in worker_out, worker_out
    data = show_json(brain_cmd, run_id)
    steps = {s["name"]: s for s in data["steps"]}
    assert data["status"] == "succeeded", (data["error"], worker_out)
    assert (steps["go"]["output"], steps["go"]["tries"]) == ("true", 1)
    assert steps["plan"]["tries"] == 1  # not run again
    assert steps["apply"]["output"] == "applied"
    assert steps["report"]["output"] == "go=true"


def test_brain_signal_continues_the_steps_waiting_for_it(
        tmp_path: Path, flows: Path, brain_cmd: list[str],
        foreground: list[Foreground]) -> None:
    run = run_in_foreground(brain_cmd, tmp_path, foreground, f"{flows}:ci", "--body", "abc123")
    run.wait_stderr(r"`brain signal ci-finished --key abc123 --body TEXT`")
    run.wait_stderr(r"`brain signal ci-finished --body TEXT`")
    said = one_line(run.stderr())
    assert "waits in step 'ci' for signal 'ci-finished'" in said
    run_id = str(db_rows(tmp_path, "SELECT id FROM brain_runs")[0][0])

    bad, nobody = brain_many(brain_cmd, ["signal", "ci finished", "--body", "x"],
                             ["signal", "ci-finished", "--key", "nobody", "--body", "x"])
    assert bad.returncode == 2
    assert "bad signal name 'ci finished'" in clean(bad)
    assert nobody.returncode == 0, nobody.stderr
    assert "no step was waiting for signal 'ci-finished' with key 'nobody'" in clean(nobody)

    keyed = brain(brain_cmd, "signal", "ci-finished", "--key", "abc123", "--body", "all green")
    assert keyed.returncode == 0, keyed.stderr
    assert f"step 'ci' of run {run_id} continues" in clean(keyed)
    twice = brain(brain_cmd, "signal", "ci-finished", "--key", "abc123", "--json", "--body", "x")
    assert twice.returncode == 0, twice.stderr
    assert json.loads(twice.stdout) == {"resumed": []}
    unkeyed = brain(brain_cmd, "signal", "ci-finished", "--json", "--body", '{"a": 1}')
    assert unkeyed.returncode == 0, unkeyed.stderr
    assert json.loads(unkeyed.stdout) == {"resumed": [{"run_id": run_id, "step": "any"}]}

    assert run.ended() == 0, run.stderr()
    data = show_json(brain_cmd, run_id)
    steps = {s["name"]: s for s in data["steps"]}
    assert steps["ci"]["output"] == "all green"
    assert steps["any"]["output"] == '{"a": 1}'
    assert steps["report"]["output"] == 'all green | {"a": 1}'
    shown = brain(brain_cmd, "show", run_id)
    assert "ci: signal ci-finished (key abc123) sent by cli at" in clean(shown)


def test_brain_cancel_ends_a_brain_run_waiting_in_the_foreground(
        tmp_path: Path, flows: Path, brain_cmd: list[str],
        foreground: list[Foreground]) -> None:
    run = run_in_foreground(brain_cmd, tmp_path, foreground, f"{flows}:deploy")
    run_id = run.wait_stderr(APPROVE_LINE).group(1)
    cancelled = brain(brain_cmd, "cancel", run_id[:12])
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"run {run_id} cancelled" in clean(cancelled)
    assert run.ended() == 1
    assert "cancelled" in one_line(run.stdout() + run.stderr())
    assert "Traceback" not in run.stderr()
    assert run_status(tmp_path, run_id) == "cancelled"
    late = brain(brain_cmd, "approve", run_id, "go")
    assert late.returncode == 1
    assert "go" in clean(late)
