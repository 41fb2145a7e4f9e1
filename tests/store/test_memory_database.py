"""The store on SQLite in memory (``sqlite:///:memory:``, what ``brain.testing`` runs on):
the same store and SQL as on a file (the contract suite covers those), but the database
lives and dies with the store, starts as a copy of the schema image, and runs its
statements in the caller's thread. What differs is tested here."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from brain._errors import StoreError
from brain.results import RunStatus, StepStatus, TriggerData
from brain.store import Store
from brain.store.errors import ConstraintViolation
from brain.store.schema import SCHEMA_REVISION
from brain.store.schema_image import new_memory_database, schema_image
from brain.store.urls import MEMORY_URL

HASH = "d" * 64


async def make_run(store: Store, run_id: str, *, owner: str | None = "me:1:a") -> None:
    await store.create_run(run_id=run_id, workflow="wf", definition_hash=HASH,
                           trigger=TriggerData(body=run_id), step_rows=[("one", "shell")],
                           owner=owner)


def test_the_image_has_the_migrated_schema_at_the_current_revision(tmp_path: Path) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import create_engine

    from brain.store.tables import metadata

    copy = tmp_path / "image.db"
    memory, file = new_memory_database(), sqlite3.connect(copy)
    memory.backup(file)
    memory.close()
    file.close()
    engine = create_engine(f"sqlite:///{copy}")
    try:
        with engine.connect() as conn:
            differences = compare_metadata(
                MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    finally:
        engine.dispose()
    assert differences == []
    # A file made from it is current: the store opens it without migrating.
    file = sqlite3.connect(copy)
    try:
        assert file.execute("SELECT version_num FROM alembic_version").fetchall() == \
            [(SCHEMA_REVISION,)]
    finally:
        file.close()


def test_the_image_is_built_once_and_each_database_is_a_copy_of_it() -> None:
    image = schema_image()
    assert schema_image() is image
    first = new_memory_database()
    first.execute("DELETE FROM alembic_version")
    second = new_memory_database()
    assert second.execute("SELECT version_num FROM alembic_version").fetchall() == \
        [(SCHEMA_REVISION,)]
    assert schema_image() == image
    first.close()
    second.close()


async def test_each_store_has_a_database_of_its_own_gone_when_it_closes() -> None:
    async with Store(MEMORY_URL) as one, Store("sqlite+aiosqlite:///:memory:") as other:
        await make_run(one, "a" * 32)
        assert [r.run_id for r in await one.list_runs()] == ["a" * 32]
        assert await other.list_runs() == []
    store = Store(MEMORY_URL)
    async with store:
        assert await store.list_runs() == []
        await make_run(store, "b" * 32)
    with pytest.raises(StoreError, match="not open"):
        await store.list_runs()
    async with store:  # open again: a new, empty database
        assert await store.list_runs() == []


async def test_a_refused_write_changes_nothing_and_the_store_goes_on() -> None:
    async with Store(MEMORY_URL) as store:
        await make_run(store, "a" * 32)
        with pytest.raises(ConstraintViolation):
            await make_run(store, "a" * 32, owner="other:2:b")
        run = await store.get_run("a" * 32)
        assert (run.status, list(run.steps)) == (RunStatus.RUNNING, ["one"])
        assert (await store.run_row("a" * 32)).lease_owner == "me:1:a"  # type: ignore[union-attr]
        await store.steps_ended("a" * 32, ["one"], StepStatus.SKIPPED, owner="me:1:a")
        await store.finish_run("a" * 32, RunStatus.SUCCEEDED, owner="me:1:a")
        assert (await store.get_run("a" * 32)).status == RunStatus.SUCCEEDED


def test_one_store_serves_several_event_loops_and_threads_at_once() -> None:
    """As ``brain_db`` is used: opened on one loop, written from others (``run_workflow``
    runs on a loop of its own), read from the test's; here from four threads at once, each
    run's writes whole."""
    store = Store(MEMORY_URL)
    asyncio.run(store.open())
    failures: list[BaseException] = []

    def writer(n: int) -> None:
        async def go() -> None:
            for i in range(25):
                run_id = f"{n:02d}{i:030d}"
                await make_run(store, run_id)
                await store.steps_ended(run_id, ["one"], StepStatus.SUCCEEDED, owner="me:1:a")
                await store.finish_run(run_id, RunStatus.SUCCEEDED, owner="me:1:a")

        try:
            asyncio.run(go())
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []

    async def read() -> list[str]:
        return [str(r.status) for r in await store.list_runs(limit=1000)]

    assert asyncio.run(read()) == ["succeeded"] * 100
    asyncio.run(store.close())


async def test_a_memory_store_upgrades_nothing() -> None:
    async with Store(MEMORY_URL) as store:
        assert await store.upgrade_schema() == (SCHEMA_REVISION, SCHEMA_REVISION)


async def test_foreign_keys_are_enforced_in_memory_too() -> None:
    async with Store(MEMORY_URL) as store:
        assert await store.db.read("PRAGMA foreign_keys") == [{"foreign_keys": 1}]
