"""The service's executors (SPEC §4, §5): one concurrency limit for new and resumed runs,
a server never resumes a run it is executing, background loops survive database errors,
and a schedule fire that could not be queued is queued later, not dropped."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from brain import shell, workflow
from brain.results import TriggerData
from brain.service import BrainService
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


def _sql(db: Path, statement: str, *args: object) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        rows = conn.execute(statement, args).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


async def _wait_all_ended(store: Store, ids: list[str], seconds: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        runs = [await store.get_run(i, with_steps=False) for i in ids]
        if all(r.status in ("succeeded", "failed", "cancelled") for r in runs):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"runs still active: {[(r.run_id, r.status) for r in runs]}")


def test_resumed_runs_execute_side_by_side(tmp_path: Path, db_url: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Three abandoned runs, four executors: each step waits until all three have started,
    which only happens if the resumed runs execute at the same time."""
    monkeypatch.setenv("BRAIN_LEASE_SECONDS", "1")
    meet = tmp_path / "meet"
    meet.mkdir()

    @workflow(name="rendezvous")
    def rendezvous():
        shell("meet", command=f'touch {meet}/$$; for i in $(seq 100); do '
                              f'[ "$(ls {meet} | wc -l)" -ge 3 ] && exit 0; sleep 0.1; done; exit 1')

    async def scenario() -> list[str]:
        async with Store(db_url) as store:
            ids = []
            for _ in range(3):  # left "running" by an executor that died long ago
                run_id = uuid.uuid4().hex
                await store.create_run(run_id=run_id, workflow="rendezvous",
                                       definition_hash=rendezvous.definition_hash,
                                       trigger=TriggerData(), step_rows=[("meet", "shell")],
                                       owner="elsewhere:1:dead", lease_seconds=0)
                ids.append(run_id)
        service = BrainService({"rendezvous": rendezvous}, store=Store(db_url), concurrency=4,
                               triggers=False)
        await service.start()
        try:
            await _wait_all_ended(service.store, ids, 30)
            return [str((await service.store.get_run(i, with_steps=False)).status) for i in ids]
        finally:
            await service.stop(grace_seconds=1)

    assert asyncio.run(scenario()) == ["succeeded"] * 3


def test_a_server_never_resumes_a_run_it_is_executing(tmp_path: Path, db_url: str) -> None:
    """Its lease looks expired (as after a stall) while the step still runs here: the
    resume scan must leave it alone, so the step never runs twice at once."""
    lock, log = tmp_path / "lock", tmp_path / "log"

    @workflow(name="single")
    def single():
        shell("work", command=f"echo start >> {log}; "
                              f"flock -n {lock} -c 'sleep 8' || echo overlap >> {log}")

    async def scenario() -> str:
        service = BrainService({"single": single}, store=Store(db_url), concurrency=2,
                               triggers=False)
        await service.start()
        try:
            run_id, _ = await service.enqueue(single, TriggerData(), trigger_key="api")
            assert run_id is not None
            for _ in range(100):
                if log.exists():
                    break
                await asyncio.sleep(0.05)
            # The lease expires as if heartbeats had stalled.
            _sql(tmp_path / "brain.db", "UPDATE brain_runs SET lease_expires_at = ? WHERE id = ?",
                 (datetime.now(UTC) - timedelta(minutes=5)).replace(tzinfo=None).isoformat(" "),
                 run_id)
            await _wait_all_ended(service.store, [run_id], 30)
            return str((await service.store.get_run(run_id, with_steps=False)).status)
        finally:
            await service.stop(grace_seconds=1)

    assert asyncio.run(scenario()) == "succeeded"
    assert log.read_text().split() == ["start"]


def test_executors_carry_on_after_database_errors(tmp_path: Path, db_url: str) -> None:
    """The runs table vanishes for a while (every statement fails, not a busy error); the
    executors log and retry, and take the queued run once it is back."""
    db = tmp_path / "brain.db"

    @workflow(name="patient")
    def patient():
        shell("hello", command="echo hello")

    async def scenario() -> str:
        service = BrainService({"patient": patient}, store=Store(db_url), concurrency=2,
                               triggers=False)
        await service.start()
        try:
            await asyncio.sleep(0.3)
            _sql(db, "ALTER TABLE brain_runs RENAME TO brain_runs_away")
            await asyncio.sleep(2.5)  # the executors and the resume scan meet errors here
            assert all(not t.done() for t in service._tasks), "a background loop died"
            _sql(db, "ALTER TABLE brain_runs_away RENAME TO brain_runs")
            run_id, _ = await service.enqueue(patient, TriggerData(), trigger_key="api")
            assert run_id is not None
            await _wait_all_ended(service.store, [run_id], 20)
            return str((await service.store.get_run(run_id, with_steps=False)).status)
        finally:
            await service.stop(grace_seconds=1)

    assert asyncio.run(scenario()) == "succeeded"


def test_a_schedule_fire_that_could_not_be_queued_is_queued_later(tmp_path: Path, db_url: str) -> None:
    db = tmp_path / "brain.db"

    @workflow(name="fired")
    def fired():
        shell("hello", command="echo hello")

    async def scenario() -> list[tuple[object, ...]]:
        service = BrainService({"fired": fired}, store=Store(db_url), concurrency=1,
                               triggers=False, execute=False)
        await service.start()
        try:
            fire_time = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
            _sql(db, "ALTER TABLE brain_fires RENAME TO brain_fires_away")
            await service.firing.fire("fired", "every:60", fired.triggers[0] if fired.triggers else
                                _every(), fire_time)
            _sql(db, "ALTER TABLE brain_fires_away RENAME TO brain_fires")
            for _ in range(100):
                rows = _sql(db, "SELECT trigger_key, run_id FROM brain_fires")
                if rows:
                    return rows
                await asyncio.sleep(0.1)
            return []
        finally:
            await service.stop(grace_seconds=1)

    rows = asyncio.run(scenario())
    assert len(rows) == 1 and rows[0][0] == "every:60" and rows[0][1] is not None


def _every():  # type: ignore[no-untyped-def]
    from brain import every

    return every(seconds=60, overlap="queue")
