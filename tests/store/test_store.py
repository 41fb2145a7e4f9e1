"""The run store on a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import delete, func, select, text, update

from brain._errors import RunNotFound, StoreError
from brain.results import RunStatus, StepStatus, TriggerData
from brain.store import Store
from brain.store.schema import MIGRATIONS, current_revision
from brain.store.tables import SCHEMA_REVISION, metadata, runs, steps

T = TypeVar("T")
HASH = "d" * 64
FAR_PAST = datetime(2001, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="session")
def pg_schema_url(pg_url: str) -> str:
    """The shared PostgreSQL test database, upgraded to the current schema once."""

    async def go() -> None:
        store = Store(pg_url)
        await store.open(check_schema=False)
        try:
            try:
                await store.upgrade_schema()
            except Exception:
                # another test session may be upgrading the same database right now
                if await current_revision(store.engine) != SCHEMA_REVISION:
                    raise
        finally:
            await store.close()

    asyncio.run(go())
    return pg_url


@dataclass
class Backend:
    """One database to test the store on, with workflow names private to this test."""

    kind: str
    url: str
    prefix: str

    def name(self, suffix: str = "wf") -> str:
        return f"{self.prefix}-{suffix}"

    def run(self, fn: Callable[[Store], Awaitable[T]]) -> T:
        """Open the store, run ``fn``, delete every row this test created, close the store."""

        async def go() -> T:
            store = Store(self.url)
            await store.open()
            try:
                return await fn(store)
            finally:
                async with store.engine.begin() as conn:
                    mine = select(runs.c.id).where(runs.c.workflow.startswith(self.prefix))
                    await conn.execute(delete(steps).where(steps.c.run_id.in_(mine)))
                    await conn.execute(delete(runs).where(runs.c.workflow.startswith(self.prefix)))
                await store.close()

        return asyncio.run(go())


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    if request.param == "sqlite":
        return Backend("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'store.db'}", prefix)
    return Backend("postgresql", request.getfixturevalue("pg_schema_url"), prefix)


def new_id() -> str:
    return uuid.uuid4().hex


async def make_run(store: Store, workflow: str, *, run_id: str | None = None,
                   step_names: tuple[str, ...] = ("one", "two", "three"),
                   owner: str | None = None, lease_seconds: float = 30,
                   trigger: TriggerData | None = None, previous_run_id: str | None = None) -> str:
    run_id = run_id or new_id()
    await store.create_run(run_id=run_id, workflow=workflow, definition_hash=HASH,
                           trigger=trigger or TriggerData(), owner=owner,
                           step_rows=[(n, "shell") for n in step_names],
                           lease_seconds=lease_seconds, previous_run_id=previous_run_id)
    return run_id


async def set_ended(store: Store, run_id: str, when: datetime) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(update(runs).where(runs.c.id == run_id).values(ended_at=when))


# --- runs ---------------------------------------------------------------------------------------


def test_create_run_and_get_run_round_trip(backend: Backend) -> None:
    wf = backend.name()

    async def body(store: Store) -> None:
        trigger = TriggerData(event="webhook", body='{"a": 1} ünïcode', path="/srv/in/x.txt",
                              headers={"x-github-event": "push"})
        run_id = new_id()
        previous = new_id()
        created = await store.create_run(
            run_id=run_id, workflow=wf, definition_hash=HASH, trigger=trigger,
            step_rows=[("fetch", "shell"), ("think", "llm"), ("save", "step")],
            previous_run_id=previous)
        got = await store.get_run(run_id)
        assert got.run_id == run_id
        assert got.workflow == wf
        assert got.status == RunStatus.QUEUED
        assert got.trigger == trigger
        assert got.previous_run_id == previous
        assert got.error is None and got.started_at is None and got.ended_at is None
        assert got.created_at == created
        assert got.created_at.tzinfo is not None
        assert got.created_at.utcoffset() == timedelta(0)
        assert list(got.steps) == ["fetch", "think", "save"]
        assert [s.kind for s in got.steps.values()] == ["shell", "llm", "step"]
        assert all(s.status == StepStatus.PENDING and s.tries == 0 for s in got.steps.values())
        row = await store.run_row(run_id)
        assert row is not None and row.definition_hash == HASH
        assert row.lease_owner is None

        # with an owner the run starts running under a lease
        held = await make_run(store, wf, owner="me:1:abc", lease_seconds=60)
        running = await store.get_run(held)
        assert running.status == RunStatus.RUNNING
        assert running.started_at is not None
        row = await store.run_row(held)
        assert row.lease_owner == "me:1:abc"
        assert row.lease_expires_at > running.started_at

        finished_at = await store.finish_run(held, RunStatus.FAILED, "step 'x' failed: boom")
        done = await store.get_run(held, with_steps=False)
        assert done.status == RunStatus.FAILED
        assert done.error == "step 'x' failed: boom"
        assert done.ended_at == finished_at
        assert done.steps == {}
        row = await store.run_row(held)
        assert row.lease_owner is None and row.lease_expires_at is None

    backend.run(body)


def test_prefix_resolution(backend: Backend) -> None:
    wf = backend.name()

    async def body(store: Store) -> None:
        base = uuid.uuid4().hex[:20]
        first = await make_run(store, wf, run_id=base + "a" + "0" * 11)
        second = await make_run(store, wf, run_id=base + "b" + "0" * 11)
        assert (await store.get_run(base + "a")).run_id == first
        assert (await store.get_run(base + "b")).run_id == second
        assert (await store.get_run(first)).run_id == first
        assert (await store.get_run((base + "B").upper())).run_id == second
        with pytest.raises(RunNotFound, match="ambiguous"):
            await store.get_run(base)
        with pytest.raises(RunNotFound, match="ambiguous"):
            await store.resolve_id(base[:16])
        with pytest.raises(RunNotFound):
            await store.get_run(base + "c")
        with pytest.raises(RunNotFound):
            await store.get_run("not-hex")
        with pytest.raises(RunNotFound):
            await store.get_run("")
        assert issubclass(RunNotFound, StoreError)

    backend.run(body)


def test_list_runs_filters(backend: Backend) -> None:
    wf, other = backend.name("a"), backend.name("b")

    async def body(store: Store) -> None:
        queued = await make_run(store, wf)
        running = await make_run(store, wf, owner="o:1:x")
        done = await make_run(store, wf, owner="o:1:y")
        await store.finish_run(done, RunStatus.SUCCEEDED)
        elsewhere = await make_run(store, other)

        mine = await store.list_runs(workflow=wf)
        assert [r.run_id for r in mine] == [done, running, queued]  # newest first
        assert all(r.steps == {} for r in mine)
        assert [r.run_id for r in await store.list_runs(workflow=other)] == [elsewhere]
        assert [r.run_id for r in await store.list_runs(workflow=wf, status="running")] == [running]
        assert [r.run_id for r in await store.list_runs(workflow=wf, status="queued")] == [queued]
        assert [r.status for r in await store.list_runs(workflow=wf, status="succeeded")] == [
            RunStatus.SUCCEEDED]
        assert await store.list_runs(workflow=wf, status="cancelled") == []
        assert [r.run_id for r in await store.list_runs(workflow=wf, limit=2)] == [done, running]
        everyone = {r.run_id for r in await store.list_runs(limit=1000)}
        assert {queued, running, done, elsewhere} <= everyone

    backend.run(body)


def test_claim_run(backend: Backend) -> None:
    wf = backend.name()

    async def body(store: Store) -> None:
        queued = await make_run(store, wf)
        assert await store.claim_run(queued, "first:1:a", 60) is True
        row = await store.run_row(queued)
        assert row.status == "running" and row.lease_owner == "first:1:a"
        assert row.started_at is not None
        # a running run under a live lease belongs to its owner
        assert await store.claim_run(queued, "second:2:b", 60) is False
        assert (await store.run_row(queued)).lease_owner == "first:1:a"

        # a running run whose lease expired (its process died) can be taken over
        expired = await make_run(store, wf, owner="dead:3:c", lease_seconds=-5)
        started = (await store.run_row(expired)).started_at
        assert await store.claim_run(expired, "second:2:b", 60) is True
        row = await store.run_row(expired)
        assert row.lease_owner == "second:2:b"
        assert row.started_at == started  # the original start time is kept
        assert row.lease_expires_at > datetime.now(UTC)

        # finished runs are never claimed; an unknown id is not either
        await store.finish_run(expired, RunStatus.SUCCEEDED)
        assert await store.claim_run(expired, "third:4:d", 60) is False
        assert await store.claim_run(new_id(), "third:4:d", 60) is False

        # of two executors racing for one queued run, exactly one wins
        contested = await make_run(store, wf)
        wins = await asyncio.gather(store.claim_run(contested, "x:1:1", 60),
                                    store.claim_run(contested, "y:1:1", 60))
        assert sorted(wins) == [False, True]

        # heartbeat: only the owner renews; a stranger learns the run is not theirs
        assert await store.heartbeat(queued, "first:1:a", 60) == (True, False)
        assert await store.heartbeat(queued, "second:2:b", 60) == (False, False)
        assert (await store.run_row(queued)).lease_owner == "first:1:a"

    backend.run(body)


def test_request_cancel(backend: Backend) -> None:
    wf = backend.name()

    async def body(store: Store) -> None:
        queued = await make_run(store, wf)
        result, was_active = await store.request_cancel(queued[:24])
        assert was_active is True
        assert result.status == RunStatus.CANCELLED  # nobody runs it: cancelled at once
        got = await store.get_run(queued)
        assert got.status == RunStatus.CANCELLED
        assert got.ended_at is not None
        assert {s.status for s in got.steps.values()} == {StepStatus.CANCELLED}

        running = await make_run(store, wf, owner="exec:1:a")
        result, was_active = await store.request_cancel(running)
        assert was_active is True
        assert result.status == RunStatus.RUNNING  # its executor stops it
        assert await store.heartbeat(running, "exec:1:a", None) == (True, True)
        got = await store.get_run(running)
        assert {s.status for s in got.steps.values()} == {StepStatus.PENDING}

        finished = await make_run(store, wf, owner="exec:1:b")
        await store.finish_run(finished, RunStatus.SUCCEEDED)
        result, was_active = await store.request_cancel(finished)
        assert was_active is False
        assert result.status == RunStatus.SUCCEEDED
        assert (await store.get_run(finished)).status == RunStatus.SUCCEEDED
        assert (await store.heartbeat(finished, "exec:1:b", None))[1] is False

        with pytest.raises(RunNotFound):
            await store.request_cancel(new_id())

    backend.run(body)


def test_prune(backend: Backend) -> None:
    wf = backend.name()

    async def body(store: Store) -> None:
        old = []
        for status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED):
            run_id = await make_run(store, wf, owner="o:1:a")
            await store.finish_run(run_id, status)
            await set_ended(store, run_id, FAR_PAST)
            old.append(run_id)
        recent = await make_run(store, wf, owner="o:1:b")
        await store.finish_run(recent, RunStatus.SUCCEEDED)
        still_running = await make_run(store, wf, owner="o:1:c")
        queued = await make_run(store, wf)

        # only runs that ended before the cutoff go (the cutoff keeps other tests' rows safe)
        assert await store.prune(FAR_PAST + timedelta(days=1)) == 3
        for run_id in old:
            with pytest.raises(RunNotFound):
                await store.get_run(run_id)
        async with store.engine.connect() as conn:
            left = (await conn.execute(select(func.count()).select_from(steps)
                                       .where(steps.c.run_id.in_(old)))).scalar()
        assert left == 0
        remaining = {r.run_id for r in await store.list_runs(workflow=wf)}
        assert remaining == {recent, still_running, queued}
        assert await store.prune(FAR_PAST + timedelta(days=1)) == 0

    backend.run(body)


def test_latest_succeeded_run(backend: Backend) -> None:
    wf, other = backend.name("a"), backend.name("b")
    t1, t2, t3 = (datetime(2020, 1, d, tzinfo=UTC) for d in (1, 2, 3))

    async def body(store: Store) -> None:
        assert await store.latest_succeeded_run(wf, datetime.now(UTC)) is None
        ids = {}
        for key, status, ended, name in [("s1", RunStatus.SUCCEEDED, t1, wf),
                                         ("s2", RunStatus.SUCCEEDED, t2, wf),
                                         ("f3", RunStatus.FAILED, t3, wf),
                                         ("o3", RunStatus.SUCCEEDED, t3, other)]:
            ids[key] = await make_run(store, name, owner="o:1:a")
            await store.finish_run(ids[key], status)
            await set_ended(store, ids[key], ended)
        await make_run(store, wf, owner="o:1:b")  # a running run never counts

        now = datetime.now(UTC)
        assert await store.latest_succeeded_run(wf, now) == ids["s2"]  # the failed one is later
        assert await store.latest_succeeded_run(wf, t2 - timedelta(hours=1)) == ids["s1"]
        assert await store.latest_succeeded_run(wf, t1 - timedelta(hours=1)) is None
        assert await store.latest_succeeded_run(other, now) == ids["o3"]

    backend.run(body)


def test_step_records(backend: Backend) -> None:
    wf = backend.name()

    async def body(store: Store) -> None:
        run_id = await make_run(store, wf, owner="o:1:a",
                                step_names=("first", "second", "third", "fourth"))
        t0 = datetime.now(UTC)
        await store.step_running(run_id, "first", inputs={"command": "echo hi", "env": {"K": "***"}},
                                 tries=1, started_at=t0)
        got = (await store.get_run(run_id)).steps["first"]
        assert got.status == StepStatus.RUNNING
        assert got.inputs == {"command": "echo hi", "env": {"K": "***"}}
        assert got.tries == 1 and got.started_at == t0 and got.ended_at is None

        t1 = t0 + timedelta(seconds=2)
        await store.step_finished(run_id, "first", status=StepStatus.SUCCEEDED, tries=2, ended_at=t1,
                                  output="hi ✓\nthere", stderr="warning: x")
        await store.step_finished(run_id, "second", status=StepStatus.FAILED, tries=3, ended_at=t1,
                                  error="command failed with exit code 1", stderr="boom",
                                  inputs={"argv": ["false"]})
        await store.steps_ended(run_id, ["third", "fourth"], StepStatus.SKIPPED)
        await store.steps_ended(run_id, [], StepStatus.CANCELLED)  # nothing to do

        result = await store.get_run(run_id)
        first, second, third, fourth = result.steps.values()
        assert (first.status, first.output, first.stderr, first.tries) == (
            StepStatus.SUCCEEDED, "hi ✓\nthere", "warning: x", 2)
        assert first.inputs == {"command": "echo hi", "env": {"K": "***"}}  # kept from step_running
        assert first.started_at == t0 and first.ended_at == t1
        assert (second.status, second.error, second.stderr, second.tries) == (
            StepStatus.FAILED, "command failed with exit code 1", "boom", 3)
        assert second.inputs == {"argv": ["false"]}
        assert third.status == fourth.status == StepStatus.SKIPPED
        assert third.ended_at is not None and third.output is None

        assert await store.step_outputs(run_id) == {"first": "hi ✓\nthere"}
        assert await store.step_states(run_id) == {
            "first": ("succeeded", 2), "second": ("failed", 3), "third": ("skipped", 0),
            "fourth": ("skipped", 0)}

        await store.steps_ended(run_id, ["third"], StepStatus.CANCELLED, error="cancelled")
        third = (await store.get_run(run_id)).steps["third"]
        assert (third.status, third.error) == (StepStatus.CANCELLED, "cancelled")

        await store.reset_steps(run_id, ["second", "third"])
        states = await store.step_states(run_id)
        assert states["second"][0] == states["third"][0] == "pending"
        assert states["first"] == ("succeeded", 2)

    backend.run(body)


def test_step_process_records(backend: Backend) -> None:
    """The process group a step's try started: the latest try's is kept, under the lease;
    start times past 2**31 clock ticks (a machine up for long) fit."""
    from brain.store.base import StepProcess

    async def check(store: Any) -> None:
        run_id = await make_run(store, backend.name(), owner="me:1:a")
        assert await store.step_processes(run_id) == []
        first = StepProcess("one", 4242, 2**40, "host+abcd1234")
        await store.step_process(run_id, first, owner="me:1:a")
        await store.step_process(run_id, StepProcess("two", 77, 5, "host+abcd1234"))
        again = StepProcess("two", 78, 9, "other+00000000")
        await store.step_process(run_id, again, owner="me:1:a")
        found = sorted(await store.step_processes(run_id), key=lambda p: p.step)
        assert found == [first, again]
        assert await store.step_processes(new_id()) == []

    backend.run(check)


# --- schema -------------------------------------------------------------------------------------


def test_schema_revision_is_the_alembic_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_heads() == [SCHEMA_REVISION]


def _schema_differences(store: Store) -> Awaitable[list[Any]]:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    async def go() -> list[Any]:
        async with store.engine.connect() as conn:
            return await conn.run_sync(lambda c: compare_metadata(
                MigrationContext.configure(c, opts={"compare_type": True}), metadata))

    return go()


def test_migrated_sqlite_schema_matches_the_tables(tmp_path: Path) -> None:
    async def go() -> list[Any]:
        async with Store(f"sqlite+aiosqlite:///{tmp_path / 'm.db'}") as store:
            assert await current_revision(store.engine) == SCHEMA_REVISION
            return await _schema_differences(store)

    assert asyncio.run(go()) == []


@pytest.mark.parametrize("existing", ["missing", "empty"])
def test_sqlite_schema_created_on_first_use(tmp_path: Path, existing: str) -> None:
    path = tmp_path / "fresh.db"
    if existing == "empty":
        path.touch()
    url = f"sqlite+aiosqlite:///{path}"

    async def go() -> tuple[list[str], str]:
        async with Store(url) as store:
            run_id = await make_run(store, "fresh")
            return [r.run_id for r in await store.list_runs()], run_id

    listed, created = asyncio.run(go())
    assert listed == [created]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(SCHEMA_REVISION,)]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"brain_runs", "brain_steps"} <= tables
    # opening it again keeps the schema and the data
    listed, second = asyncio.run(go())
    assert listed == [second, created]


@pytest.mark.parametrize(("setting", "expected"), [(None, 1), ("FULL", 2), ("normal", 1)])
def test_sqlite_pragmas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        setting: str | None, expected: int) -> None:
    if setting is not None:
        monkeypatch.setenv("BRAIN_SQLITE_SYNCHRONOUS", setting)
    path = tmp_path / "pragmas.db"

    async def go() -> tuple[str, int, int]:
        async with Store(f"sqlite+aiosqlite:///{path}") as store:
            async with store.engine.connect() as conn:
                mode = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
                sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
                busy = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
        return mode, sync, busy

    mode, sync, busy = asyncio.run(go())
    assert mode == "wal"
    assert sync == expected
    assert busy > 0
    with sqlite3.connect(path) as conn:  # WAL is a property of the file itself
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_sqlite_bad_synchronous_setting_is_a_store_error(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_SQLITE_SYNCHRONOUS", "SOMETIMES")

    async def go() -> None:
        async with Store(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"):
            pass

    with pytest.raises(StoreError, match="BRAIN_SQLITE_SYNCHRONOUS"):
        asyncio.run(go())


# --- PostgreSQL schema checks -------------------------------------------------------------------


def _open(url: str) -> None:
    async def go() -> None:
        async with Store(url) as store:
            await store.list_runs()

    asyncio.run(go())


def test_postgres_refuses_an_old_schema_until_db_upgrade(fresh_pg_url: str,
                                                        brain_cmd: list[str]) -> None:
    # an empty database: refused, nothing created
    with pytest.raises(StoreError, match=r"brain db upgrade") as info:
        _open(fresh_pg_url)
    assert "none" in str(info.value)

    async def tables() -> set[str]:
        store = Store(fresh_pg_url)
        await store.open(check_schema=False)
        try:
            async with store.engine.connect() as conn:
                rows = await conn.execute(text(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))
                return {r[0] for r in rows}
        finally:
            await store.close()

    assert asyncio.run(tables()) == set()

    env = {**os.environ, "BRAIN_DATABASE_URL": fresh_pg_url}
    refused = subprocess.run([*brain_cmd, "runs"], capture_output=True, text=True, env=env,
                             timeout=60, check=False)
    assert refused.returncode == 2
    assert "brain db upgrade" in refused.stderr and "Traceback" not in refused.stderr

    upgraded = subprocess.run([*brain_cmd, "db", "upgrade"], capture_output=True, text=True,
                              env=env, timeout=60, check=False)
    assert upgraded.returncode == 0, upgraded.stderr
    assert SCHEMA_REVISION in upgraded.stderr
    assert {"brain_runs", "brain_steps", "alembic_version"} <= asyncio.run(tables())

    async def check() -> list[Any]:
        async with Store(fresh_pg_url) as store:
            run_id = await make_run(store, "pg-fresh")
            assert (await store.get_run(run_id)).status == RunStatus.QUEUED
            return await _schema_differences(store)

    assert asyncio.run(check()) == []

    # a database left at an older revision is refused too, naming that revision
    async def downgrade_marker() -> None:
        store = Store(fresh_pg_url)
        await store.open(check_schema=False)
        try:
            async with store.engine.begin() as conn:
                await conn.execute(text("UPDATE alembic_version SET version_num = '0000'"))
        finally:
            await store.close()

    asyncio.run(downgrade_marker())
    with pytest.raises(StoreError, match=r"0000.*brain db upgrade"):
        _open(fresh_pg_url)


# --- lease-conditional writes, retries, fire retention (SPEC §4) ---------------------------


def test_writes_under_a_lost_lease_change_nothing(backend: Backend) -> None:
    from brain._errors import LeaseLost
    from brain.store.base import StepProcess

    async def check(store: Any) -> None:
        run_id = await make_run(store, backend.name(), owner="me:1:a")
        now = datetime.now(UTC)
        await store.step_finished(run_id, "one", status=StepStatus.SUCCEEDED, tries=1,
                                  ended_at=now, output="mine", inputs={}, started_at=now,
                                  owner="me:1:a")
        assert await store.claim_run(run_id, "thief:1:b", 30) is False  # the lease is live
        async with store.engine.begin() as conn:
            await conn.execute(update(runs).where(runs.c.id == run_id)
                               .values(lease_owner="thief:1:b"))
        writes = [
            store.step_running(run_id, "two", inputs={}, tries=1, started_at=now, owner="me:1:a"),
            store.step_finished(run_id, "two", status=StepStatus.SUCCEEDED, tries=1, ended_at=now,
                                output="late", inputs={}, started_at=now, owner="me:1:a"),
            store.step_finished(run_id, "two", status=StepStatus.FAILED, tries=1, ended_at=now,
                                error="late", owner="me:1:a"),
            store.steps_ended(run_id, ["two", "three"], StepStatus.CANCELLED, owner="me:1:a"),
            store.reset_steps(run_id, ["one"], owner="me:1:a"),
            store.set_previous_run(run_id, "x" * 32, owner="me:1:a"),
            store.step_process(run_id, StepProcess("two", 4242, 1, "m"), owner="me:1:a"),
            store.finish_run(run_id, RunStatus.SUCCEEDED, owner="me:1:a"),
        ]
        for write in writes:
            with pytest.raises(LeaseLost):
                await write
        run = await store.get_run(run_id)
        assert run.status == "running" and run.previous_run_id is None
        assert await store.step_processes(run_id) == []
        assert [s.status for s in run.steps.values()] == ["succeeded", "pending", "pending"]
        assert run.steps["one"].output == "mine"
        # The thief's own writes go through.
        await store.finish_run(run_id, RunStatus.SUCCEEDED, owner="thief:1:b")

    backend.run(check)


def test_prune_deletes_old_fire_records_but_each_triggers_latest(backend: Backend) -> None:
    from brain.store.tables import fires

    async def check(store: Store) -> None:
        wf = backend.name()
        old = FAR_PAST
        for key in ("every:1", "cron:* * * * *@UTC"):
            for minutes in range(5):
                assert await store.claim_fire(wf, key, old + timedelta(minutes=minutes))
        await store.prune(old + timedelta(days=1))
        async with store.engine.begin() as conn:
            left = (await conn.execute(select(fires.c.trigger_key, fires.c.fire_time)
                                       .where(fires.c.workflow == wf))).all()
            await conn.execute(delete(fires).where(fires.c.workflow == wf))
        assert sorted(k for k, _ in left) == ["cron:* * * * *@UTC", "every:1"]
        for _, fire_time in left:
            assert fire_time.replace(tzinfo=None) == (old + timedelta(minutes=4)).replace(tzinfo=None)

    backend.run(check)


def test_a_write_waits_out_another_process_holding_the_lock(tmp_path: Path) -> None:
    """Longer than SQLite's busy timeout: the write is retried, not lost."""
    from brain.store.errors import RETRY_SECONDS

    db = tmp_path / "locked.db"
    url = f"sqlite+aiosqlite:///{db}"

    async def go() -> None:
        async with Store(url) as store:
            run_id = await make_run(store, "locked", owner="me:1:a")
            # A short busy timeout stands in for a lock held longer than the real one.
            await store.db.write("PRAGMA busy_timeout=200")
            holder = subprocess.Popen(  # noqa: ASYNC220 - a short-lived helper process
                ["python3", "-c", "import sqlite3, sys, time\n"
                 "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                 "c.execute('BEGIN IMMEDIATE'); print('held', flush=True); time.sleep(1.5)\n"
                 "c.execute('ROLLBACK')", str(db)], stdout=subprocess.PIPE, text=True)
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            now = datetime.now(UTC)
            await store.step_finished(run_id, "one", status=StepStatus.SUCCEEDED, tries=1,
                                      ended_at=now, output="kept", inputs={}, started_at=now,
                                      owner="me:1:a")
            await store.finish_run(run_id, RunStatus.SUCCEEDED, owner="me:1:a")
            holder.wait(10)
            run = await store.get_run(run_id)
            assert run.status == "succeeded" and run.steps["one"].output == "kept"

    assert RETRY_SECONDS > 2
    asyncio.run(go())


def test_on_postgresql_leases_run_on_the_servers_clock(pg_schema_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An executor whose clock runs 90 s ahead must not take a run whose lease is live."""
    import brain.store.store as store_module

    backend = Backend("postgresql", pg_schema_url, f"t{uuid.uuid4().hex[:12]}")

    async def check(store: Store) -> None:
        run_id = await make_run(store, backend.name(), owner="a:1:a", lease_seconds=30)
        real = store_module.utcnow
        monkeypatch.setattr(store_module, "utcnow", lambda: real() + timedelta(seconds=90))
        assert await store.claim_run(run_id, "skewed:1:b", 30) is False
        assert await store.expired_runs() == [] or run_id not in await store.expired_runs()
        assert await store.claim_next([backend.name()], "skewed:1:b", 30) is None
        ours, _ = await store.heartbeat(run_id, "a:1:a", 30)
        assert ours

    backend.run(check)
