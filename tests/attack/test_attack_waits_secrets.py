"""Attack (SPEC §16, §4): secrets in what waits store and answer, through a real ``brain serve``.

The server knows three secrets: the API token (``BRAIN_API_TOKEN``), a webhook secret
(``HOOK_SECRET``) and a ``secret()`` variable (``DEPLOY_TOKEN``). Every other thing it
stores is scrubbed of them (a shell step that prints them stores ``***``), but:

1. a decision's comment is stored and answered as sent: the secrets appear in the 200
   answer, in the step's ``decision`` of the run JSON, for anyone reading the run;
2. a signal's body becomes the ``wait_for`` step's output unscrubbed (the very next
   shell step that echoes it stores ``***``);
3. a ``wait_for`` key that contains a secret is stored scrubbed (``k1 ***``) and matched
   scrubbed: a signal with the step's real key continues nothing, while one with the
   literal key ``k1 ***`` continues it.

Promised: "secrets never appear in a prompt, waiting_for, decision or error stored or
answered"; "a signal continues exactly the steps waiting for it with the same key".

Run: ``.venv/bin/pytest tests/attack/test_attack_waits_secrets.py -n 0``
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_support import BrainServer, brain_argv, clean_env, step_of
from support import wait_for, write_source

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

TOKEN = "apitokenvalue789"
HOOK = "hooksecretvalue123"
DEPLOY = "deploytokenvalue456"
SECRETS = (TOKEN, HOOK, DEPLOY)

FLOWS = '''
from brain import approval, secret, shell, trigger, wait_for, webhook, workflow


@workflow(triggers=[webhook(secret_env="HOOK_SECRET")])
def gated():
    approval("go", prompt="Ship it?")
    got = wait_for("ci", signal="ci-done", key="k1")
    shell("use", argv=["echo", f"{got}"])
    shell("tok", argv=["sh", "-c", "echo $T"], env={"T": secret("DEPLOY_TOKEN")})


@workflow(triggers=[webhook(secret_env="HOOK_SECRET", path="keyed")])
def keyed():
    wait_for("ci", signal="keyed-done", key=trigger.body)
    shell("after", argv=["echo", "continued"])
'''


@pytest.fixture
def server(tmp_path: Path) -> Iterator[BrainServer]:
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    env = clean_env(tmp_path / "brain.db", {"BRAIN_API_TOKEN": TOKEN, "HOOK_SECRET": HOOK,
                                             "DEPLOY_TOKEN": DEPLOY})
    srv = BrainServer(brain_argv(), folder, tmp_path, env)
    try:
        srv.wait_healthy()
        srv.client.headers["Authorization"] = f"Bearer {TOKEN}"
        yield srv
    finally:
        srv.kill()
        srv.stop()


def run_json(server: BrainServer, run_id: str) -> dict[str, Any]:
    r = server.client.get(f"/api/runs/{run_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


step = step_of


def step_is(server: BrainServer, run_id: str, name: str, status: str) -> dict[str, Any] | None:
    run = run_json(server, run_id)
    return run if step(run, name)["status"] == status else None


def leaked(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_a_decision_comment_and_a_signal_body_are_stored_without_secrets(
        server: BrainServer) -> None:
    r = server.client.post("/api/workflows/gated/runs", json={"body": "x"})
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    wait_for(lambda: step_is(server, run_id, "go", "waiting"), 30, "the approval to wait")

    comment = f"ok; token {DEPLOY}, api {TOKEN}, hook {HOOK}"
    r = server.client.post(f"/api/runs/{run_id}/steps/go/decision",
                           json={"approve": True, "comment": comment})
    assert r.status_code == 200, r.text
    answered = leaked(r.text)

    wait_for(lambda: step_is(server, run_id, "ci", "waiting"), 30, "the signal step to wait")
    r = server.client.post("/api/signals/ci-done",
                           json={"key": "k1", "body": f"ci says {DEPLOY} {TOKEN} {HOOK}"})
    assert r.status_code == 200 and r.json()["resumed"], r.text
    run = wait_for(lambda: (lambda j: j if j["status"] == "succeeded" else None)(
        run_json(server, run_id)), 30, "the run to end")

    # What every other step stores: scrubbed.
    assert step(run, "use")["output"] == "ci says *** *** ***"
    assert step(run, "tok")["output"] == "***"
    problems = {
        "decision answered (200 body)": answered,
        "decision stored (run JSON)": leaked(json.dumps(step(run, "go")["decision"])),
        "signal body stored as the wait_for step's output": leaked(step(run, "ci")["output"]),
    }
    assert not any(problems.values()), problems


def test_a_served_step_whose_key_holds_a_secret_fails_rather_than_match_loosely(
        server: BrainServer) -> None:
    """The served run reads its trigger scrubbed, so its key is ``k1 ***``: no signal can be
    matched to the real key, and matching the scrubbed text would let any known secret
    stand in. The step fails at once; neither key continues anything."""
    real_key = f"k1 {HOOK}"
    r = server.client.post("/api/workflows/keyed/runs", json={"body": real_key})
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    run = wait_for(lambda: step_is(server, run_id, "ci", "failed"), 30, "the step to fail")
    assert "holds a secret this run has only as ***" in step(run, "ci")["error"], run
    for key in (real_key, "k1 ***"):
        resumed = server.client.post("/api/signals/keyed-done",
                                     json={"key": key, "body": "b"}).json()["resumed"]
        assert resumed == [], (key, resumed)
