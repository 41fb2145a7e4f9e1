"""Typed parameters through the HTTP API: ``POST /api/workflows/{name}/runs`` with
``{"params": ..., "body": ..., "wait": ...}``, 422 per field with nothing queued, ``output``
in wait answers and run JSON, ``params_schema`` / ``output_schema`` in
``GET /api/workflows/{name}``, and the OpenAPI document saying so. In process, through
Litestar's ``AsyncTestClient`` on ``create_app`` (its executors really run the runs), with
the runs counted in the SQLite file itself."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from litestar.testing import AsyncTestClient
from pydantic import BaseModel, Field
from serve_support import wait_run

from brain import cron, every, shell, workflow
from brain.server import create_app

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


class Verdict(BaseModel):
    service: str
    risky: bool


def make_deploy() -> Any:
    @workflow
    def deploy(service: Annotated[str, Field(description="what to deploy")],
               replicas: int = 1, env: Literal["staging", "prod"] = "staging",
               dry_run: bool = False) -> Verdict:
        """Deploy SERVICE."""
        shell("plan", argv=["echo", f"{service} x{replicas} to {env}"])
        return {"service": service, "risky": dry_run}  # type: ignore[return-value]

    return deploy


def make_plain() -> Any:
    @workflow
    def plain():
        shell("a", command="echo a")

    return plain


@asynccontextmanager
async def client_on(*workflows: Any) -> AsyncIterator[Any]:
    async with AsyncTestClient(create_app(list(workflows)), base_url="http://127.0.0.1",
                               timeout=60) as client:
        yield client


def stored_runs(tmp_path: Path) -> int:
    """The runs in this test's SQLite file (``BRAIN_DATABASE_URL`` of tests/conftest.py)."""
    db = tmp_path / "brain.db"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        return int(conn.execute("select count(*) from brain_runs").fetchone()[0])


async def test_params_are_validated_stored_and_the_output_answered(tmp_path: Path) -> None:
    async with client_on(make_deploy()) as client:
        r = await client.post("/api/workflows/deploy/runs",
                              json={"params": {"service": "api", "replicas": 3},
                                    "body": "hi", "wait": True})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["status"] == "succeeded", answer
        assert answer["output"] == {"service": "api", "risky": False}
        run = (await client.get(f"/api/runs/{answer['run_id']}")).json()
    assert run["params"] == {"service": "api", "replicas": 3, "env": "staging",
                             "dry_run": False}
    assert run["output"] == {"service": "api", "risky": False}
    assert run["trigger"]["body"] == "hi"
    assert run["steps"][0]["output"] == "api x3 to staging"


async def test_queued_without_wait_then_the_run_has_its_output(tmp_path: Path) -> None:
    async with client_on(make_deploy()) as client:
        r = await client.post("/api/workflows/deploy/runs",
                              json={"params": {"service": "db", "env": "prod"}})
        assert r.status_code == 202 and set(r.json()) == {"run_id"}, r.text
        run = await wait_run(client, r.json()["run_id"])
    assert run["params"]["env"] == "prod" and run["output"]["service"] == "db"


@pytest.mark.parametrize(("params", "fields"), [
    ({}, {"service"}),
    (None, {"service"}),
    ({"service": 5, "replicas": "many", "env": "qa"}, {"service", "replicas", "env"}),
    ({"service": "api", "dry_run": "perhaps"}, {"dry_run"}),
])
async def test_invalid_params_are_422_per_field_and_nothing_is_stored(
        tmp_path: Path, params: dict[str, Any] | None, fields: set[str]) -> None:
    async with client_on(make_deploy()) as client:
        body: dict[str, Any] = {"wait": True}
        if params is not None:
            body["params"] = params
        before = stored_runs(tmp_path)
        r = await client.post("/api/workflows/deploy/runs", json=body)
        assert r.status_code == 422, r.text
        data = r.json()
        assert data["status_code"] == 422
        assert isinstance(data["detail"], str) and data["detail"]
        assert {e["loc"][0] for e in data["errors"]} == fields
        assert all(set(e) == {"loc", "msg", "type"} for e in data["errors"])
        assert "Traceback" not in r.text
        assert stored_runs(tmp_path) == before
        assert (await client.get("/api/runs", params={"workflow": "deploy"})).json() == []


async def test_params_that_are_not_an_object_are_400(tmp_path: Path) -> None:
    async with client_on(make_deploy()) as client:
        r = await client.post("/api/workflows/deploy/runs", json={"params": ["api"]})
        assert r.status_code == 400, r.text
        assert stored_runs(tmp_path) == 0


async def test_a_workflow_without_parameters_runs_with_none(tmp_path: Path) -> None:
    async with client_on(make_plain()) as client:
        r = await client.post("/api/workflows/plain/runs", json={"wait": True})
        assert r.status_code == 200, r.text
        assert r.json()["output"] is None
        run = (await client.get(f"/api/runs/{r.json()['run_id']}")).json()
    assert run["params"] == {} and run["output"] is None


async def test_workflow_detail_has_params_and_output_schemas() -> None:
    async with client_on(make_deploy(), make_plain()) as client:
        deploy = (await client.get("/api/workflows/deploy")).json()
        plain = (await client.get("/api/workflows/plain")).json()
    schema = deploy["params_schema"]
    assert schema["required"] == ["service"]
    assert schema["properties"]["service"]["description"] == "what to deploy"
    assert schema["properties"]["env"]["enum"] == ["staging", "prod"]
    assert schema["properties"]["replicas"]["default"] == 1
    assert set(deploy["output_schema"]["properties"]) == {"service", "risky"}
    assert plain["output_schema"] is None
    assert plain["params_schema"].get("properties", {}) == {}


async def test_the_openapi_document_describes_params_422_and_output() -> None:
    async with client_on(make_deploy()) as client:
        doc = (await client.get("/schema/openapi.json")).json()
    start = doc["paths"]["/api/workflows/{name}/runs"]["post"]
    assert "422" in start["responses"]
    schemas = doc["components"]["schemas"]
    assert "params" in schemas["RunRequest"]["properties"]
    assert "errors" in schemas["ApiError"]["properties"]
    assert {"loc", "msg", "type"} <= set(schemas["FieldError"]["properties"])
    assert "output" in schemas["RunEnded"]["properties"]
    assert {"params", "output"} <= set(schemas["RunDetail"]["properties"])
    assert {"params_schema", "output_schema"} <= set(schemas["WorkflowDetail"]["properties"])


async def test_a_schedules_params_are_in_its_trigger_summary() -> None:
    @workflow(triggers=[cron("0 6 * * *", params={"service": "api"}), every(seconds=60)])
    def nightly(service: str = "web"):
        shell("a", argv=["echo", service])

    async with client_on(nightly) as client:
        triggers = (await client.get("/api/workflows/nightly")).json()["triggers"]
    assert triggers[0]["params"] == {"service": "api"}
    assert "params" not in triggers[1]  # none given: the defaults
