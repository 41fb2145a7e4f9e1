"""Every enqueue goes one way: one factory builds the run, one function queues it under one
limit, ``Workflow.enqueue`` included, and failure handlers take the loaded definitions."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from brain import shell, workflow
from brain.results import TriggerData
from brain.runner.queueing import failure_runs, new_run
from brain.store import Store


@workflow(name="queued_twice")
def queued_twice():
    first = shell("first", command="echo 1")
    shell("second", argv=["echo", f"{first}"])


def test_a_new_run_has_a_fresh_id_the_definition_and_a_row_per_step() -> None:
    one, two = new_run(queued_twice, TriggerData()), new_run(queued_twice, TriggerData())
    assert one.run_id != two.run_id and len(one.run_id) == 32
    assert one.workflow == "queued_twice"
    assert one.definition_hash == queued_twice.definition_hash
    assert list(one.step_rows) == [("first", "shell"), ("second", "shell")]


def test_workflow_enqueue_without_a_server_keeps_the_queue_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from brain.store.queue import QueueFull

    url = f"sqlite:///{tmp_path / 'brain.db'}"
    monkeypatch.setenv("BRAIN_DATABASE_URL", url)
    monkeypatch.setenv("BRAIN_MAX_QUEUED_RUNS", "2")

    async def scenario() -> list[str]:
        ids = [await queued_twice.enqueue("a"), await queued_twice.enqueue("b")]
        with pytest.raises(QueueFull):
            await queued_twice.enqueue("c")
        return ids

    ids = asyncio.run(scenario())

    async def read() -> list[tuple[str, str, list[str]]]:
        async with Store(url) as store:
            runs = [await store.get_run(i) for i in ids]
        return [(r.status, r.trigger.body, list(r.steps)) for r in runs]

    assert asyncio.run(read()) == [("queued", "a", ["first", "second"]),
                                   ("queued", "b", ["first", "second"])]


def test_failure_handlers_are_queued_as_loaded_now_and_a_handlers_failure_queues_nothing() -> None:
    @workflow(name="on_call")
    def on_call():
        shell("page", command="echo old")

    @workflow(name="nightly", on_failure=[on_call])
    def nightly():
        shell("job", command="false")

    @workflow(name="on_call")
    def on_call_reloaded():
        shell("page", command="echo new")

    trigger = TriggerData(event="schedule", body="x")
    (stale,) = failure_runs(nightly, trigger, "r1", "boom", "job", "exit 1")
    (current,) = failure_runs(nightly, trigger, "r1", "boom", "job", "exit 1",
                              loaded={"on_call": on_call_reloaded})
    assert stale.definition_hash == on_call.definition_hash
    assert current.definition_hash == on_call_reloaded.definition_hash
    assert current.trigger.event == "failure"
    assert json.loads(current.trigger.body) == {
        "run_id": "r1", "workflow": "nightly", "error": "boom", "failed_step": "job",
        "failed_step_error": "exit 1"}
    assert failure_runs(nightly, TriggerData(event="failure"), "r2", "boom", None, None) == []
