"""Child runs executed in this process (SPEC §22): ``wf.run()`` queues a child per try of a
``workflow`` step and executes it here; its output (typed too) becomes the step's output; a
failed child fails the step, a retry queues a new child; a step timeout and a cancel reach
the children; depth is capped at 16; ``brain.testing`` mocks a child step by its name.

Each test runs on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brain import WorkflowDefinitionError, shell, step, workflow
from brain.results import RunStatus, StepStatus
from brain.store import Store
from brain.testing import run_workflow


@step
def shout(text: str) -> str:
    return text.upper()


@step
def stats(text: str) -> dict[str, Any]:
    return {"chars": len(text), "text": text}


@step
def boom(text: str) -> str:
    raise RuntimeError(f"no {text}")


@step
def flaky(path: str) -> str:
    counter = Path(path)
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    if n == 0:
        raise RuntimeError("the first try fails")
    return f"try {n + 1}"


@workflow
def child_text(text: str) -> str:
    return shout(text)


@workflow
def child_typed(text: str) -> dict[str, Any]:
    return stats(text)


@workflow
def child_fails(text: str) -> None:
    boom(text)


@workflow
def child_flaky(path: str) -> str:
    return flaky(path)


@workflow
def child_sleeps(seconds: int = 60) -> None:
    shell("nap", argv=["sleep", f"{seconds}"], timeout_seconds=120)


@workflow
def child_counts(n: int) -> int:
    return stats(f"{n}")


@workflow
def parent_text(word: str = "hi") -> None:
    got = child_text(text=word)
    shell("echo", argv=["echo", f"got {got}"])


@workflow
def parent_typed() -> dict[str, Any]:
    return child_typed(text="abc")


@workflow
def parent_of_failure() -> None:
    child_fails(text="x")
    shell("never", argv=["echo", "never"])


@workflow
def parent_retries(path: str) -> None:
    child_flaky.with_options(name="again", retries=1, retry_delay_seconds=0)(path=path)


@workflow
def parent_times_out() -> None:
    child_sleeps.with_options(timeout_seconds=1)(seconds=60)


@workflow
def middle() -> None:
    child_sleeps(seconds=60)


@workflow
def grandparent() -> None:
    middle()


@workflow
def parent_bad_value() -> None:
    word = shout("not a number")
    child_counts.with_options(retries=2, retry_delay_seconds=0)(n=word)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A SQLite file, or a PostgreSQL database of this test process's own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        yield request.getfixturevalue("pg_url")


async def child_of(store: Store, run_id: str, step_name: str) -> Any:
    """The child run the step's latest try queued."""
    run = await store.get_run(run_id)
    child_id = (run.steps[step_name].waiting_for or {})["run_id"]
    return await store.get_run(child_id)


async def test_the_childs_output_is_the_steps_output(url: str) -> None:
    async with Store(url) as store:
        result = await parent_text.arun(params={"word": "hey"}, store=store)
        assert result.succeeded, result.error
        assert result.steps["child_text"].kind == "workflow"
        assert result.steps["child_text"].output == "HEY"
        assert result.steps["echo"].output == "got HEY"
        child = await child_of(store, result.run_id, "child_text")
        assert child.status == RunStatus.SUCCEEDED
        assert child.parent == {"run_id": result.run_id, "step": "child_text"}
        assert child.params == {"text": "hey"}
        assert [r.run_id for r in await store.list_runs(parent=result.run_id)] == [child.run_id]


async def test_a_typed_output_arrives_as_json(url: str) -> None:
    async with Store(url) as store:
        result = await parent_typed.arun(store=store)
        assert result.succeeded, result.error
        assert result.steps["child_typed"].output == '{"chars":3,"text":"abc"}'
        assert result.output == {"chars": 3, "text": "abc"}


async def test_a_failed_child_fails_the_step(url: str) -> None:
    async with Store(url) as store:
        result = await parent_of_failure.arun(store=store)
        assert result.status == RunStatus.FAILED
        child = await child_of(store, result.run_id, "child_fails")
        assert child.status == RunStatus.FAILED
        error = result.steps["child_fails"].error or ""
        assert error.startswith(f"child run {child.run_id} failed: step 'boom' failed")
        assert "no x" in error
        assert result.steps["never"].status == StepStatus.SKIPPED


async def test_each_retry_queues_a_new_child(url: str, tmp_path: Path) -> None:
    async with Store(url) as store:
        result = await parent_retries.arun(params={"path": str(tmp_path / "n")}, store=store)
        assert result.succeeded, result.error
        assert (result.steps["again"].tries, result.steps["again"].output) == (2, "try 2")
        children = await store.list_runs(parent=result.run_id)
        assert sorted(c.status for c in children) == [RunStatus.FAILED, RunStatus.SUCCEEDED]


async def test_an_invalid_parameter_fails_the_step_without_retries(url: str) -> None:
    async with Store(url) as store:
        result = await parent_bad_value.arun(store=store)
        assert result.status == RunStatus.FAILED
        assert result.steps["child_counts"].tries == 1
        assert "not valid" in (result.steps["child_counts"].error or "")
        assert await store.list_runs(parent=result.run_id) == []


async def test_a_step_timeout_cancels_the_child(url: str) -> None:
    async with Store(url) as store:
        result = await parent_times_out.arun(store=store)
        assert result.status == RunStatus.FAILED
        assert result.steps["child_sleeps"].error == "timed out after 1 s"
        child = await child_of(store, result.run_id, "child_sleeps")
        for _ in range(100):  # its executor stops it within a second
            if (await store.get_run(child.run_id)).status == RunStatus.CANCELLED:
                break
            await asyncio.sleep(0.1)
        assert (await store.get_run(child.run_id)).status == RunStatus.CANCELLED


async def test_cancelling_a_parent_cancels_children_and_grandchildren(url: str) -> None:
    async with Store(url) as store:
        running = asyncio.create_task(grandparent.arun(store=store, on_wait=lambda *_: None))
        nap = None
        for _ in range(300):
            naps = [r for r in await store.list_runs(workflow="child_sleeps")
                    if r.status == RunStatus.RUNNING]
            if naps:
                nap = naps[0]
                break
            await asyncio.sleep(0.05)
        assert nap is not None and nap.parent is not None
        mid = await store.get_run(nap.parent["run_id"])
        top_id = (mid.parent or {})["run_id"]
        await store.request_cancel(top_id)
        result = await asyncio.wait_for(running, 30)
        assert result.status == RunStatus.CANCELLED
        for run_id in (mid.run_id, nap.run_id):
            for _ in range(50):
                if (await store.get_run(run_id)).status == RunStatus.CANCELLED:
                    break
                await asyncio.sleep(0.1)
            assert (await store.get_run(run_id)).status == RunStatus.CANCELLED


def _chain(levels: int) -> Any:
    """``levels`` + 1 workflows, each calling the one below: the top one is the last."""
    @workflow(name="depth-0")
    def leaf() -> None:
        shell("echo", argv=["echo", "bottom"])

    def calling(below: Any) -> Any:
        def call() -> None:
            below()
        return call

    below = leaf
    for n in range(1, levels + 1):
        below = workflow(name=f"depth-{n}")(calling(below))
    return below


async def test_depth_17_fails_the_step(url: str) -> None:
    top = _chain(17)  # the top run is depth 0: depth-0 would run at depth 17
    async with Store(url) as store:
        result = await top.arun(store=store)
        assert result.status == RunStatus.FAILED
        runs = await store.list_runs(limit=100)
        assert len([r for r in runs if r.workflow.startswith("depth-")]) == 17
        deepest = next(r for r in runs if r.workflow == "depth-1")
        error = (await store.get_run(deepest.run_id)).steps["depth-0"].error or ""
        assert "nest at most 16 deep" in error


def test_testing_mocks_a_child_step_by_its_name() -> None:
    mocked = run_workflow(parent_text, params={"word": "hey"}, mocks={"child_text": "MOCK"})
    assert mocked.succeeded and mocked.steps["echo"].output == "got MOCK"
    real = run_workflow(parent_text, params={"word": "hey"})
    assert real.succeeded and real.steps["child_text"].output == "HEY"


def test_unknown_or_missing_parameters_are_definition_errors() -> None:
    with pytest.raises(WorkflowDefinitionError, match="has no parameter 'txt'"):
        @workflow
        def wrong_name() -> None:
            child_text(txt="x")
    with pytest.raises(WorkflowDefinitionError, match="needs 'text'"):
        @workflow
        def missing() -> None:
            child_text()


def test_children_are_named_like_step_functions() -> None:
    @workflow
    def twice() -> None:
        child_text(text="a")
        child_text(text="b")
        child_text.with_options(name="third")(text="c")

    assert twice.graph.nodes == ("child_text", "child_text-2", "third")


def test_the_workflow_in_an_f_string_is_its_steps_output() -> None:
    @workflow
    def quoting() -> None:
        child_text(text="x")
        shell("say", argv=["echo", f"child said {child_text}"])

    assert quoting.graph.edges == (("child_text", "say"),)
    result = run_workflow(quoting, mocks={"child_text": "X!"})
    assert result.steps["say"].output == "child said X!"
