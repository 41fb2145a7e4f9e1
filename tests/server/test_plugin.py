"""``BrainPlugin`` in a team's own Litestar app (SPEC §7), and ``Workflow.enqueue``."""

from __future__ import annotations

from typing import Any

import pytest
from litestar import Litestar, get, post
from litestar.testing import AsyncTestClient
from serve_support import wait_run

from brain import shell, trigger, workflow
from brain.server import BrainPlugin, create_app

# Steps run in this process (asyncio subprocesses): see ``collect_garbage_first``.
pytestmark = pytest.mark.usefixtures("collect_garbage_first")


def make_deploy() -> Any:
    @workflow(name="deploy")
    def deploy() -> None:
        target = shell("target", argv=["echo", trigger.body])
        shell("done", command=f"echo deployed {target}")

    return deploy


async def test_team_app_enqueues_and_run_executes() -> None:
    wf = make_deploy()

    @post("/deploy")
    async def start_deploy(data: dict[str, Any]) -> dict[str, str]:
        run_id = await wf.enqueue(body=data)
        return {"queued": run_id}

    @get("/team/ping")
    async def ping() -> dict[str, str]:
        return {"pong": "team"}

    app = Litestar(route_handlers=[start_deploy, ping], plugins=[BrainPlugin([wf])])
    async with AsyncTestClient(app, base_url="http://127.0.0.1") as client:
        # The team's own route.
        r = await client.get("/team/ping")
        assert r.status_code == 200 and r.json() == {"pong": "team"}

        # The Brain's routes.
        assert (await client.get("/health")).json() == {"status": "ok"}
        r = await client.get("/api/workflows")
        assert r.status_code == 200, r.text
        assert [w["name"] for w in r.json()] == ["deploy"]
        assert (await client.get("/api/workflows/deploy")).json()["steps_count"] == 2

        # A team handler queues a run; the plugin's executors run it.
        r = await client.post("/deploy", json={"env": "staging"})
        assert r.status_code == 201, r.text
        run_id = r.json()["queued"]
        assert isinstance(run_id, str) and run_id
        # Committed before enqueue returned.
        assert (await client.get(f"/api/runs/{run_id}")).status_code == 200
        run = await wait_run(client, run_id)
        assert run["status"] == "succeeded", run
        assert run["workflow"] == "deploy"
        assert run["trigger"]["event"] == "manual"
        assert run["trigger"]["body"] == '{"env":"staging"}'
        assert [s["output"] for s in run["steps"]] == ['{"env":"staging"}', 'deployed {"env":"staging"}']

        # The Brain's API starts runs in the same app too.
        r = await client.post("/api/workflows/deploy/runs", json={"body": "prod", "wait": True})
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "succeeded"
        listed = (await client.get("/api/runs", params={"workflow": "deploy"})).json()
        assert {item["run_id"] for item in listed} == {run_id, r.json()["run_id"]}


async def test_plugin_guards_the_api_like_create_app() -> None:
    wf = make_deploy()

    @get("/team/open")
    async def open_route() -> str:
        return "open"

    app = Litestar(route_handlers=[open_route], plugins=[BrainPlugin([wf])])
    async with AsyncTestClient(app, base_url="http://127.0.0.1") as client:
        evil = {"Host": "evil.example"}
        assert (await client.get("/team/open", headers=evil)).text == "open"  # the team's rules
        r = await client.get("/api/runs", headers=evil)
        assert r.status_code == 401
        assert r.json()["status_code"] == 401


async def test_enqueue_without_a_server_is_taken_by_the_next_one() -> None:
    """Outside a serving process ``enqueue`` commits to BRAIN_DATABASE_URL for a server to run."""
    wf = make_deploy()
    run_id = await wf.enqueue(body="offline")
    assert isinstance(run_id, str) and run_id
    async with AsyncTestClient(create_app([wf]), base_url="http://127.0.0.1") as client:
        run = await wait_run(client, run_id)
    assert run["status"] == "succeeded", run
    assert run["trigger"]["body"] == "offline"
    assert run["steps"][-1]["output"] == "deployed offline"
