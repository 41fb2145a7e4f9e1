"""The durable queue: each queued run is claimed by exactly one executor (SPEC §9)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import delete

from brain.results import TriggerData
from brain.store import Store
from brain.store.queue import QueueFull
from brain.store.tables import runs, steps


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, db_url: str) -> str:
    if request.param == "sqlite":
        return db_url
    pg: str = request.getfixturevalue("pg_url")

    async def prepare() -> None:
        store = Store(pg)
        await store.open(check_schema=False)
        await store.upgrade_schema()
        await store.close()

    asyncio.run(prepare())
    return pg


async def _enqueue(store: Store, workflow: str, **kw: object) -> tuple[str | None, bool]:
    return await store.enqueue_run(run_id=uuid.uuid4().hex, workflow=workflow,
                                   definition_hash="h" * 64, trigger=TriggerData(body="x"),
                                   step_rows=[("a", "shell")], **kw)  # type: ignore[arg-type]


async def _cleanup(url: str, workflow: str) -> None:
    async with Store(url) as store, store.engine.begin() as conn:
        ids = [r.id for r in (await conn.execute(runs.select().where(runs.c.workflow == workflow)))]
        await conn.execute(delete(steps).where(steps.c.run_id.in_(ids)))
        await conn.execute(delete(runs).where(runs.c.workflow == workflow))


def test_concurrent_executors_claim_each_run_exactly_once(url: str) -> None:
    workflow = f"q_{uuid.uuid4().hex[:8]}"

    async def go() -> list[str]:
        async with Store(url) as producer:
            for _ in range(30):
                await _enqueue(producer, workflow)
        stores = [await Store(url).open() for _ in range(4)]  # four "machines"
        claimed: list[str] = []

        async def executor(store: Store, owner: str) -> None:
            while (run_id := await store.claim_next([workflow], owner, 30)) is not None:
                claimed.append(run_id)

        try:
            await asyncio.gather(*(executor(s, f"exec-{i}") for i, s in enumerate(stores)))
        finally:
            for s in stores:
                await s.close()
        return claimed

    try:
        claimed = asyncio.run(go())
        assert len(claimed) == 30
        assert len(set(claimed)) == 30
    finally:
        asyncio.run(_cleanup(url, workflow))


def test_a_repeated_delivery_id_returns_the_first_run(url: str) -> None:
    workflow = f"q_{uuid.uuid4().hex[:8]}"

    async def go() -> tuple[tuple[str | None, bool], tuple[str | None, bool], int]:
        async with Store(url) as store:
            first = await _enqueue(store, workflow, delivery_id="d-1")
            again = await _enqueue(store, workflow, delivery_id="d-1")
            count = await store.count_active(workflow=workflow)
        return first, again, count

    try:
        first, again, count = asyncio.run(go())
        assert first[1] is True and again == (first[0], False)
        assert count == 1
    finally:
        asyncio.run(_cleanup(url, workflow))


def test_the_queue_refuses_runs_over_its_limit(url: str) -> None:
    workflow = f"q_{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with Store(url) as store:
            queued = await store.count_queued()
            await _enqueue(store, workflow, max_queued=queued + 1)
            store._queued_cache = None  # type: ignore[attr-defined]  # count afresh
            with pytest.raises(QueueFull):
                await _enqueue(store, workflow, max_queued=queued + 1)

    try:
        asyncio.run(go())
    finally:
        asyncio.run(_cleanup(url, workflow))
