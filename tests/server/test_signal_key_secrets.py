"""SPEC §16 and §11, end to end: a ``wait_for`` step whose key holds a secret continues for a
signal with its real key, never for one sent with the key as shown (``deploy-***``) or a
key one character away.

Two ways in: a ``brain run`` waiting in the foreground (it holds its trigger as given)
signalled by ``brain signal`` from another process; and a run queued through the HTTP API of
a real ``brain serve``, which reads its trigger from the store scrubbed, so its step fails at
once rather than wait for a key nobody can match.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_support import BrainServer, brain_argv, clean_env, step_of
from support import wait_for, write_source

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

TOKEN = "deploytoken-4f9a2c"
FLOW = '''
from brain import secret, shell, trigger, wait_for, workflow


@workflow
def deploy():
    wait_for("ci", signal="ci-done", key=f"deploy-{trigger.body}")
    shell("tok", argv=["sh", "-c", "echo ready"], env={"T": secret("DEPLOY_TOKEN")})
'''
WRONG_KEYS = ("deploy-***", f"deploy-{TOKEN[:-1]}", f"deploy-{TOKEN}x", f"Deploy-{TOKEN}",
              "deploy-")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[BrainServer]:
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOW)
    env = clean_env(tmp_path / "brain.db", {"DEPLOY_TOKEN": TOKEN})
    srv = BrainServer(brain_argv(), folder, tmp_path, env)
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.kill()
        srv.stop()


def test_a_served_run_whose_key_holds_a_secret_fails_at_once(server: BrainServer) -> None:
    """The server reads the run's trigger scrubbed: the real key is known to nobody, so no
    signal may be matched to it (a match on ``deploy-***`` would let any secret the server
    knows stand in for the hidden one). The step fails at once, saying why."""
    run_id = server.start_run("deploy", body=TOKEN)
    ended = server.wait_run(run_id, 60)
    assert ended["status"] == "failed", ended
    error = step_of(ended, "ci")["error"]
    assert error == ("the key of step 'ci' ('deploy-***') holds a secret this run has only "
                     "as ***: no signal can be matched to it safely; build the key from "
                     "values that hold no secret"), error
    for key in (*WRONG_KEYS, f"deploy-{TOKEN}"):
        r = server.client.post("/api/signals/ci-done", json={"key": key, "body": "no"})
        assert r.status_code == 200, r.text
        assert r.json()["resumed"] == [], f"a signal with key {key!r} continued the step"
    assert TOKEN not in json.dumps(server.client.get(f"/api/runs/{run_id}").json())


def _waiting_step(db_file: Path) -> str | None:
    """The run id once its step ``ci`` waits (read-only), else ``None``."""
    if not db_file.exists():
        return None
    try:
        with sqlite3.connect(f"file:{db_file}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute("SELECT run_id FROM brain_steps WHERE name = 'ci' "
                               "AND status = 'waiting'").fetchone()
    except sqlite3.OperationalError:  # the schema is not there yet
        return None
    return None if row is None else str(row[0])


def test_brain_signal_continues_a_foreground_run_with_the_real_key_alone(
        tmp_path: Path, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "flow.py", FLOW)
    env = {**os.environ, "DEPLOY_TOKEN": TOKEN}
    run = subprocess.Popen([*brain_cmd, "run", str(flow), "--body", TOKEN, "--json"],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        run_id = wait_for(lambda: _waiting_step(tmp_path / "brain.db"), 60, "the step to wait")

        def signal(key: str) -> list[dict[str, str]]:
            sent = subprocess.run([*brain_cmd, "signal", "ci-done", "--key", key, "--body", "b",
                                   "--json"], capture_output=True, text=True, env=os.environ,
                                  timeout=60, check=False)
            assert sent.returncode == 0, sent.stderr
            return list(json.loads(sent.stdout)["resumed"])

        for wrong in WRONG_KEYS:
            assert signal(wrong) == [], f"a signal with key {wrong!r} continued the step"
        assert signal(f"deploy-{TOKEN}") == [{"run_id": run_id, "step": "ci"}]
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate(timeout=10)
    assert run.returncode == 0, err
    result = json.loads(out)
    assert result["status"] == "succeeded"
    assert TOKEN not in out + err
