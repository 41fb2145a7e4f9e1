"""A signed webhook's JSON object body fills the workflow's parameters named by its keys
(the others ignored, the raw body still ``trigger.body``); parameters that do not validate
answer 422, one error per field, and queue nothing. Against a real ``brain serve``
subprocess, deliveries signed with HMAC-SHA256 as senders sign them."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator

import httpx
import pytest
from serve_support import BrainServer, brain_argv, clean_env
from support import write_source

SECRET = "params-hook-secret"

HOOKS = '''
from typing import Literal

from brain import shell, trigger, webhook, workflow


@workflow(triggers=[webhook(secret_env="HOOK_SECRET")])
def ship(service: str, replicas: int = 1, env: Literal["staging", "prod"] = "staging"):
    shell("say", argv=["echo", f"{service} x{replicas} to {env}", trigger.body])
    return {"service": service, "replicas": replicas}


@workflow(triggers=[webhook(secret_env="HOOK_SECRET")])
def relaxed(note: str = "none"):
    shell("say", argv=["echo", note])
    return note
'''


def signed(body: bytes) -> dict[str, str]:
    """The signature header, computed here with ``hmac`` (as a sender computes it)."""
    digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Brain-Signature": f"sha256={digest}", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    root = tmp_path_factory.mktemp("params-hooks")
    folder = root / "workflows"
    folder.mkdir()
    write_source(folder, "hooks.py", HOOKS)
    srv = BrainServer(brain_argv(), folder, root, clean_env(root / "brain.db",
                                                            {"HOOK_SECRET": SECRET}))
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def deliver(server: BrainServer, path: str, body: bytes, **query: str) -> httpx.Response:
    return server.client.post(f"/hooks/{path}", content=body, headers=signed(body),
                              params=query)


def test_a_json_object_fills_the_parameters_its_keys_name(server: BrainServer) -> None:
    body = json.dumps({"service": "api", "replicas": 3, "ref": "refs/heads/main"}).encode()
    r = deliver(server, "ship", body, wait="true")
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["status"] == "succeeded", answer
    assert answer["output"] == {"service": "api", "replicas": 3}
    run = server.run(answer["run_id"])
    assert run["params"] == {"service": "api", "replicas": 3, "env": "staging"}  # ref ignored
    assert run["trigger"]["body"] == body.decode()  # the raw body, as delivered
    assert run["trigger"]["event"] == "webhook"


def test_invalid_parameters_answer_422_per_field_and_queue_nothing(server: BrainServer) -> None:
    before = server.run_ids("ship")
    body = json.dumps({"service": ["not", "text"], "replicas": "many", "env": "qa"}).encode()
    r = deliver(server, "ship", body)
    assert r.status_code == 422, r.text
    data = r.json()
    assert data["status_code"] == 422 and isinstance(data["detail"], str)
    fields = {e["loc"][0] for e in data["errors"]}
    assert fields == {"service", "replicas", "env"}
    assert all(set(e) == {"loc", "msg", "type"} for e in data["errors"])
    assert "Traceback" not in r.text
    assert server.run_ids("ship") == before


@pytest.mark.parametrize("body", [b"plain text", b"[1, 2]", b'"api"', b"{not json"])
def test_a_body_that_is_no_json_object_gives_no_parameters(server: BrainServer,
                                                           body: bytes) -> None:
    before = server.run_ids("ship")
    r = deliver(server, "ship", body)  # service is required: nothing can supply it
    assert r.status_code == 422, r.text
    assert [e["loc"] for e in r.json()["errors"]] == [["service"]]
    assert server.run_ids("ship") == before
    r = deliver(server, "relaxed", body, wait="true")
    assert r.status_code == 200, r.text
    run = server.run(r.json()["run_id"])
    assert run["params"] == {"note": "none"} and run["trigger"]["body"] == body.decode()


def test_an_unsigned_delivery_is_401_before_its_parameters_are_read(server: BrainServer) -> None:
    body = json.dumps({"replicas": "many"}).encode()
    r = server.client.post("/hooks/ship", content=body,
                           headers={"X-Brain-Signature": "sha256=" + "0" * 64})
    assert r.status_code == 401, r.text
