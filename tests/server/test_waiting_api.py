"""Approvals, timeouts and signals (SPEC §16) through a real ``brain serve`` and the real CLI.

One server (a subprocess on 127.0.0.1, its own SQLite file) serves every test of this
module; each test starts runs of its own (their files under its ``tmp_path``, keys of its
own) and looks only at them. Decisions come from ``POST /api/runs/{id}/steps/{step}/decision``
and ``brain approve``, signals from ``POST /api/signals/{signal}`` and ``brain signal``; the
steps after the waits write files, so a continuation that ran twice (or never) shows.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from serve_support import BrainServer, brain_argv, clean_env, step_of
from support import write_source

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOWS = '''
from brain import approval, shell, trigger, wait_for, when, workflow


@workflow
def gate():
    ok = approval("go", prompt=f"Ship to {trigger.body}?")
    with when(ok):
        shell("ship", argv=["sh", "-c", 'echo shipped >> "$1"', "sh", trigger.body])


@workflow
def two_gates():
    first = approval("first", prompt="First?")
    approval("second", prompt=f"Second, after {first}?")


@workflow
def timed_default():
    ok = approval("go", prompt="Go?", timeout="1s", default=False)
    with when(ok):
        shell("ship", argv=["sh", "-c", 'echo shipped >> "$1"', "sh", trigger.body])


@workflow
def timed_strict():
    approval("go", prompt="Go?", timeout="1s")
    shell("ship", argv=["sh", "-c", 'echo shipped >> "$1"', "sh", trigger.body])


@workflow
def signal_default():
    got = wait_for("ci", signal="never-sent", timeout="1s", default={"state": "unknown"})
    shell("use", argv=["echo", f"{got}"])


@workflow
def ci():
    got = wait_for("ci", signal="ci-finished", key=trigger.body)
    shell("use", argv=["echo", f"{got}"])
'''

@dataclass
class Served:
    """The module's server, and the environment the CLI needs to reach its database."""

    server: BrainServer
    env: dict[str, str]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("waiting-api")
    folder = root / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    env = clean_env(root / "brain.db", {"COLUMNS": "250"})
    server = BrainServer(brain_argv(), folder, root, env)
    try:
        server.wait_healthy()
        yield Served(server, env)
    finally:
        server.kill()
        server.stop()


# --- helpers --------------------------------------------------------------------------------------


step = step_of


def brain(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``brain`` command on the module server's database."""
    return subprocess.run([*brain_argv(), *args], env=env, capture_output=True, text=True,
                          timeout=60)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def assert_decided(decision: dict[str, Any], *, approved: bool, comment: str | None,
                   by: str) -> None:
    assert decision["approved"] is approved
    assert decision["comment"] == comment
    assert decision["by"] == by
    assert datetime.fromisoformat(decision["at"]).tzinfo is not None


# --- approvals --------------------------------------------------------------------------------------


def test_approve_by_api_continues_the_run_and_stores_the_decision(served: Served,
                                                                  tmp_path: Path) -> None:
    server = served.server
    marker = tmp_path / "shipped"
    run_id = server.start_run("gate", str(marker))
    data = server.wait_waiting(run_id)
    assert step(data, "go")["waiting_for"]["prompt"] == f"Ship to {marker}?"

    r = server.client.post(f"/api/runs/{run_id}/steps/go/decision",
                           json={"approve": True, "comment": "looks good"})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["run_id"] == run_id and answer["step"] == "go"
    assert_decided(answer, approved=True, comment="looks good", by="api")

    ended = server.wait_run(run_id)
    assert ended["status"] == "succeeded", ended
    go = step(ended, "go")
    assert go["output"] == "true"
    assert_decided(go["decision"], approved=True, comment="looks good", by="api")
    assert go["decision"]["at"] == answer["at"]
    assert lines(marker) == ["shipped"]

    shown = brain(served.env, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "approved by api" in shown.stdout and "looks good" in shown.stdout

    again = server.client.post(f"/api/runs/{run_id}/steps/go/decision", json={"approve": False})
    assert again.status_code == 409, again.text
    assert "already decided" in again.json()["detail"]
    assert step(server.run(run_id), "go")["decision"]["approved"] is True  # the first won


def test_reject_by_api_skips_the_when_branch(served: Served, tmp_path: Path) -> None:
    server = served.server
    marker = tmp_path / "shipped"
    run_id = server.start_run("gate", str(marker))
    server.wait_waiting(run_id)
    r = server.client.post(f"/api/runs/{run_id}/steps/go/decision", json={"approve": False})
    assert r.status_code == 200, r.text
    assert_decided(r.json(), approved=False, comment=None, by="api")
    ended = server.wait_run(run_id)
    assert ended["status"] == "succeeded", ended
    assert step(ended, "go")["output"] == "false"
    assert step(ended, "ship")["status"] == "skipped"
    assert not marker.exists()


def test_decisions_that_cannot_be_taken_answer_409_or_404(served: Served,
                                                          tmp_path: Path) -> None:
    server = served.server
    run_id = server.start_run("gate", str(tmp_path / "shipped"))
    server.wait_waiting(run_id)
    decide = f"/api/runs/{run_id}/steps/%s/decision"

    not_an_approval = server.client.post(decide % "ship", json={"approve": True})  # a shell step
    assert not_an_approval.status_code == 409, not_an_approval.text
    gates = server.start_run("two_gates")
    server.wait_waiting(gates)
    not_yet = server.client.post(f"/api/runs/{gates}/steps/second/decision",
                                 json={"approve": True})  # an approval not reached yet
    assert not_yet.status_code == 409, not_yet.text
    assert "not waiting" in not_yet.json()["detail"]
    by_cli = brain(served.env, "approve", gates, "second")
    assert by_cli.returncode == 1, by_cli.stdout + by_cli.stderr
    assert step(server.run(gates), "second")["status"] == "pending"
    unknown_step = server.client.post(decide % "nope", json={"approve": True})
    assert unknown_step.status_code == 404, unknown_step.text
    unknown_run = server.client.post(f"/api/runs/{'f' * 32}/steps/go/decision",
                                     json={"approve": True})
    assert unknown_run.status_code == 404, unknown_run.text
    assert server.run(run_id)["status"] == "waiting"  # none of them changed anything

    # A step of an ended run is not waiting any more: 409 too.
    done = brain(served.env, "approve", run_id, "go", "--reject")
    assert done.returncode == 0, done.stderr
    assert server.wait_run(run_id)["status"] == "succeeded"
    late = server.client.post(decide % "go", json={"approve": True})
    assert late.status_code == 409, late.text


@pytest.mark.parametrize("body", [
    pytest.param(b"not json", id="not-json"),
    pytest.param(b"[true]", id="array"),
    pytest.param(b'{"approve": "yes"}', id="wrong-type"),
    pytest.param(b'{"approve": true, "comment": 5}', id="comment-not-text"),
    pytest.param(b'{"approve": true, "by": "me"}', id="unknown-field"),
    pytest.param(b"{}", id="no-approve"),
])
def test_a_malformed_decision_answers_400_and_changes_nothing(served: Served, tmp_path: Path,
                                                              body: bytes) -> None:
    server = served.server
    run_id = server.start_run("gate", str(tmp_path / "shipped"))
    server.wait_waiting(run_id)
    r = server.client.post(f"/api/runs/{run_id}/steps/go/decision", content=body,
                           headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["detail"]
    data = server.run(run_id)
    assert data["status"] == "waiting" and step(data, "go")["decision"] is None


def test_approve_and_reject_by_cli(served: Served, tmp_path: Path) -> None:
    server, env = served.server, served.env
    yes_file, no_file = tmp_path / "yes", tmp_path / "no"
    yes = server.start_run("gate", str(yes_file))
    no = server.start_run("gate", str(no_file))
    server.wait_waiting(yes)
    server.wait_waiting(no)

    approved = brain(env, "approve", yes, "go", "--comment", "ok by me")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    rejected = brain(env, "approve", no[:12], "go", "--reject")  # a unique prefix will do
    assert rejected.returncode == 0, rejected.stdout + rejected.stderr

    first, second = server.wait_run(yes), server.wait_run(no)
    assert first["status"] == "succeeded", first
    assert_decided(step(first, "go")["decision"], approved=True, comment="ok by me", by="cli")
    assert step(first, "go")["output"] == "true"
    assert lines(yes_file) == ["shipped"]
    assert second["status"] == "succeeded", second
    assert_decided(step(second, "go")["decision"], approved=False, comment=None, by="cli")
    assert step(second, "ship")["status"] == "skipped"
    assert not no_file.exists()

    shown = brain(env, "show", yes)
    assert shown.returncode == 0, shown.stderr
    assert "approved by cli" in shown.stdout and "ok by me" in shown.stdout
    as_json = brain(env, "show", yes, "--json")
    assert as_json.returncode == 0, as_json.stderr
    go = next(s for s in json.loads(as_json.stdout)["steps"] if s["name"] == "go")
    assert_decided(go["decision"], approved=True, comment="ok by me", by="cli")

    twice = brain(env, "approve", yes, "go", "--reject")
    assert twice.returncode == 1, twice.stdout + twice.stderr
    assert "already decided" in twice.stdout + twice.stderr
    not_an_approval = brain(env, "approve", no, "ship")
    assert not_an_approval.returncode == 1, not_an_approval.stdout + not_an_approval.stderr
    unknown = brain(env, "approve", "f" * 32, "go")
    assert unknown.returncode != 0
    assert "Traceback" not in unknown.stdout + unknown.stderr
    # The first decisions stand; the steps after them ran once.
    assert step(server.run(yes), "go")["decision"]["approved"] is True
    assert lines(yes_file) == ["shipped"]


# --- timeouts ---------------------------------------------------------------------------------------


def test_timeouts_with_a_default_take_it_decided_by_timeout(served: Served,
                                                           tmp_path: Path) -> None:
    server = served.server
    marker = tmp_path / "shipped"
    approval_run = server.start_run("timed_default", str(marker))
    signal_run = server.start_run("signal_default")

    run = server.wait_run(approval_run)
    assert run["status"] == "succeeded", run
    go = step(run, "go")
    assert go["output"] == "false"
    assert_decided(go["decision"], approved=False, comment=None, by="timeout")
    assert step(run, "ship")["status"] == "skipped"
    assert not marker.exists()

    run = server.wait_run(signal_run)
    assert run["status"] == "succeeded", run
    assert step(run, "ci")["output"] == '{"state":"unknown"}'
    assert step(run, "ci")["decision"]["by"] == "timeout"
    assert step(run, "use")["output"].strip() == '{"state":"unknown"}'


def test_a_timeout_without_a_default_fails_the_run_once(served: Served, tmp_path: Path) -> None:
    server = served.server
    marker = tmp_path / "shipped"
    run_id = server.start_run("timed_strict", str(marker))
    run = server.wait_run(run_id)
    assert run["status"] == "failed", run
    assert "no decision within 1s" in run["error"]
    go = step(run, "go")
    assert go["tries"] == 1 and go["decision"]["by"] == "timeout"
    assert step(run, "ship")["status"] == "skipped"
    assert not marker.exists()
    time.sleep(1.0)  # nothing takes the run or retries the wait afterwards
    again = server.run(run_id)
    assert again["status"] == "failed" and step(again, "go")["tries"] == 1
    assert again["ended_at"] == run["ended_at"]


def test_a_timeout_without_a_default_leaves_the_step_failed_with_its_error(
        served: Served, tmp_path: Path) -> None:
    server = served.server
    run = server.wait_run(server.start_run("timed_strict", str(tmp_path / "shipped")))
    go = step(run, "go")
    assert go["status"] == "failed", go
    assert go["error"] == "no decision within 1s"


# --- signals ----------------------------------------------------------------------------------------


def test_a_keyed_signal_by_api_resumes_only_the_runs_with_its_key(served: Served) -> None:
    server = served.server
    tag = uuid.uuid4().hex[:8]
    keys = [f"{tag}-a", f"{tag}-b", f"{tag}-c"]
    runs = {key: server.start_run("ci", key) for key in keys}
    for run_id in runs.values():
        server.wait_waiting(run_id)

    r = server.client.post("/api/signals/ci-finished",
                           json={"key": keys[1], "body": {"ok": True, "n": [1, 2]}})
    assert r.status_code == 200, r.text
    assert r.json() == {"resumed": [{"run_id": runs[keys[1]], "step": "ci"}]}
    run = server.wait_run(runs[keys[1]])
    assert run["status"] == "succeeded", run
    assert step(run, "ci")["output"] == '{"ok":true,"n":[1,2]}'
    assert step(run, "use")["output"].strip() == '{"ok":true,"n":[1,2]}'
    assert server.run(runs[keys[0]])["status"] == "waiting"
    assert server.run(runs[keys[2]])["status"] == "waiting"

    r = server.client.post("/api/signals/ci-finished",
                           json={"key": keys[0], "body": "plain text, as is"})
    assert r.json() == {"resumed": [{"run_id": runs[keys[0]], "step": "ci"}]}
    assert step(server.wait_run(runs[keys[0]]), "ci")["output"] == "plain text, as is"

    nobody = server.client.post("/api/signals/ci-finished", json={"key": f"{tag}-z", "body": 1})
    assert nobody.status_code == 200 and nobody.json() == {"resumed": []}
    twice = server.client.post("/api/signals/ci-finished", json={"key": keys[1], "body": 2})
    assert twice.json() == {"resumed": []}  # it continued already
    bad = server.client.post("/api/signals/bad%20name", json={})
    assert bad.status_code == 400, bad.text
    assert server.run(runs[keys[2]])["status"] == "waiting"


def test_a_keyed_signal_by_cli_resumes_only_the_runs_with_its_key(served: Served) -> None:
    server, env = served.server, served.env
    tag = uuid.uuid4().hex[:8]
    keys = [f"{tag}-a", f"{tag}-b", f"{tag}-c"]
    runs = {key: server.start_run("ci", key) for key in keys}
    for run_id in runs.values():
        server.wait_waiting(run_id)

    sent = brain(env, "signal", "ci-finished", "--key", keys[1], "--body", '{"ok": true}',
                 "--json")
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert json.loads(sent.stdout) == {"resumed": [{"run_id": runs[keys[1]], "step": "ci"}]}
    run = server.wait_run(runs[keys[1]])
    assert run["status"] == "succeeded", run
    assert step(run, "ci")["output"] == '{"ok": true}'  # text as is
    assert step(run, "ci")["decision"]["by"] == "cli"
    assert server.run(runs[keys[0]])["status"] == "waiting"
    assert server.run(runs[keys[2]])["status"] == "waiting"

    nobody = brain(env, "signal", "ci-finished", "--key", f"{tag}-z", "--body", "x", "--json")
    assert nobody.returncode == 0, nobody.stderr
    assert json.loads(nobody.stdout) == {"resumed": []}

    plain = brain(env, "signal", "ci-finished", "--key", keys[0], "--body", "all green")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    run = server.wait_run(runs[keys[0]])
    assert step(run, "ci")["output"] == "all green"
    assert step(run, "use")["output"].strip() == "all green"
    assert server.run(runs[keys[2]])["status"] == "waiting"
    shown = brain(env, "show", runs[keys[0]])
    assert f"signal ci-finished (key {keys[0]}) sent by cli" in shown.stdout
