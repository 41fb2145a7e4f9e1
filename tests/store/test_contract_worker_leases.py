"""The store contract, worker rows (SPEC §14): ``list_workers`` says how many runs each
process still holds under its lease (a run taken over or ended leaves its count), and
``forget_silent_workers`` removes the rows of processes silent since a time. On SQLite
and PostgreSQL (see ``contract_support``)."""

from __future__ import annotations

from typing import Any

from store import contract_support as contract
from store.contract_support import EXPIRED, LONG, make_run, tick

from brain._clock import utcnow
from brain.results import RunStatus
from brain.workers import describe_workers

store = contract.store
contract_database = contract.contract_database


async def _leased(store: Any) -> dict[str, int]:
    return {w["id"]: w["leased"] for w in await store.list_workers()}


async def test_a_run_taken_over_or_ended_leaves_its_worker_count(store: Any) -> None:
    started = utcnow()
    for worker in ("dead", "alive"):
        await store.worker_heartbeat(worker, host="h", pid=1, kind="worker", started_at=started,
                                     executing=1)
    # "dead" held the run; its lease ran out (it stopped beating).
    run_id = await make_run(store, owner="dead", lease_seconds=EXPIRED)
    await make_run(store, owner="someone-without-a-row", lease_seconds=LONG)
    assert await _leased(store) == {"dead": 1, "alive": 0}
    shown = {w["id"]: w["executing"] for w in describe_workers(await store.list_workers(), 30)}
    assert shown == {"dead": 1, "alive": 0}

    assert await store.claim_run(run_id, "alive", LONG)  # taken over
    assert await _leased(store) == {"dead": 0, "alive": 1}
    shown = {w["id"]: w["executing"] for w in describe_workers(await store.list_workers(), 30)}
    # "dead"'s last heartbeat still says 1; the database says it holds nothing.
    assert shown == {"dead": 0, "alive": 1}

    await store.finish_run(run_id, RunStatus.SUCCEEDED, owner="alive")
    assert await _leased(store) == {"dead": 0, "alive": 0}
    assert {w["executing"] for w in describe_workers(await store.list_workers(), 30)} == {0}


async def test_forget_silent_workers_keeps_those_heard_since(store: Any) -> None:
    started = utcnow()
    await store.worker_heartbeat("old", host="h", pid=1, kind="worker", started_at=started,
                                 executing=0)
    await tick()
    cutoff = utcnow()
    await tick()
    await store.worker_heartbeat("new", host="h", pid=2, kind="serve", started_at=started,
                                 executing=0)
    await store.forget_silent_workers(cutoff)
    assert [w["id"] for w in await store.list_workers()] == ["new"]
    await store.forget_silent_workers(cutoff)  # nothing more to forget
    assert [w["id"] for w in await store.list_workers()] == ["new"]
