"""The durable queue and schedule claims (SQL): what the server's triggers and executors use.

Part of :class:`brain.store.Store`; every trigger only creates queued runs
here, and executors take them with :meth:`RunQueue.claim_next`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from brain._clock import utcnow
from brain._errors import StoreError
from brain.results import RunStatus, StepStatus, TriggerData, clean_text
from brain.store.base import QueuedRun, stored_trigger
from brain.store.database import Database, lease_clock
from brain.store.tables import fires, runs, steps, workers

_ACTIVE = (RunStatus.QUEUED.value, RunStatus.RUNNING.value)


class QueueFull(StoreError):
    """More than ``BRAIN_MAX_QUEUED_RUNS`` runs are queued: try again later."""


def queued_run_rows(run_id: str, workflow: str, definition_hash: str, trigger: TriggerData,
                    step_rows: Sequence[tuple[str, str]], now: datetime,
                    **columns: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The rows of a new run, ``queued``, and of its pending steps (``(name, kind)`` in call
    order); the trigger as every store records it. ``columns`` adds or overrides run
    columns (``trigger_key``, ``previous_run_id``...)."""
    trigger = stored_trigger(trigger)
    row: dict[str, Any] = dict(
        id=run_id, workflow=workflow, definition_hash=definition_hash,
        status=RunStatus.QUEUED.value, trigger_event=trigger.event, trigger_body=trigger.body,
        trigger_path=trigger.path, trigger_headers=json.dumps(trigger.headers), created_at=now,
        cancel_requested=False, **columns)
    step_values = [dict(run_id=run_id, name=name, position=i, kind=kind,
                        status=StepStatus.PENDING.value, tries=0)
                   for i, (name, kind) in enumerate(step_rows)]
    return row, step_values


def insert_queued(conn: Any, queued: Sequence[QueuedRun], now: datetime) -> None:
    """Insert ``queued`` runs (failure handlers), with their pending steps, on ``conn``
    inside the caller's transaction."""
    for q in queued:
        run_row, step_values = queued_run_rows(q.run_id, q.workflow, q.definition_hash,
                                               q.trigger, q.step_rows, now,
                                               trigger_key=q.trigger.event)
        conn.execute(insert(runs), run_row)
        if step_values:
            conn.execute(insert(steps), step_values)


class RunQueue(Database):
    """The queue's reads and writes, on top of a store's :class:`Database`."""

    #: (when counted, count) for :meth:`_queued_estimate`.
    _queued_cache: tuple[float, int] | None = None

    async def enqueue_run(self, *, run_id: str, workflow: str, definition_hash: str,
                          trigger: TriggerData, step_rows: Sequence[tuple[str, str]],
                          trigger_key: str | None = None, delivery_id: str | None = None,
                          fire_time: datetime | None = None,
                          max_queued: int | None = None) -> tuple[str | None, bool]:
        """Commit a queued run (and its schedule fire claim) in one transaction.

        Returns ``(run_id, True)`` when created; ``(first_run_id, False)`` for a
        repeated ``delivery_id``; ``(None, False)`` when ``fire_time`` was
        already claimed. Raises :class:`QueueFull` over ``max_queued``.
        """
        # A repeated delivery id is caught by the unique index below; no lookup first.
        if max_queued is not None and await self._queued_estimate() >= max_queued:
            raise QueueFull(f"{max_queued} runs are already queued")
        now = utcnow()
        row, step_values = queued_run_rows(run_id, workflow, definition_hash, trigger, step_rows,
                                           now, trigger_key=trigger_key, delivery_id=delivery_id)
        statements: list[tuple[Any, Any]] = []
        if fire_time is not None:
            statements.append((insert(fires), dict(
                workflow=workflow, trigger_key=trigger_key or "", fire_time=fire_time,
                run_id=run_id, claimed_at=now)))
        statements.append((insert(runs), row))
        if step_values:
            statements.append((insert(steps), step_values))
        try:
            await self._transaction(statements)
        except IntegrityError:
            if fire_time is not None:
                return None, False
            if delivery_id is not None:  # the same delivery raced in on another server
                found = await self._rows(select(runs.c.id).where(
                    runs.c.workflow == workflow, runs.c.delivery_id == delivery_id))
                if found:
                    return str(found[0].id), False
            raise
        return run_id, True

    async def claim_fire(self, workflow: str, trigger_key: str, fire_time: datetime) -> bool:
        """Claim a fire without a run (a skipped fire still counts as handled)."""
        try:
            await self._transaction([(insert(fires), dict(
                workflow=workflow, trigger_key=trigger_key, fire_time=fire_time, run_id=None,
                claimed_at=utcnow()))])
        except IntegrityError:
            return False
        return True

    async def last_fire(self, workflow: str, trigger_key: str) -> datetime | None:
        """The latest claimed fire time of a schedule, if any."""
        found = await self._rows(select(func.max(fires.c.fire_time)).where(
            fires.c.workflow == workflow, fires.c.trigger_key == trigger_key))
        value = found[0][0] if found else None
        if value is None:
            return None
        if isinstance(value, str):  # SQLite aggregates lose the column type
            value = datetime.fromisoformat(value)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    async def _queued_estimate(self) -> int:
        """The queue length, counted at most every 0.2 s (the limit is a safety valve,
        not an exact quota: an exact count per delivery would halve webhook ingest)."""
        import time

        now = time.monotonic()
        cached = self._queued_cache
        if cached is not None and now - cached[0] < 0.2:
            self._queued_cache = (cached[0], cached[1] + 1)
            return int(cached[1])
        count = await self.count_queued()
        self._queued_cache = (now, count + 1)
        return count

    async def count_queued(self) -> int:
        """How many runs wait in the queue."""
        found = await self._rows(select(func.count()).select_from(runs)
                                 .where(runs.c.status == RunStatus.QUEUED.value))
        return int(found[0][0])

    async def count_active(self, *, workflow: str | None = None, trigger_key: str | None = None,
                           status: str | None = None) -> int:
        """Queued and running runs (or only ``status``), optionally of one workflow/trigger."""
        query = select(func.count()).select_from(runs)
        query = query.where(runs.c.status == status) if status else \
            query.where(runs.c.status.in_(_ACTIVE))
        if workflow is not None:
            query = query.where(runs.c.workflow == workflow)
        if trigger_key is not None:
            query = query.where(runs.c.trigger_key == trigger_key)
        found = await self._rows(query)
        return int(found[0][0])

    async def claim_next(self, workflows: Sequence[str], owner: str,
                         lease_seconds: float) -> str | None:
        """Take the oldest queued run of one of ``workflows``; its id, or ``None``.

        One statement: ``UPDATE ... WHERE id = (the oldest queued) RETURNING id``.
        On PostgreSQL the pick skips rows other executors have locked (``FOR
        UPDATE SKIP LOCKED``), so each run goes to exactly one executor; on
        SQLite the writer thread makes it atomic.
        """
        if not workflows:
            return None
        pick = (select(runs.c.id).where(runs.c.status == RunStatus.QUEUED.value,
                                        runs.c.workflow.in_(list(workflows)))
                .order_by(runs.c.created_at).limit(1))
        if self.dialect == "postgresql":
            pick = pick.with_for_update(skip_locked=True)
        claim = (update(runs)
                 .where(runs.c.id == pick.scalar_subquery(),
                        runs.c.status == RunStatus.QUEUED.value)
                 .values(status=RunStatus.RUNNING.value, lease_owner=owner, started_at=utcnow(),
                         lease_expires_at=lease_clock(self.dialect)
                         + timedelta(seconds=lease_seconds))
                 .returning(runs.c.id))
        found = (await self._one(claim)).first()
        return None if found is None else str(found.id)

    async def fail_queued(self, workflow: str, error: str,
                          handlers: Callable[[str, str], Sequence[QueuedRun]] | None = None
                          ) -> list[str]:
        """Fail every queued run of ``workflow`` (it is no longer loaded) and return their
        ids. Their steps end ``skipped``, and with each run the runs ``handlers(run id,
        trigger event)`` gives (its failure handlers) are queued, in one transaction."""
        now = utcnow()
        message = clean_text(error)

        def job(conn: Any) -> list[str]:
            queued = conn.execute(select(runs.c.id, runs.c.trigger_event).where(
                runs.c.workflow == workflow, runs.c.status == RunStatus.QUEUED.value)).all()
            failed: list[str] = []
            for run_id, event in queued:
                taken = conn.execute(update(runs).where(
                    runs.c.id == run_id, runs.c.status == RunStatus.QUEUED.value).values(
                    status=RunStatus.FAILED.value, error=message, ended_at=now)).rowcount
                if not taken:  # an executor claimed it meanwhile
                    continue
                conn.execute(update(steps).where(
                    steps.c.run_id == run_id,
                    steps.c.status.in_((StepStatus.PENDING.value, StepStatus.RUNNING.value)))
                    .values(status=StepStatus.SKIPPED.value, error=message, ended_at=now))
                insert_queued(conn, handlers(run_id, event) if handlers else (), now)
                failed.append(str(run_id))
            return failed

        return list(await self._atomically(job))

    async def running_leases(self) -> list[tuple[str, str | None]]:
        """``(run id, lease owner)`` of every running run."""
        rows = await self._rows(select(runs.c.id, runs.c.lease_owner)
                                .where(runs.c.status == RunStatus.RUNNING.value))
        return [(str(r.id), r.lease_owner) for r in rows]

    async def expire_lease(self, run_id: str, owner: str | None) -> None:
        """End ``owner``'s lease on a run now (its process is known to be gone)."""
        await self._one(update(runs).where(runs.c.id == run_id, runs.c.lease_owner == owner,
                                           runs.c.status == RunStatus.RUNNING.value)
                        .values(lease_expires_at=lease_clock(self.dialect)
                                - timedelta(seconds=1)))

    # --- workers ------------------------------------------------------------------

    async def worker_heartbeat(self, worker_id: str, *, host: str, pid: int, kind: str,
                               started_at: datetime, executing: int) -> None:
        """Say this executor process is alive (its row is created on the first beat)."""
        now = utcnow()
        beat = update(workers).where(workers.c.id == worker_id).values(
            heartbeat_at=now, executing=executing)
        row = dict(id=worker_id, host=host, pid=pid, kind=kind, started_at=started_at,
                   heartbeat_at=now, executing=executing)

        def job(conn: Any) -> None:
            if not conn.execute(beat).rowcount:
                conn.execute(insert(workers), row)

        await self._atomically(job)

    async def forget_worker(self, worker_id: str) -> None:
        """Remove a worker's row (it stopped cleanly)."""
        await self._one(delete(workers).where(workers.c.id == worker_id))

    async def list_workers(self) -> list[dict[str, Any]]:
        """Every executor process that has a row, most recent heartbeat first."""
        rows = await self._rows(select(workers).order_by(workers.c.heartbeat_at.desc()))
        return [dict(r._mapping) for r in rows]
