"""The store contract for limits (SPEC §19): ``take_next`` under ``max_concurrent_runs``,
per workflow or per concurrency key, never takes a run that would exceed its group's
limit, takes the oldest run that fits, and keeps the key with the run.

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from store import contract_support as contract
from store.contract_support import LONG, tick

from brain.results import RunStatus, TriggerData
from brain.runner.queueing import concurrency_key_of

store = contract.store
contract_database = contract.contract_database


async def _queue(store: Any, workflow: str, key: str | None) -> str:
    run_id = contract.new_id()
    await store.enqueue_run(run_id=run_id, workflow=workflow, definition_hash=contract.HASH,
                            trigger=TriggerData(), step_rows=[("one", "shell")],
                            concurrency_key=key)
    await tick()
    return run_id


async def test_a_key_limit_counts_only_runs_with_the_same_key(store: Any) -> None:
    a1, a2 = await _queue(store, "deploy", "repo-a"), await _queue(store, "deploy", "repo-a")
    b1 = await _queue(store, "deploy", "repo-b")
    limits = {"deploy": (1, True)}
    first = await store.take_next(["deploy"], "me:1:a", LONG, limits=limits)
    second = await store.take_next(["deploy"], "me:1:a", LONG, limits=limits)
    assert (first, second) == ((a1, False), (b1, False)), "a2 waits; repo-b goes on"
    assert await store.take_next(["deploy"], "me:1:a", LONG, limits=limits) is None
    run = await store.get_run(a2)
    assert run.status == "queued" and run.concurrency_key == "repo-a"
    await store.finish_run(a1, RunStatus.SUCCEEDED, owner="me:1:a")
    assert await store.take_next(["deploy"], "me:1:a", LONG, limits=limits) == (a2, False)


async def test_a_workflow_limit_without_a_key_counts_every_run(store: Any) -> None:
    runs = [await _queue(store, "wf", None) for _ in range(3)]
    other = await _queue(store, "free", None)
    limits = {"wf": (2, False)}
    taken = [await store.take_next(["wf", "free"], "me:1:a", LONG, limits=limits)
             for _ in range(4)]
    assert taken == [(runs[0], False), (runs[1], False), (other, False), None]


async def test_claims_racing_for_one_key_never_exceed_it(store: Any) -> None:
    for i in range(12):
        await _queue(store, "deploy", f"repo-{i % 3}")
    limits = {"deploy": (1, True)}
    taken = await asyncio.gather(*(store.take_next(["deploy"], f"me:1:{i}", LONG, limits=limits)
                                   for i in range(8)))
    got = [t[0] for t in taken if t is not None]
    keys = [(await store.get_run(run_id)).concurrency_key for run_id in got]
    assert sorted(keys) == ["repo-0", "repo-1", "repo-2"]


def test_the_key_is_resolved_from_the_trigger() -> None:
    trigger = TriggerData(event="webhook", body="{}", headers={"x-repo": "core/api"})
    assert concurrency_key_of("{trigger.headers.x-repo}", trigger) == "core/api"
    assert concurrency_key_of("deploy-{trigger.headers.x-repo}", trigger) == "deploy-core/api"
    assert concurrency_key_of("{trigger.headers.x-missing}", trigger) == ""
    assert concurrency_key_of(None, trigger) is None
    long = concurrency_key_of("{trigger.body}", TriggerData(body="x" * 5000))
    other = concurrency_key_of("{trigger.body}", TriggerData(body="x" * 4999 + "y"))
    assert long is not None and other is not None
    assert len(long) <= 200 and long != other


async def test_watch_queued_hears_of_runs_other_stores_queue(store: Any,
                                                            contract_database: str | None
                                                            ) -> None:
    """PostgreSQL announces every run that becomes queued, whoever queued it; the other
    stores have nothing to announce (their watch returns at once)."""
    if not store.notifies:
        await asyncio.wait_for(store.watch_queued(lambda: None), 5)
        return
    from brain.store import Store

    listening, heard = asyncio.Event(), asyncio.Event()

    def on_queued() -> None:  # the first call comes at once, when listening begins
        (heard if listening.is_set() else listening).set()

    watching = asyncio.create_task(store.watch_queued(on_queued))
    try:
        await asyncio.wait_for(listening.wait(), 10)
        assert contract_database is not None
        async with Store(contract_database) as other:
            await _queue(other, "elsewhere", None)
        await asyncio.wait_for(heard.wait(), 10)
    finally:
        watching.cancel()


async def test_a_long_backlog_of_one_key_never_hides_another_keys_run(store: Any) -> None:
    first = await _queue(store, "deploy", "busy")
    backlog = [contract.new_id() for _ in range(250)]
    for run_id in backlog:
        await store.enqueue_run(run_id=run_id, workflow="deploy", definition_hash=contract.HASH,
                                trigger=TriggerData(), step_rows=[("one", "shell")],
                                concurrency_key="busy")
    await tick()
    other = await _queue(store, "deploy", "quiet")
    limits = {"deploy": (1, True)}
    assert await store.take_next(["deploy"], "me:1:a", LONG, limits=limits) == (first, False)
    assert await store.take_next(["deploy"], "me:1:a", LONG, limits=limits) == (other, False)
    assert await store.take_next(["deploy"], "me:1:a", LONG, limits=limits) is None
