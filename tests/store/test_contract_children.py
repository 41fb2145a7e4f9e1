"""The store contract, child runs (SPEC §22): a step's try queues exactly one child (found
again when started again), nested at most 16 deep; the child's end ends its parent's wait
(and wakes the parent) in the same transaction, only for the try that queued it; a cancel
reaches the children still going, and their children; a timer that ends a child step
cancels its child.

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from store import contract_support as contract
from store.contract_support import HASH, make_run, new_id

from brain._clock import utcnow
from brain.results import RunStatus, StepStatus, TriggerData, WaitEnd, WaitTimer
from brain.store.base import QueuedRun

store = contract.store
contract_database = contract.contract_database

OWNER = "parent:1:a"


def child_run(workflow: str = "child") -> QueuedRun:
    """A queued run of ``workflow`` with one step."""
    return QueuedRun(run_id=new_id(), workflow=workflow, definition_hash=HASH,
                     trigger=TriggerData(), step_rows=[("only", "shell")])


async def start(store: Any, parent: str, step: str = "sum", tries: int = 1,
                **options: Any) -> tuple[str, bool] | None:
    """Start try ``tries`` of child step ``step`` of ``parent`` (under ``OWNER``)."""
    return await store.start_child(parent, step, tries, child_run(), inputs={"x": 1},
                                   started_at=utcnow(), waiting_for={"kind": "run",
                                                                     "workflow": "child"},
                                   owner=OWNER, **options)


async def parent_run(store: Any) -> str:
    return await make_run(store, "parent", steps=("sum", "after"), kind="workflow", owner=OWNER)


async def test_a_try_queues_one_child_and_waits_for_it(store: Any) -> None:
    parent = await parent_run(store)
    started = await start(store, parent)
    assert started is not None
    child_id, created = started
    assert created
    again = await start(store, parent)  # the same try started again: found, not queued twice
    assert again == (child_id, False)
    children = await store.list_runs(parent=parent)
    assert [c.run_id for c in children] == [child_id]
    child = await store.get_run(child_id)
    assert child.status == RunStatus.QUEUED
    assert child.parent == {"run_id": parent, "step": "sum"}
    step = (await store.get_run(parent)).steps["sum"]
    assert step.status == StepStatus.WAITING and step.tries == 1
    assert step.waiting_for == {"kind": "run", "workflow": "child", "run_id": child_id}
    assert [(c.run_id, c.step, c.tries) for c in await store.children_of(parent)] == \
        [(child_id, "sum", 1)]


async def test_a_child_deeper_than_the_cap_is_not_queued(store: Any) -> None:
    parent = await parent_run(store)
    assert await start(store, parent, max_depth=0) is None
    assert await store.list_runs(parent=parent) == []
    assert (await store.get_run(parent)).steps["sum"].status == StepStatus.PENDING
    # Depth counts down the chain: a child of a child is depth 2.
    child_id, _ = await start(store, parent) or ("", False)
    await store.claim_run(child_id, OWNER, 600)
    assert await store.start_child(child_id, "only", 1, child_run(), inputs={},
                                   started_at=utcnow(), waiting_for={"kind": "run"},
                                   owner=OWNER, max_depth=1) is None
    assert await store.start_child(child_id, "only", 1, child_run(), inputs={},
                                   started_at=utcnow(), waiting_for={"kind": "run"},
                                   owner=OWNER, max_depth=2) is not None


async def test_the_childs_end_ends_the_wait_and_wakes_the_parent(store: Any) -> None:
    parent = await parent_run(store)
    child_id, _ = await start(store, parent) or ("", False)
    await store.park_run(parent, OWNER, 0)
    assert (await store.get_run(parent)).status == RunStatus.WAITING
    await store.claim_run(child_id, "child:1:a", 600)
    await store.finish_run(child_id, RunStatus.SUCCEEDED, owner="child:1:a")
    step = (await store.get_run(parent)).steps["sum"]
    assert step.status == StepStatus.SUCCEEDED
    assert step.output == "null"  # the child returned nothing
    assert (await store.get_run(parent)).status == RunStatus.QUEUED  # woken
    assert await store.run_wakes(parent) == 1


async def test_a_failed_child_fails_the_step_with_its_error(store: Any) -> None:
    parent = await parent_run(store)
    child_id, _ = await start(store, parent) or ("", False)
    await store.claim_run(child_id, "child:1:a", 600)
    await store.finish_run(child_id, RunStatus.FAILED, "step 'only' failed: boom",
                           owner="child:1:a")
    step = (await store.get_run(parent)).steps["sum"]
    assert step.status == StepStatus.FAILED
    assert step.error == f"child run {child_id} failed: step 'only' failed: boom"


async def test_an_earlier_trys_child_never_ends_a_later_try(store: Any) -> None:
    parent = await parent_run(store)
    first, _ = await start(store, parent, tries=1) or ("", False)
    second, created = await start(store, parent, tries=2) or ("", False)
    assert created and second != first
    await store.claim_run(first, "child:1:a", 600)
    await store.finish_run(first, RunStatus.SUCCEEDED, owner="child:1:a")
    assert (await store.get_run(parent)).steps["sum"].status == StepStatus.WAITING
    assert len(await store.list_runs(parent=parent)) == 2


async def test_cancelling_a_parent_cancels_its_children_and_theirs(store: Any) -> None:
    parent = await parent_run(store)
    child_id, _ = await start(store, parent) or ("", False)
    await store.claim_run(child_id, "child:1:a", 600)
    grandchild, _ = await store.start_child(child_id, "only", 1, child_run(), inputs={},
                                            started_at=utcnow(),
                                            waiting_for={"kind": "run"},
                                            owner="child:1:a") or ("", False)
    await store.park_run(child_id, "child:1:a", 0)
    _, active = await store.request_cancel(parent)
    assert active
    # The parent's executor is alive: asked to stop. Its child waits (nobody executes it)
    # and its grandchild is queued: both cancelled at once.
    assert (await store.run_row(parent)).cancel_requested  # type: ignore[union-attr]
    assert (await store.get_run(child_id)).status == RunStatus.CANCELLED
    assert (await store.get_run(grandchild)).status == RunStatus.CANCELLED
    # A cancel asked for keeps the child's end from ending the parent's step: its executor
    # cancels it.
    assert (await store.get_run(parent)).steps["sum"].status == StepStatus.WAITING


async def test_a_parents_end_cancels_its_children_still_going(store: Any) -> None:
    parent = await parent_run(store)
    child_id, _ = await start(store, parent) or ("", False)
    await store.finish_run(parent, RunStatus.FAILED, "step 'after' failed: x", owner=OWNER)
    assert (await store.get_run(child_id)).status == RunStatus.CANCELLED


async def test_a_child_step_that_times_out_cancels_its_child(store: Any) -> None:
    parent = await parent_run(store)
    due = utcnow() - timedelta(seconds=1)
    timer = WaitTimer(due, WaitEnd(StepStatus.FAILED.value, "timed out after 1 s"))
    child_id, _ = await start(store, parent, timer=timer) or ("", False)
    fired = await store.fire_due_timers(utcnow())
    assert fired == [(parent, "sum")]
    step = (await store.get_run(parent)).steps["sum"]
    assert (step.status, step.error) == (StepStatus.FAILED, "timed out after 1 s")
    assert (await store.get_run(child_id)).status == RunStatus.CANCELLED


async def test_cancelling_a_child_fails_its_parents_step(store: Any) -> None:
    parent = await parent_run(store)
    child_id, _ = await start(store, parent) or ("", False)
    await store.request_cancel(child_id)  # queued: cancelled at once
    step = (await store.get_run(parent)).steps["sum"]
    assert (step.status, step.error) == (StepStatus.FAILED,
                                         f"child run {child_id} failed: cancelled")


async def test_the_parent_column_is_in_the_run_json(store: Any) -> None:
    parent = await parent_run(store)
    child_id, _ = await start(store, parent) or ("", False)
    data = (await store.get_run(child_id)).to_json_dict()
    assert json.loads(json.dumps(data))["parent"] == {"run_id": parent, "step": "sum"}
    assert (await store.get_run(parent)).to_json_dict()["parent"] is None


async def test_waited_step_reads_one_steps_end(store: Any) -> None:
    parent = await parent_run(store)
    assert await store.waited_step(parent, "sum") == ("", None, None)  # it never waited
    child_id, _ = await start(store, parent) or ("", False)
    assert await store.waited_step(parent, "sum") == ("waiting", None, None)
    await store.claim_run(child_id, "child:1:a", 600)
    await store.finish_run(child_id, RunStatus.SUCCEEDED, owner="child:1:a", output='"done"')
    assert await store.waited_step(parent, "sum") == ("succeeded", "done", None)
