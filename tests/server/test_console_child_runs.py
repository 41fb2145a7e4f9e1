"""The console's run page links a child run and its parent both ways (SPEC §22)."""

from __future__ import annotations

import pytest
from litestar.testing import AsyncTestClient

from brain import shell, workflow
from brain.server import create_app

pytestmark = pytest.mark.usefixtures("collect_garbage_first")
HOST = "http://127.0.0.1"


@workflow
def hello(name: str) -> str:
    return shell("say", argv=["echo", f"hello {name}"])


@workflow
def greets() -> None:
    hello(name="ada")


async def test_the_run_pages_link_parent_and_child() -> None:
    result = await greets.arun()
    assert result.succeeded, result.error
    child_id = (result.steps["hello"].waiting_for or {})["run_id"]
    async with AsyncTestClient(create_app([greets, hello]), base_url=HOST, timeout=60) as client:
        parent_page = (await client.get(f"/runs/{result.run_id}")).text
        assert f'child run <a href="/runs/{child_id}">' in parent_page
        child_page = (await client.get(f"/runs/{child_id}")).text
        assert f'child of <a href="/runs/{result.run_id}">' in child_page
        assert "(step hello)" in child_page


def test_a_waiting_child_step_shows_its_child() -> None:
    from brain.results import StepResult
    from brain.server.console.waits import wait_view

    step = StepResult(name="hello", kind="workflow", status="waiting",
                      waiting_for={"kind": "run", "run_id": "abc123", "workflow": "hello"})
    view = wait_view("run1", step, base_url=HOST, token=False)
    assert view is not None and (view.kind, view.child, view.commands) == ("run", "abc123", [])
