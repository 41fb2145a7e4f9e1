"""In-process runs on PostgreSQL share the store the process keeps per URL and event loop:
opened (and its schema checked) once, its connections closed when the loop ends; and
``wf.enqueue_many`` queues a batch in one go."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import make_url
from support import upgraded_schema

from brain import step, workflow
from brain.results import TriggerData
from brain.store import Store, postgres, schema
from brain.store.queue import QueueFull


@step
def first(seed: str) -> str:
    return seed + "-a"


@step
def second(text: str) -> str:
    return text.upper()


@workflow(name="kept_three")
def three() -> None:
    second(second(first("x")))


@pytest.fixture
def pg_db(fresh_pg_url: str) -> str:
    asyncio.run(upgraded_schema(fresh_pg_url))
    return fresh_pg_url


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often a PostgreSQL backend was opened and its schema checked (the real methods
    still run)."""
    counted = {"open": 0, "check": 0}
    real_open, real_check = postgres.PostgresBackend.open.__func__, schema.ensure_current

    async def counting_open(cls: Any, *args: Any, **kwargs: Any) -> Any:
        counted["open"] += 1
        return await real_open(cls, *args, **kwargs)

    async def counting_check(*args: Any, **kwargs: Any) -> Any:
        counted["check"] += 1
        return await real_check(*args, **kwargs)

    monkeypatch.setattr(postgres.PostgresBackend, "open", classmethod(counting_open))
    monkeypatch.setattr(schema, "ensure_current", counting_check)
    return counted


async def _connections(url: str) -> int:
    """Connections to the database of ``url`` now (seen from the server's ``postgres``
    database)."""
    name = make_url(url).database
    conn = await asyncpg.connect(
        make_url(url).set(drivername="postgresql", database="postgres")
        .render_as_string(hide_password=False))
    try:
        return int(await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name))
    finally:
        await conn.close()


async def _until_no_connections(url: str) -> int:
    """Connections left once none are (a closed connection's server process takes a
    moment to go), or after 30 s."""
    deadline = time.monotonic() + 30
    left = await _connections(url)
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        left = await _connections(url)
    return left


def test_successive_runs_share_one_store_and_one_schema_check(
        pg_db: str, opens: dict[str, int]) -> None:
    results = [three(store=pg_db) for _ in range(3)]
    assert all(r.succeeded for r in results), [r.error for r in results]
    assert len({r.run_id for r in results}) == 3
    assert opens == {"open": 1, "check": 1}


def test_runs_of_one_loop_share_its_store_and_it_closes_with_the_loop(
        pg_db: str, opens: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_DATABASE_URL", pg_db)

    async def two_runs() -> list[bool]:
        return [(await three.arun()).succeeded, (await three.arun()).succeeded]

    assert asyncio.run(two_runs()) == [True, True]
    assert opens["open"] == 1
    assert asyncio.run(_until_no_connections(pg_db)) == 0
    # Another loop opens a store of its own, and trusts the schema check already made.
    assert asyncio.run(two_runs()) == [True, True]
    assert opens == {"open": 2, "check": 1}


async def test_runs_called_inside_a_running_loop_close_their_connections(
        pg_db: str) -> None:
    """Each call runs on a loop of its own in a thread of its own: its store closes as
    that loop ends, leaving no connection behind."""
    assert three(store=pg_db).succeeded
    assert three(store=pg_db).succeeded
    assert await _until_no_connections(pg_db) == 0
    async with Store(pg_db) as store:
        assert len(await store.list_runs(workflow="kept_three")) == 2


async def test_statements_run_side_by_side_on_pooled_connections(pg_db: str) -> None:
    """A statement waiting on a lock does not hold up the next one (one connection behind
    a lock would)."""
    holder = await asyncpg.connect(make_url(pg_db).set(drivername="postgresql")
                                   .render_as_string(hide_password=False))
    try:
        await holder.execute("SELECT pg_advisory_lock(4242)")
        async with Store(pg_db) as store:
            blocked = asyncio.ensure_future(
                store.db.read("SELECT pg_advisory_lock(4242) AS got"))
            quick = await asyncio.wait_for(store.db.read("SELECT 7 AS n"), 30)
            assert quick == [{"n": 7}] and not blocked.done()
            await holder.execute("SELECT pg_advisory_unlock(4242)")
            await asyncio.wait_for(blocked, 30)
            await store.db.read("SELECT pg_advisory_unlock_all()")
    finally:
        await holder.close()


# --- enqueue_many ---------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def queue_database(request: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``BRAIN_DATABASE_URL`` on the test's SQLite file, or on a PostgreSQL database."""
    if request.param == "postgres":
        monkeypatch.setenv("BRAIN_DATABASE_URL", request.getfixturevalue("pg_db"))


@pytest.mark.usefixtures("queue_database")
async def test_enqueue_many_queues_every_run_in_order() -> None:
    items = ["plain", {"body": "with headers", "headers": {"X-Repo": "r1"}}, {"n": 1}, None]
    ids = await three.enqueue_many(items)
    assert len(set(ids)) == 4
    async with Store() as store:
        got = [await store.get_run(i) for i in ids]
        assert [r.status.value for r in got] == ["queued"] * 4
        assert [(r.trigger.body, r.trigger.headers) for r in got] == [
            ("plain", {}), ("with headers", {"x-repo": "r1"}), ('{"n":1}', {}), ("", {})]
        assert await store.count_active(trigger_key="api") == 4
        assert [s for s in got[0].steps] == list(three.graph.nodes)


async def test_a_batch_over_the_queue_limit_queues_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_MAX_QUEUED_RUNS", "3")
    await three.enqueue("one")
    with pytest.raises(QueueFull):
        await three.enqueue_many(["a", "b", "c"])
    async with Store() as store:
        assert await store.count_queued() == 1


async def test_enqueue_many_refuses_a_single_text() -> None:
    with pytest.raises(TypeError, match="list of bodies"):
        await three.enqueue_many("abc")  # type: ignore[arg-type]
    async with Store() as store:
        assert await store.count_queued() == 0


BODIES = st.one_of(st.none(), st.text(max_size=40),
                   # a dict of only body/headers is read as those fields, not as a body
                   st.dictionaries(st.text(max_size=5).filter(lambda k: k not in ("body", "headers")),
                                   st.integers(), max_size=3),
                   st.lists(st.integers(), max_size=3))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(BODIES, min_size=1, max_size=6))
async def test_enqueue_many_stores_each_body_as_enqueue_does(bodies: list[Any]) -> None:
    ids = await three.enqueue_many(bodies)
    singles = [await three.enqueue(b) for b in bodies]
    async with Store() as store:
        batch = [(await store.get_run(i)).trigger for i in ids]
        one_by_one = [(await store.get_run(i)).trigger for i in singles]
    assert batch == one_by_one
    assert all(isinstance(t, TriggerData) and t.event == "manual" for t in batch)
