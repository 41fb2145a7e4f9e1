"""The OpenAPI document (``/schema/openapi.json``) describes the HTTP API (SPEC §7): every
``/api`` operation documents its answers and its JSON body, real answers fit the shapes
documented for them, and the typed bodies keep the JSON the API always answered."""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from litestar.testing import AsyncTestClient
from serve_support import wait_run

from brain import cron, every, shell, webhook, workflow
from brain.dsl.triggers import TriggerSpec, WatchTrigger
from brain.results import RunResult, StepResult, TriggerData
from brain.server import create_app
from brain.server.bodies import RunDetail, StepDetail, TriggerInput, TriggerSummary, trigger_summary

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "null": (type(None),), "object": (dict,), "array": (list,)}


def problems(value: Any, schema: dict[str, Any], doc: dict[str, Any], where: str = "$") -> list[str]:
    """Where ``value`` does not fit ``schema`` (a structural check: types, required keys,
    properties, items, enums and ``$ref``s into ``doc``'s components)."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        return problems(value, doc["components"]["schemas"][name], doc, where)
    if "oneOf" in schema:
        found = [problems(value, option, doc, where) for option in schema["oneOf"]]
        return [] if any(not p for p in found) else min(found, key=len)
    kinds = schema.get("type")
    if kinds is not None:
        allowed = [t for k in ([kinds] if isinstance(kinds, str) else kinds) for t in _TYPES[k]]
        if not isinstance(value, tuple(allowed)) or (isinstance(value, bool) and bool not in allowed):
            return [f"{where}: {value!r} is not {kinds}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {value!r} is not one of {schema['enum']}"]
    if "const" in schema and value != schema["const"]:
        return [f"{where}: {value!r} is not {schema['const']!r}"]
    found = []
    if isinstance(value, dict):
        found += [f"{where}: no {key!r}" for key in schema.get("required", ()) if key not in value]
        for key, item in value.items():
            if key in schema.get("properties", {}):
                found += problems(item, schema["properties"][key], doc, f"{where}.{key}")
            elif schema.get("properties") and "additionalProperties" not in schema:
                found.append(f"{where}: {key!r} is not documented")
    if isinstance(value, list):
        prefix = schema.get("prefixItems", [])
        for i, item in enumerate(value):
            inner = prefix[i] if i < len(prefix) else schema.get("items", {})
            found += problems(item, inner, doc, f"{where}[{i}]")
    return found


def object_schema(schema: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """The object schema a response or body is made of: through ``$ref``, array items and
    the non-null arm of a ``oneOf``."""
    if "$ref" in schema:
        return object_schema(doc["components"]["schemas"][schema["$ref"].split("/")[-1]], doc)
    if schema.get("type") == "array":
        return object_schema(schema["items"], doc)
    if "oneOf" in schema:
        arms = [a for a in schema["oneOf"] if a.get("type") != "null"]
        if len(arms) == 1:
            return object_schema(arms[0], doc)
    return schema


def test_the_check_finds_what_does_not_fit() -> None:
    doc = {"components": {"schemas": {"Ended": {
        "type": "object", "required": ["run_id", "error"],
        "properties": {"run_id": {"type": "string"},
                       "error": {"oneOf": [{"type": "string"}, {"type": "null"}]},
                       "status": {"enum": ["failed", "succeeded"]}}}}}}
    ref = {"$ref": "#/components/schemas/Ended"}
    assert problems({"run_id": "a", "error": None, "status": "failed"}, ref, doc) == []
    assert problems({"run_id": 1, "error": None}, ref, doc) == ["$.run_id: 1 is not string"]
    assert problems({"run_id": "a"}, ref, doc) == ["$: no 'error'"]
    assert problems({"run_id": "a", "error": 2, "status": "x", "more": 1}, ref, doc) == [
        "$.error: 2 is not string", "$.status: 'x' is not one of ['failed', 'succeeded']",
        "$: 'more' is not documented"]
    assert problems([True], {"type": "array", "items": {"type": "integer"}}, doc) == [
        "$[0]: True is not integer"]


def make_workflows() -> list[Any]:
    @workflow(name="hello", triggers=[cron("0 9 * * *", timezone="Europe/Bucharest"),
                                      every(seconds=600), webhook(secret_env="HELLO_SECRET")])
    def hello() -> None:
        shell("greet", argv=["echo", "hello"])

    @workflow(name="failing")
    def failing() -> None:
        shell("boom", command="exit 3")

    @workflow(name="sleepy")
    def sleepy() -> None:
        shell("nap", command="sleep 30")

    return [hello, failing, sleepy]


@pytest.fixture
async def client() -> AsyncIterator[Any]:
    app = create_app(make_workflows(), triggers=False)
    async with AsyncTestClient(app, base_url="http://127.0.0.1", timeout=60) as c:
        yield c


async def test_every_api_operation_documents_its_answers_and_body(client: Any) -> None:
    doc = (await client.get("/schema/openapi.json")).json()
    operations = [(method, path, op) for path, item in doc["paths"].items() if path.startswith("/api/")
                  for method, op in item.items()]
    assert len(operations) >= 9, [(m, p) for m, p, _ in operations]
    for method, path, op in operations:
        where = f"{method.upper()} {path}"
        for code, answer in op["responses"].items():
            assert answer.get("content"), f"{where} {code}: no body documented"
            (schema,) = (media["schema"] for media in answer["content"].values())
            assert object_schema(schema, doc).get("properties"), f"{where} {code}: no properties"
            if code.startswith("4"):
                assert schema == {"$ref": "#/components/schemas/ApiError"}, (where, code)
        assert "401" in op["responses"], f"{where}: the token rule is not documented"
        if method == "post":
            body = op.get("requestBody")
            assert body and "schema" in body["content"]["application/json"], f"{where}: no body"
            # A decision needs its answer (SPEC §16); every other POST takes an empty body.
            needed = path.endswith("/decision")
            assert body["required"] is needed, f"{where}: a body is required: {needed}"
    start = doc["paths"]["/api/workflows/{name}/runs"]["post"]
    request = object_schema(start["requestBody"]["content"]["application/json"]["schema"], doc)
    assert set(request["properties"]) == {"params", "body", "wait"}
    assert request["properties"]["wait"]["type"] == "boolean"
    assert {"200", "202", "404", "415", "429"} <= set(start["responses"])


async def test_answers_fit_their_documented_schemas(client: Any) -> None:
    doc = (await client.get("/schema/openapi.json")).json()

    async def fits(method: str, path: str, status: int, **options: Any) -> Any:
        r = await client.request(method, path, **options)
        assert r.status_code == status, (path, r.text)
        template = next(p for p in doc["paths"] if _matches(p, path.split("?")[0]))
        answer = doc["paths"][template][method.lower()]["responses"][str(status)]
        schema = answer["content"]["application/json"]["schema"]
        assert problems(r.json(), schema, doc) == [], (path, r.json())
        return r.json()

    ended = await fits("POST", "/api/workflows/hello/runs", 200, json={"body": "x", "wait": True})
    queued = await fits("POST", "/api/workflows/sleepy/runs", 202, json={"body": {"n": [1, 2.5]}})
    await fits("GET", "/api/workflows", 200)
    await fits("GET", "/api/workflows/hello", 200)
    await fits("GET", f"/api/runs/{ended['run_id']}", 200)
    await fits("GET", "/api/runs?limit=5", 200)
    await fits("GET", "/api/workers", 200)
    await fits("POST", f"/api/runs/{queued['run_id']}/cancel", 202)
    failed = await fits("POST", "/api/workflows/failing/runs", 200, json={"wait": True})
    await fits("POST", f"/api/runs/{failed['run_id']}/retry", 202)
    await fits("GET", "/api/workflows/nope", 404)
    await fits("POST", f"/api/runs/{ended['run_id']}/cancel", 409)
    await fits("POST", "/api/workflows/hello/runs", 400, json={"wait": "yes"})
    await fits("POST", "/api/workflows/hello/runs", 415, content=b"{}",
               headers={"Content-Type": "text/plain"})
    await wait_run(client, queued["run_id"])


def _matches(template: str, path: str) -> bool:
    parts, given = template.split("/"), path.split("/")
    return len(parts) == len(given) and all(
        p == g or (p.startswith("{") and p.endswith("}")) for p, g in zip(parts, given, strict=True))


async def test_a_run_is_its_json_byte_for_byte(client: Any) -> None:
    """The typed answer is the JSON ``brain show --json`` prints: same names, order, values."""
    run_id = (await client.post("/api/workflows/hello/runs", json={"body": {"a": 1}, "wait": True})
              ).json()["run_id"]
    store = client.app.state["brain"].store
    expected = msgspec.json.encode((await store.get_run(run_id)).to_json_dict())
    assert (await client.get(f"/api/runs/{run_id}")).content == expected
    listed = msgspec.json.encode([r.to_json_dict() for r in await store.list_runs(limit=1)])
    assert (await client.get("/api/runs?limit=1")).content == listed


def test_trigger_summaries_keep_their_json() -> None:
    now = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    summaries = [trigger_summary(t, "wf", now) for t in (
        cron("0 9 * * *", timezone="Europe/Bucharest", name="morning"), every(seconds=600),
        webhook(secret_env="WF_SECRET", path="in/wf"), WatchTrigger(path="/data"))]
    assert msgspec.json.encode(summaries).decode() == (
        '[{"name":"morning","type":"cron","expr":"0 9 * * *","timezone":"Europe/Bucharest",'
        '"catchup":"latest","overlap":"skip","next_fire":"2026-01-06T07:00:00+00:00",'
        '"key":"name:morning"},'
        '{"name":null,"type":"every","seconds":600.0,"overlap":"skip",'
        '"next_fire":"2026-01-05T12:10:00+00:00","key":"every:600"},'
        '{"name":null,"type":"webhook","path":"in/wf","wait_seconds":30.0,'
        '"require_timestamp":false,"url_path":"/hooks/in/wf","key":"webhook:in/wf"},'
        '{"name":null,"type":"watch","path":"/data","patterns":["*"],"events":["created",'
        '"modified"],"recursive":false,"debounce_seconds":0.5,"key":"watch:/data * created,modified"}]')


def test_bodies_follow_the_models_they_show() -> None:
    """A field added to a run, a step or a trigger must be added to its body too."""
    for body, model in ((RunDetail, RunResult), (StepDetail, StepResult), (TriggerInput, TriggerData)):
        assert body.__struct_fields__ == (*model.model_fields, *model.model_computed_fields), body
    fields = TriggerSummary.__struct_fields__
    (union, *_) = typing.get_args(TriggerSpec)
    for model in typing.get_args(union):
        shown = [f for f in model.model_fields if f != "secret_env"]
        assert set(shown) <= set(fields), (model, set(shown) - set(fields))
        assert sorted(shown, key=fields.index) == shown, f"{model.__name__}: order differs"
