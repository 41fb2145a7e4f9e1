"""The store contract: enqueue_runs (a batch of queued runs, one transaction), and a new
run's step rows as create_run stores them (one statement on PostgreSQL).

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store import contract_support as contract
from store.contract_support import HASH, LONG, new_id

from brain._errors import StoreError
from brain.results import RunStatus, StepStatus, TriggerData
from brain.store.base import QueuedRun
from brain.store.queue import QueueFull

store = contract.store
contract_database = contract.contract_database


def queued(body: str, steps: list[tuple[str, str]] | None = None,
           key: str | None = None) -> QueuedRun:
    return QueuedRun(run_id=new_id(), workflow="wf", definition_hash=HASH,
                     trigger=TriggerData(event="manual", body=body, headers={"x-n": body}),
                     step_rows=steps if steps is not None else [("a", "shell"), ("b", "llm")],
                     concurrency_key=key)


async def test_enqueue_runs_commits_every_run_queued_with_its_steps(store: Any) -> None:
    runs = [queued(f"body {i}", key=f"k{i}") for i in range(5)]
    ids = await store.enqueue_runs(runs, trigger_key="api")
    assert ids == [r.run_id for r in runs]
    assert await store.count_queued() == 5
    assert await store.count_active(trigger_key="api") == 5
    for run in runs:
        got = await store.get_run(run.run_id)
        assert (got.status, got.trigger, got.concurrency_key) == (
            RunStatus.QUEUED, run.trigger, run.concurrency_key)
        assert [(s.name, s.kind, s.status) for s in got.steps.values()] == [
            ("a", "shell", StepStatus.PENDING), ("b", "llm", StepStatus.PENDING)]


async def test_enqueue_runs_of_nothing_is_nothing(store: Any) -> None:
    assert await store.enqueue_runs([]) == []
    assert await store.count_queued() == 0


async def test_a_batch_over_the_queue_limit_is_refused_whole(store: Any) -> None:
    await store.enqueue_runs([queued("first")], max_queued=3)
    with pytest.raises(QueueFull):
        await store.enqueue_runs([queued(f"b{i}") for i in range(3)], max_queued=3)
    assert await store.count_queued() == 1
    assert len(await store.enqueue_runs([queued("c1"), queued("c2")], max_queued=3)) == 2


async def test_a_batch_with_an_existing_run_id_changes_nothing(store: Any) -> None:
    first = queued("first")
    await store.enqueue_runs([first])
    again = QueuedRun(run_id=first.run_id, workflow="wf", definition_hash=HASH,
                      trigger=TriggerData(), step_rows=[])
    with pytest.raises(StoreError):
        await store.enqueue_runs([queued("new"), again])
    assert await store.count_queued() == 1


STEP_NAMES = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(STEP_NAMES, min_size=1, max_size=12, unique=True),
       kinds=st.lists(st.sampled_from(["shell", "llm", "step", "mcp_tool"]), min_size=12,
                      max_size=12),
       leased=st.booleans())
async def test_a_new_run_stores_its_steps_pending_in_order(store: Any, names: list[str],
                                                           kinds: list[str],
                                                           leased: bool) -> None:
    """Whatever the step names (any text, NUL included), create_run stores each step
    pending, in call order, with nothing else recorded yet."""
    run_id = new_id()
    rows = list(zip(names, kinds, strict=False))
    await store.create_run(run_id=run_id, workflow="wf", definition_hash=HASH,
                           trigger=TriggerData(body="x"), step_rows=rows,
                           owner="me" if leased else None, lease_seconds=LONG)
    got = await store.get_run(run_id)
    assert got.status == (RunStatus.RUNNING if leased else RunStatus.QUEUED)
    stored = [(s.name, s.kind, s.status, s.tries, s.inputs, s.output, s.started_at)
              for s in got.steps.values()]
    # PostgreSQL keeps no NUL in text: it stores U+FFFD there, on every path.
    on_postgres = str(getattr(store, "url", "")).startswith("postgresql")
    expected = [(n.replace("\x00", "\ufffd") if on_postgres else n, k, StepStatus.PENDING, 0,
                 {}, None, None) for n, k in rows]
    assert stored == expected
