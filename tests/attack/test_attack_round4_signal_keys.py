"""Attack round 4 (SPEC §16, wait_for keys), through a real ``brain serve``.

Promise: a waiting step continues only for a signal whose key *equals* its resolved key,
compared by the real value, never by the scrubbed text.

A run started by the server reads its trigger scrubbed, so a step keyed ``k1 <HOOK secret>``
has only ``k1 ***``. The attack found that a match on that text let any secret the server
knows (the API token every client sends, or its base64) stand in for the hidden one. Now
such a step fails at once, and no signal continues it.

What held is checked too: the scrubbed text itself, keys differing in case, trailing
whitespace or Unicode normalisation, a missing key, and no secret in the database file
or in API answers.

Run: ``.venv/bin/pytest tests/attack/test_attack_round4_signal_keys.py -n 0``
"""

from __future__ import annotations

import base64
import json
import unicodedata
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
from brain import secret, shell, trigger, wait_for, webhook, workflow


@workflow(triggers=[webhook(secret_env="HOOK_SECRET", path="keyed")])
def keyed():
    wait_for("ci", signal="keyed-done", key=trigger.body, timeout="10m")
    shell("after", argv=["echo", "continued"])


@workflow(triggers=[webhook(secret_env="HOOK_SECRET", path="nokey")])
def nokey():
    wait_for("ci", signal="nokey-done", timeout="10m")
    shell("tok", argv=["sh", "-c", "echo $T"], env={"T": secret("DEPLOY_TOKEN")})
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


def waiting_run(server: BrainServer, workflow: str, body: str) -> str:
    r = server.client.post(f"/api/workflows/{workflow}/runs", json={"body": body})
    assert r.status_code == 202, r.text
    run_id = str(r.json()["run_id"])
    wait_for(lambda: (lambda j: j if step_of(j, "ci")["status"] == "waiting" else None)(
        server.client.get(f"/api/runs/{run_id}").json()), 30, "the step to wait")
    return run_id


def failed_run(server: BrainServer, workflow: str, body: str) -> str:
    """A run whose step ``ci`` failed at once: its key holds a secret the run has only
    scrubbed (a served run reads its trigger scrubbed), so nothing could match it."""
    r = server.client.post(f"/api/workflows/{workflow}/runs", json={"body": body})
    assert r.status_code == 202, r.text
    run_id = str(r.json()["run_id"])
    run = wait_for(lambda: (lambda j: j if j["status"] == "failed" else None)(
        server.client.get(f"/api/runs/{run_id}").json()), 30, "the run to fail")
    assert "holds a secret this run has only as ***" in step_of(run, "ci")["error"], run
    return run_id


def signal(server: BrainServer, name: str, key: str | None) -> list[dict[str, Any]]:
    payload: dict[str, Any] = {"body": "b"}
    if key is not None:
        payload["key"] = key
    r = server.client.post(f"/api/signals/{name}", json=payload)
    assert r.status_code == 200, r.text
    assert not [s for s in SECRETS if s in r.text], r.text
    return list(r.json()["resumed"])


B64_TOKEN = base64.b64encode(TOKEN.encode()).decode()


@pytest.mark.parametrize("forged", [f"k1 {TOKEN}", f"k1 {B64_TOKEN}", f"k1 {DEPLOY}"],
                         ids=["api-token", "base64-api-token", "other-secret"])
def test_a_key_with_another_secret_does_not_continue_the_step(
        server: BrainServer, forged: str) -> None:
    real_key = f"k1 {HOOK}"
    run_id = failed_run(server, "keyed", real_key)
    resumed = signal(server, "keyed-done", forged)
    assert resumed == [], (f"the step was keyed {real_key!r}; a signal with the "
                           f"different key {forged!r} continued {resumed}")
    assert step_of(server.client.get(f"/api/runs/{run_id}").json(), "ci")["status"] == "failed"


def test_keys_that_differ_continue_nothing_and_nothing_leaks(
        server: BrainServer, tmp_path: Path) -> None:
    nfc = unicodedata.normalize("NFC", "café-é")
    nfd = unicodedata.normalize("NFD", "café-é")
    long_key = "L" * 999
    waits = {
        "plain": "Deploy-42",
        "nfc": nfc,
        "long": long_key,
    }
    runs = {name: waiting_run(server, "keyed", key) for name, key in waits.items()}
    nokey = waiting_run(server, "nokey", "x")
    wrong = ["deploy-42", "Deploy-42 ", " Deploy-42", "Deploy-42\n", "DEPLOY-42", nfd,
             "L" * 998, "L" * 1000, "***", "k1 ***", "", "Deploy-4\uff12"]
    for key in wrong:
        assert signal(server, "keyed-done", key) == [], key
    assert signal(server, "nokey-done", "") == [], "an empty key is not no key"
    assert signal(server, "keyed-done", None) == [], "no key matches only steps without one"
    for name, key in waits.items():
        assert signal(server, "keyed-done", key) == [{"run_id": runs[name], "step": "ci"}], name
    assert signal(server, "nokey-done", None) == [{"run_id": nokey, "step": "ci"}]
    # The secret-keyed step fails at once (its run has the key only scrubbed); no signal,
    # scrubbed text or real key, continues it; nothing stores a secret in clear.
    secret_run = failed_run(server, "keyed", f"deploy-{HOOK}")
    shown = step_of(server.client.get(f"/api/runs/{secret_run}").json(), "ci")
    assert "'deploy-***'" in shown["error"], shown
    assert signal(server, "keyed-done", "deploy-***") == []
    assert signal(server, "keyed-done", f"deploy-{HOOK}") == []
    for path in ("/api/runs", f"/api/runs/{secret_run}", "/api/workflows"):
        text = server.client.get(path).text
        assert not [s for s in SECRETS if s in text], path
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("brain.db*"))
    for s in SECRETS:
        for form in (s, base64.b64encode(s.encode()).decode(), s.encode().hex()):
            assert form.encode() not in raw, f"{form} in the database file"
    assert json.dumps(shown)
