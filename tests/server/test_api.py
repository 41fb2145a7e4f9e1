"""The HTTP API (SPEC §7) through Litestar's ``AsyncTestClient`` on ``create_app([...])``.

The client runs the app's start-up and shut-down, so the executors really run the runs.
Its base URL is ``http://127.0.0.1``: without ``BRAIN_API_TOKEN`` only loopback hosts may call.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shlex
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from litestar.testing import AsyncTestClient
from serve_support import wait_run
from support import read_pid, wait_gone

from brain import cron, every, for_each, parallel, shell, step, trigger, webhook, when, workflow
from brain.server import create_app
from brain.server.webhooks import sign

ClientFactory = Callable[..., AbstractAsyncContextManager[Any]]

# Steps run in this process (asyncio subprocesses): see ``collect_garbage_first``.
pytestmark = pytest.mark.usefixtures("collect_garbage_first")


@pytest.fixture
def api() -> ClientFactory:
    """``async with api([wf, ...], **create_app_options) as client``: a client on 127.0.0.1."""

    @asynccontextmanager
    async def open_client(workflows: list[Any], **options: Any) -> AsyncIterator[Any]:
        app = create_app(workflows, **options)
        async with AsyncTestClient(app, base_url="http://127.0.0.1", timeout=60) as client:
            yield client

    return open_client


def json_error(r: httpx.Response, status: int) -> str:
    """Check the JSON error shape; return the detail."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    data = r.json()
    assert data["status_code"] == status
    assert isinstance(data["detail"], str) and data["detail"]
    assert "Traceback" not in r.text
    assert 'File "' not in r.text
    return str(data["detail"])


def make_hello() -> Any:
    @workflow(name="hello", description="Says hello.")
    def hello() -> None:
        greeting = shell("greet", argv=["echo", f"hello {trigger.body}"])
        shell("shout", command=f"echo {greeting} | tr a-z A-Z")

    return hello


def make_failing() -> Any:
    @workflow(name="failing")
    def failing() -> None:
        shell("boom", command="echo broken >&2; exit 3")
        shell("never", argv=["echo", "never"])

    return failing


# --- health, workflows, schema -------------------------------------------------------------------


async def test_health(api: ClientFactory) -> None:
    async with api([make_hello()]) as client:
        r = await client.get("/health")
        assert r.status_code == 200
        assert r.json() == {"status": "ok"}


async def test_list_workflows(api: ClientFactory) -> None:
    async with api([make_hello(), make_failing()]) as client:
        r = await client.get("/api/workflows")
        assert r.status_code == 200, r.text
        items = r.json()
        assert sorted(item["name"] for item in items) == ["failing", "hello"]
        hello = next(item for item in items if item["name"] == "hello")
        assert hello["description"] == "Says hello."
        assert hello["triggers"] == []


async def test_get_workflow_steps_edges_triggers_next_fires(api: ClientFactory) -> None:
    @workflow(name="shaped", triggers=[cron("0 9 * * *", timezone="Europe/Bucharest"),
                                       every(seconds=600), webhook(secret_env="SHAPED_SECRET")])
    def shaped() -> None:
        a = shell("a", argv=["echo", "a"])
        with parallel():
            shell("b", argv=["echo", f"{a}"])
            shell("c", argv=["echo", "c"])
        shell("d", argv=["echo", "d"])

    async with api([shaped], triggers=False) as client:
        before = datetime.now(UTC)
        r = await client.get("/api/workflows/shaped")
        after = datetime.now(UTC)
        assert r.status_code == 200, r.text
        data = r.json()
    assert data["name"] == "shaped"
    assert [s["name"] for s in data["steps"]] == ["a", "b", "c", "d"]
    assert {s["kind"] for s in data["steps"]} == {"shell"}
    assert {tuple(e) for e in data["edges"]} == {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")}
    by_type = {t["type"]: t for t in data["triggers"]}
    assert set(by_type) == {"cron", "every", "webhook"}

    cron_next = datetime.fromisoformat(by_type["cron"]["next_fire"])
    assert cron_next.tzinfo is not None
    assert before < cron_next <= after + timedelta(days=1, hours=2)
    local = cron_next.astimezone(ZoneInfo("Europe/Bucharest"))
    assert (local.hour, local.minute, local.second) == (9, 0, 0)

    every_next = datetime.fromisoformat(by_type["every"]["next_fire"])
    assert every_next.timestamp() % 600 == 0  # multiples of N seconds since the epoch
    assert before < every_next <= after + timedelta(seconds=600)

    assert by_type["webhook"]["url_path"] == "/hooks/shaped"
    assert "next_fire" not in by_type["webhook"] or by_type["webhook"]["next_fire"] is None


async def test_openapi_schema(api: ClientFactory) -> None:
    async with api([make_hello()]) as client:
        r = await client.get("/schema/openapi.json")
        assert r.status_code == 200, r.text
        paths = r.json()["paths"]
        for path in ("/health", "/api/workflows", "/api/workflows/{name}", "/api/workflows/{name}/runs",
                     "/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/cancel"):
            assert path in paths, path
        assert "post" in paths["/api/workflows/{name}/runs"]
        r = await client.get("/schema")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/html")


# --- starting runs ---------------------------------------------------------------------------------


async def test_start_run_202_then_succeeds(api: ClientFactory) -> None:
    async with api([make_hello()]) as client:
        r = await client.post("/api/workflows/hello/runs", json={"body": "world"})
        assert r.status_code == 202, r.text
        assert set(r.json()) == {"run_id"}
        run = await wait_run(client, r.json()["run_id"])
    assert run["status"] == "succeeded", run
    assert run["workflow"] == "hello"
    assert run["error"] is None
    assert run["trigger"]["event"] == "manual"
    assert run["trigger"]["body"] == "world"
    assert [s["name"] for s in run["steps"]] == ["greet", "shout"]
    assert [s["output"] for s in run["steps"]] == ["hello world", "HELLO WORLD"]
    assert all(s["status"] == "succeeded" for s in run["steps"])


async def test_start_run_with_json_body_and_wait(api: ClientFactory) -> None:
    async with api([make_hello(), make_failing()]) as client:
        r = await client.post("/api/workflows/hello/runs", json={"body": {"x": [1, 2]}, "wait": True})
        assert r.status_code == 200, r.text
        data = r.json()
        assert set(data) == {"run_id", "status", "error", "output"}
        assert data["status"] == "succeeded"
        assert data["error"] is None
        run = (await client.get(f"/api/runs/{data['run_id']}")).json()
        assert run["trigger"]["body"] == '{"x":[1,2]}'  # a non-string body is stored as compact JSON
        assert run["steps"][0]["output"] == 'hello {"x":[1,2]}'

        r = await client.post("/api/workflows/failing/runs", json={"wait": True})
        assert r.status_code == 200, r.text
        data = r.json()
        assert data["status"] == "failed"
        assert "step 'boom' failed" in data["error"]
        run = (await client.get(f"/api/runs/{data['run_id']}")).json()
        assert [s["status"] for s in run["steps"]] == ["failed", "skipped"]


async def test_conditions_blocks_and_instances_in_the_json(api: ClientFactory) -> None:
    """SPEC §12 in the API: a workflow's conditions and for_each blocks, a run's
    instances and skipped steps."""
    @step
    def yes() -> bool:
        return True

    @workflow(name="fanned")
    def fanned() -> None:
        flag = yes()
        with when(flag), for_each(["a", "b"], max_parallel=2) as x:
            shell("each", argv=["echo", f"{x}"])
        shell("never", argv=["echo", "never"], when=~flag)

    async with api([fanned], triggers=False) as client:
        shape = (await client.get("/api/workflows/fanned")).json()
        r = await client.post("/api/workflows/fanned/runs", json={"wait": True})
        assert r.status_code == 200, r.text
        run = (await client.get(f"/api/runs/{r.json()['run_id']}")).json()
    steps = {s["name"]: s for s in shape["steps"]}
    assert steps["each"]["when"] == ["{yes}"] and steps["each"]["for_each"] == 0
    assert steps["never"]["when"] == ["not {yes}"] and steps["never"]["for_each"] is None
    assert shape["for_each"] == [{"index": 0, "label": "for_each [2 items]", "steps": ["each"],
                                  "max_parallel": 2}]
    assert run["status"] == "succeeded"
    assert [(s["name"], s["status"], s["output"]) for s in run["steps"]] == [
        ("yes", "succeeded", "true"), ("each", "succeeded", '["a","b"]'),
        ("each[0]", "succeeded", "a"), ("each[1]", "succeeded", "b"),
        ("never", "skipped", None)]
    assert run["steps"][-1]["error"] == "condition not {yes} is true"


async def test_unknown_workflow_is_404_json(api: ClientFactory) -> None:
    async with api([make_hello()]) as client:
        assert "nope" in json_error(await client.get("/api/workflows/nope"), 404)
        json_error(await client.post("/api/workflows/nope/runs", json={"body": "x"}), 404)
        assert (await client.get("/api/runs")).json() == []


@pytest.mark.parametrize("content", [b"{bad", b'{"body": "x",}', b"not json at all", b'{"wait": tru'])
async def test_malformed_json_is_400_with_useful_detail(api: ClientFactory, content: bytes) -> None:
    async with api([make_hello()]) as client:
        r = await client.post("/api/workflows/hello/runs", content=content,
                              headers={"Content-Type": "application/json"})
        detail = json_error(r, 400)
        assert "json" in detail.lower(), detail
        assert (await client.get("/api/runs")).json() == []  # no run created


@pytest.mark.parametrize(("body", "field"), [
    ({"wait": "yes please"}, "wait"),
    ({"wait": [True]}, "wait"),
    (["body", "x"], None),
    ("just a string", None),
    (42, None),
])
async def test_wrong_types_are_400(api: ClientFactory, body: Any, field: str | None) -> None:
    async with api([make_hello()]) as client:
        r = await client.post("/api/workflows/hello/runs", content=json.dumps(body),
                              headers={"Content-Type": "application/json"})
        json_error(r, 400)
        if field:
            assert field in r.text  # the answer says which field is wrong
        assert (await client.get("/api/runs")).json() == []


# --- reading runs ------------------------------------------------------------------------------


async def test_list_runs_filters_and_limit(api: ClientFactory) -> None:
    async with api([make_hello(), make_failing()]) as client:
        ids = []
        for name in ("hello", "failing", "hello"):
            r = await client.post(f"/api/workflows/{name}/runs", json={"body": name, "wait": True})
            assert r.status_code == 200, r.text
            ids.append(r.json()["run_id"])
            await asyncio.sleep(0.01)  # distinct creation times

        everything = (await client.get("/api/runs")).json()
        assert [r["run_id"] for r in everything] == ids[::-1]  # newest first
        assert {r["status"] for r in everything} == {"succeeded", "failed"}

        hello = (await client.get("/api/runs", params={"workflow": "hello"})).json()
        assert [r["run_id"] for r in hello] == [ids[2], ids[0]]
        assert all(r["workflow"] == "hello" for r in hello)

        failed = (await client.get("/api/runs", params={"status": "failed"})).json()
        assert [r["run_id"] for r in failed] == [ids[1]]
        assert failed[0]["error"].startswith("step 'boom' failed")

        both = await client.get("/api/runs", params={"workflow": "hello", "status": "failed"})
        assert both.status_code == 200 and both.json() == []

        limited = (await client.get("/api/runs", params={"limit": 1})).json()
        assert [r["run_id"] for r in limited] == [ids[2]]
        limited = (await client.get("/api/runs", params={"limit": 2, "workflow": "hello"})).json()
        assert [r["run_id"] for r in limited] == [ids[2], ids[0]]

        json_error(await client.get("/api/runs", params={"limit": 0}), 400)
        json_error(await client.get("/api/runs", params={"limit": "ten"}), 400)


async def test_get_run_by_id_and_unique_prefix(api: ClientFactory) -> None:
    async with api([make_hello()]) as client:
        r = await client.post("/api/workflows/hello/runs", json={"body": "prefix", "wait": True})
        run_id = r.json()["run_id"]
        full = (await client.get(f"/api/runs/{run_id}")).json()
        assert full["run_id"] == run_id
        for key in ("run_id", "workflow", "status", "error", "started_at", "ended_at", "trigger",
                    "steps"):
            assert key in full, key
        assert [s["name"] for s in full["steps"]] == ["greet", "shout"]
        step = full["steps"][0]
        for key in ("name", "kind", "status", "inputs", "output", "error", "tries", "started_at",
                    "ended_at"):
            assert key in step, key
        by_prefix = await client.get(f"/api/runs/{run_id[:8]}")
        assert by_prefix.status_code == 200, by_prefix.text
        assert by_prefix.json() == full
        assert (await client.get(f"/api/runs/{run_id.upper()[:10]}")).json()["run_id"] == run_id


async def test_unknown_run_is_404_json(api: ClientFactory) -> None:
    async with api([make_hello()]) as client:
        for run_id in ("0123456789abcdef0123456789abcdef", "deadbeef", "not-hex!"):
            json_error(await client.get(f"/api/runs/{run_id}"), 404)
            json_error(await client.post(f"/api/runs/{run_id}/cancel"), 404)


async def test_other_errors_are_json_without_traceback(api: ClientFactory) -> None:
    async with api([make_hello()]) as client:
        json_error(await client.get("/api/no-such-route"), 404)
        json_error(await client.delete("/api/runs"), 405)
        json_error(await client.get("/api/workflows/hello/runs"), 405)


# --- cancel ------------------------------------------------------------------------------------------


async def test_cancel_running_run_then_finished_run_is_409(api: ClientFactory, tmp_path: Path) -> None:
    pid_file = tmp_path / "sleeper.pid"

    @workflow(name="sleepy")
    def sleepy() -> None:
        shell("sleeper", command=f"echo $$ > {shlex.quote(str(pid_file))}; sleep 60")
        shell("after", argv=["echo", "after"])

    async with api([sleepy, make_hello()]) as client:
        r = await client.post("/api/workflows/sleepy/runs", json={})
        assert r.status_code == 202
        run_id = r.json()["run_id"]
        pid = await asyncio.to_thread(read_pid, pid_file, 20)
        for _ in range(100):  # a step is marked running once it has run for 50 ms
            run = (await client.get(f"/api/runs/{run_id}")).json()
            if run["steps"][0]["status"] == "running":
                break
            await asyncio.sleep(0.05)
        assert run["status"] == "running"
        assert run["steps"][0]["status"] == "running"

        r = await client.post(f"/api/runs/{run_id}/cancel")
        assert r.status_code in (200, 202), r.text
        assert r.json()["run_id"] == run_id
        run = await wait_run(client, run_id)
        assert run["status"] == "cancelled", run
        assert [s["status"] for s in run["steps"]] == ["cancelled", "cancelled"]
        assert await asyncio.to_thread(wait_gone, pid, 10), "the running step's process was not killed"

        r = await client.post(f"/api/runs/{run_id}/cancel")
        assert "cancelled" in json_error(r, 409)

        done = (await client.post("/api/workflows/hello/runs", json={"wait": True})).json()
        assert done["status"] == "succeeded"
        r = await client.post(f"/api/runs/{done['run_id']}/cancel")
        json_error(r, 409)
        assert (await client.get(f"/api/runs/{done['run_id']}")).json()["status"] == "succeeded"


async def test_cancel_queued_run(api: ClientFactory) -> None:
    async with api([make_hello()], execute=False) as client:
        run_id = (await client.post("/api/workflows/hello/runs", json={"body": "q"})).json()["run_id"]
        assert (await client.get(f"/api/runs/{run_id}")).json()["status"] == "queued"
        r = await client.post(f"/api/runs/{run_id}/cancel")
        assert r.status_code in (200, 202), r.text
        run = (await client.get(f"/api/runs/{run_id}")).json()
        assert run["status"] == "cancelled"
        assert all(s["status"] == "cancelled" for s in run["steps"])


# --- back-pressure ----------------------------------------------------------------------------------


async def test_queue_full_is_429_with_retry_after(api: ClientFactory,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_MAX_QUEUED_RUNS", "2")
    monkeypatch.setenv("QUEUE_HOOK_SECRET", "queue-secret")

    @workflow(name="queued", triggers=[webhook(secret_env="QUEUE_HOOK_SECRET")])
    def queued() -> None:
        shell("ok", argv=["echo", "ok"])

    async with api([queued], execute=False) as client:
        for _ in range(2):
            r = await client.post("/api/workflows/queued/runs", json={"body": "x"})
            assert r.status_code == 202, r.text
        r = await client.post("/api/workflows/queued/runs", json={"body": "x"})
        json_error(r, 429)
        retry_after = r.headers.get("retry-after")
        assert retry_after is not None and retry_after.isdigit() and int(retry_after) > 0

        body = b'{"hook": 1}'
        r = await client.post("/hooks/queued", content=body,
                              headers={"X-Brain-Signature": sign("queue-secret", body)})
        json_error(r, 429)
        assert r.headers.get("retry-after", "").isdigit()

        runs = (await client.get("/api/runs", params={"limit": 100})).json()
        assert len(runs) == 2
        assert {r["status"] for r in runs} == {"queued"}


# --- max_concurrent_runs ------------------------------------------------------------------------------


async def test_unlimited_workflow_runs_overlap(api: ClientFactory, tmp_path: Path) -> None:
    """Control for the next test: without a limit two runs do run at the same time here."""
    starts = shlex.quote(str(tmp_path / "starts"))

    @workflow(name="together")
    def together() -> None:
        # Succeeds only if the other run starts while this one waits (bounded: 20 s).
        shell("meet", command=f"echo x >> {starts}; i=0; "
                              f"while [ $(wc -l < {starts}) -lt 2 ] && [ $i -lt 200 ]; "
                              f"do sleep 0.1; i=$((i+1)); done; [ $(wc -l < {starts}) -ge 2 ]")

    async with api([together]) as client:
        ids = [(await client.post("/api/workflows/together/runs", json={})).json()["run_id"]
               for _ in range(2)]
        runs = [await wait_run(client, run_id, 40) for run_id in ids]
    assert [r["status"] for r in runs] == ["succeeded", "succeeded"]


async def test_max_concurrent_runs_one_never_overlaps(api: ClientFactory, tmp_path: Path) -> None:
    log = tmp_path / "log"
    q = shlex.quote(str(log))

    @workflow(name="serial", max_concurrent_runs=1)
    def serial() -> None:
        shell("record", command=f"echo start {trigger.body} >> {q}; sleep 0.3; "
                                f"echo end {trigger.body} >> {q}")

    async with api([serial]) as client:
        r = await client.get("/api/workflows/serial")
        assert r.json()["max_concurrent_runs"] == 1
        ids = []
        for i in range(4):
            r = await client.post("/api/workflows/serial/runs", json={"body": f"run{i}"})
            assert r.status_code == 202
            ids.append(r.json()["run_id"])
        runs = [await wait_run(client, run_id, 40) for run_id in ids]
    assert [r["status"] for r in runs] == ["succeeded"] * 4
    lines = log.read_text().split("\n")[:-1]
    assert len(lines) == 8, lines
    for i in range(0, 8, 2):
        kind, who = lines[i].split()
        assert kind == "start", lines
        assert lines[i + 1] == f"end {who}", f"runs overlapped: {lines}"
    assert sorted(line.split()[1] for line in lines[::2]) == [f"run{i}" for i in range(4)]
    # The stored times agree: each run starts after the previous one ended.
    spans = sorted((datetime.fromisoformat(r["started_at"]), datetime.fromisoformat(r["ended_at"]))
                   for r in runs)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, spans
