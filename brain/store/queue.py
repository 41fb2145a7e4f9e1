"""The durable queue and schedule claims: what the server's triggers and executors use.

Part of :class:`brain.store.Store`; every trigger only creates queued runs
here, and executors take them with :meth:`RunQueue.claim_next`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from brain._clock import utcnow
from brain._errors import StoreError
from brain.results import TriggerData, clean_text
from brain.store import queries
from brain.store.backend import Connection, Statement, UsesBackend, lease_times, utc
from brain.store.base import QueuedRun
from brain.store.children import end_parent_of
from brain.store.errors import ConstraintViolation
from brain.store.records import insert_queued, queued_run_rows, write_new_run

__all__ = ["QueueFull", "RunQueue", "insert_queued", "queued_run_rows"]


class QueueFull(StoreError):
    """More than ``BRAIN_MAX_QUEUED_RUNS`` runs are queued: try again later."""


#: The channel a run's becoming ``queued`` is announced on (migration 0009).
QUEUED_CHANNEL = "brain_queued"
#: A workflow's limit: ``(max_concurrent_runs, keyed)`` (see :meth:`RunQueue.take_next`).
Limit = tuple[int, bool]
#: How many groups of queued runs (workflow and key) a claim under limits looks at.
GROUPS = 500


class RunQueue(UsesBackend):
    """The queue's reads and writes."""

    #: (when counted, count) for :meth:`_queued_estimate`.
    _queued_cache: tuple[float, int] | None = None

    @property
    def notifies(self) -> bool:
        """Whether :meth:`watch_queued` hears of runs other processes queue (PostgreSQL)."""
        return hasattr(self.db, "listen")

    async def watch_queued(self, on_queued: Callable[[], None]) -> None:
        """Call ``on_queued`` whenever any process queues a run (enqueued, fired, woken,
        retried; SPEC §19), until the connection is lost (then return: call again) or the
        task is cancelled. PostgreSQL only (``LISTEN brain_queued``, sent by a trigger when
        the run's transaction commits); elsewhere it returns at once."""
        listen = getattr(self.db, "listen", None)
        if listen is not None:
            await listen(QUEUED_CHANNEL, on_queued)

    async def enqueue_run(self, *, run_id: str, workflow: str, definition_hash: str,
                          trigger: TriggerData, step_rows: Sequence[tuple[str, str]],
                          trigger_key: str | None = None, delivery_id: str | None = None,
                          fire_time: datetime | None = None,
                          max_queued: int | None = None,
                          concurrency_key: str | None = None,
                          params: Mapping[str, Any] | None = None,
                          trace_context: str | None = None,
                          step_prints: str | None = None,
                          version: str | None = None) -> tuple[str | None, bool]:
        """Commit a queued run (and its schedule fire claim) in one transaction.

        Returns ``(run_id, True)`` when created; ``(first_run_id, False)`` for a
        repeated ``delivery_id``; ``(None, False)`` when ``fire_time`` was
        already claimed. Raises :class:`QueueFull` over ``max_queued``. ``step_prints`` and
        ``version``: what its steps do and its file's version (SPEC §24).
        """
        # A repeated delivery id is caught by the unique index below; no lookup first.
        if max_queued is not None and await self._queued_estimate() >= max_queued:
            raise QueueFull(f"{max_queued} runs are already queued")
        now = utcnow()
        row, step_values = queued_run_rows(run_id, workflow, definition_hash, trigger, step_rows,
                                           now, params, trigger_key=trigger_key,
                                           delivery_id=delivery_id,
                                           concurrency_key=concurrency_key,
                                           trace_context=trace_context,
                                           step_prints=step_prints, version=version)
        statements: list[Statement] = []
        if fire_time is not None:
            statements.append((queries.INSERT_FIRE, {
                "workflow": workflow, "trigger_key": trigger_key or "", "fire_time": fire_time,
                "run_id": run_id, "claimed_at": now}))
        try:
            await write_new_run(self.db, row, step_values, before=statements)
        except ConstraintViolation:
            if delivery_id is not None:  # the same delivery came before (or raced in)
                found = await self.db.read(queries.RUN_BY_DELIVERY, {
                    "workflow": workflow, "delivery_id": delivery_id})
                if found:
                    return str(found[0]["id"]), False
            if fire_time is not None:  # the fire was claimed
                return None, False
            raise
        return run_id, True

    async def enqueue_runs(self, runs: Sequence[QueuedRun], *, trigger_key: str | None = None,
                           max_queued: int | None = None) -> list[str]:
        """Commit several queued runs in one transaction, all or none (a run id that exists
        already is a :class:`~brain.store.errors.ConstraintViolation`); their ids, in
        order. Raises :class:`QueueFull` when they would take the queue over
        ``max_queued``."""
        if not runs:
            return []
        if max_queued is not None and await self._queued_estimate(0) + len(runs) > max_queued:
            raise QueueFull(f"{len(runs)} more runs would take the queue over {max_queued}")
        now = utcnow()
        run_rows: list[dict[str, object]] = []
        step_values: list[dict[str, object]] = []
        for q in runs:
            row, steps = queued_run_rows(q.run_id, q.workflow, q.definition_hash, q.trigger,
                                         q.step_rows, now, q.params, trigger_key=trigger_key,
                                         concurrency_key=q.concurrency_key,
                                         trace_context=q.trace_context,
                                         step_prints=q.step_prints, version=q.version)
            run_rows.append(row)
            step_values += steps
        statements: list[Statement] = [(queries.INSERT_RUN, run_rows)]
        if step_values:
            statements.append((queries.INSERT_STEP, step_values))
        await self.db.transaction(statements)
        if self._queued_cache is not None:
            self._queued_cache = (self._queued_cache[0], self._queued_cache[1] + len(runs))
        return [q.run_id for q in runs]

    async def claim_fire(self, workflow: str, trigger_key: str, fire_time: datetime) -> bool:
        """Claim a fire without a run (a skipped fire still counts as handled)."""
        try:
            await self.db.transaction([(queries.INSERT_FIRE, {
                "workflow": workflow, "trigger_key": trigger_key, "fire_time": fire_time,
                "run_id": None, "claimed_at": utcnow()})])
        except ConstraintViolation:
            return False
        return True

    async def last_fire(self, workflow: str, trigger_key: str) -> datetime | None:
        """The latest claimed fire time of a schedule, if any."""
        found = await self.db.read(queries.LAST_FIRE,
                                   {"workflow": workflow, "trigger_key": trigger_key})
        value = found[0]["fire_time"] if found else None
        return None if value is None else utc(value)

    async def _queued_estimate(self, adding: int = 1) -> int:
        """The queue length, counted at most every 0.2 s (the limit is a safety valve,
        not an exact quota: an exact count per delivery would halve webhook ingest)."""
        now = time.monotonic()
        cached = self._queued_cache
        if cached is not None and now - cached[0] < 0.2:
            self._queued_cache = (cached[0], cached[1] + adding)
            return int(cached[1])
        count = await self.count_queued()
        self._queued_cache = (now, count + adding)
        return count

    async def count_queued(self) -> int:
        """How many runs wait in the queue."""
        found = await self.db.read(queries.COUNT_RUNS + "status = 'queued'")
        return int(found[0]["n"])

    async def count_active(self, *, workflow: str | None = None, trigger_key: str | None = None,
                           status: str | None = None) -> int:
        """Queued and running runs (or only ``status``), optionally of one workflow/trigger."""
        sql = queries.COUNT_RUNS + ("status = :status" if status
                                    else "status IN ('queued', 'running')")
        if workflow is not None:
            sql += " AND workflow = :workflow"
        if trigger_key is not None:
            sql += " AND trigger_key = :trigger_key"
        found = await self.db.read(sql, {"status": status, "workflow": workflow,
                                         "trigger_key": trigger_key})
        return int(found[0]["n"])

    async def claim_next(self, workflows: Sequence[str], owner: str,
                         lease_seconds: float) -> str | None:
        """Take the oldest queued run of one of ``workflows``; its id, or ``None``.

        One statement: ``UPDATE ... WHERE id = (the oldest queued) RETURNING id``.
        On PostgreSQL the pick skips rows other executors have locked (``FOR
        UPDATE SKIP LOCKED``), so each run goes to exactly one executor; on
        SQLite the writer thread makes it atomic.
        """
        taken = await self.take_next(workflows, owner, lease_seconds)
        return None if taken is None else taken[0]

    async def take_next(self, workflows: Sequence[str], owner: str, lease_seconds: float,
                        limits: Mapping[str, Limit] | None = None) -> tuple[str, bool] | None:
        """:meth:`claim_next`, saying too whether the run is one that waited and was woken
        (it has started before: its steps that ended keep their records).

        ``limits``: workflow → ``(max_concurrent_runs, keyed)``. The oldest queued run is
        taken unless it would make more runs of its group run at once than the limit
        allows — its workflow's, or, ``keyed``, its workflow's with the same concurrency
        key (SPEC §19) — then the next oldest, and so on. Counting and claiming happen in
        one transaction, serialised per group (PostgreSQL: a transaction-scoped advisory
        lock on the group; SQLite: the single writer), so no number of processes ever
        exceeds a limit."""
        if not workflows:
            return None
        if limits:
            return await self._take_within(workflows, limits, owner, lease_seconds)
        listed, params = queries.in_list("workflow", list(workflows))
        written = await self.db.write(queries.claim_next(listed), {
            **params, "owner": owner, "now": utcnow(), **lease_times(lease_seconds)})
        if not written.rows:
            return None
        return str(written.rows[0]["id"]), bool(written.rows[0]["wakes"])

    async def _take_within(self, workflows: Sequence[str], limits: Mapping[str, Limit],
                           owner: str, lease_seconds: float) -> tuple[str, bool] | None:
        """:meth:`take_next` under limits (see there)."""
        listed, params = queries.in_list("workflow", list(workflows))
        locks = self.db.dialect.name == "postgresql"
        claim = {"owner": owner, "now": utcnow(), **lease_times(lease_seconds)}

        def job(conn: Connection) -> tuple[str, bool] | None:
            full: set[tuple[str, str | None]] = set()
            for row in conn.read(queries.QUEUED_GROUPS + listed + queries.GROUPS_IN_ORDER,
                                 {**params, "limit": GROUPS}):
                workflow, key = row["workflow"], row["k"]
                limit = limits.get(workflow)
                if limit is not None:
                    group = (workflow, key if limit[1] else None)
                    if group in full:
                        continue
                    if locks:
                        conn.read(queries.LOCK_LIMIT_GROUP,
                                  {"group": f"brain-limit\x1f{group[0]}\x1f{group[1] or ''}"})
                    counted = conn.read(queries.COUNT_RUNNING_OF if group[1] is None
                                        else queries.COUNT_RUNNING_WITH_KEY,
                                        {"workflow": workflow, "key": group[1]})
                    if int(counted[0]["n"]) >= limit[0]:
                        full.add(group)
                        continue
                taken = conn.read(queries.CLAIM_OLDEST_OF_GROUP,
                                  {**claim, "workflow": workflow, "key": key})
                if taken:
                    return str(taken[0]["id"]), bool(taken[0]["wakes"])
            return None

        return await self.db.atomically(job)

    async def fail_queued(self, workflow: str, error: str,
                          handlers: Callable[[str, str], Sequence[QueuedRun]] | None = None
                          ) -> list[str]:
        """Fail every queued run of ``workflow`` (it is no longer loaded) and return their
        ids. Their steps end ``skipped``, and with each run the runs ``handlers(run id,
        trigger event)`` gives (its failure handlers) are queued, in one transaction."""
        now = utcnow()
        message = clean_text(error)

        def job(conn: Connection) -> list[str]:
            failed: list[str] = []
            for queued in conn.read(queries.QUEUED_OF, {"workflow": workflow}):
                run_id = str(queued["id"])
                params = {"run_id": run_id, "error": message, "now": now}
                if not conn.write(queries.FAIL_QUEUED, params):
                    continue  # an executor claimed it meanwhile
                conn.write(queries.SKIP_UNFINISHED_STEPS, params)
                conn.write(queries.DROP_TIMERS_OF_RUN, params)
                end_parent_of(conn, run_id, now)  # a child: its parent's step fails
                insert_queued(conn, handlers(run_id, queued["trigger_event"]) if handlers
                              else (), now)
                failed.append(run_id)
            return failed

        return list(await self.db.atomically(job))

    async def running_leases(self) -> list[tuple[str, str | None]]:
        """``(run id, lease owner)`` of every running run."""
        rows = await self.db.read(queries.RUNNING_LEASES)
        return [(str(r["id"]), r["lease_owner"]) for r in rows]

    async def expire_lease(self, run_id: str, owner: str | None) -> None:
        """End ``owner``'s lease on a run now (its process is known to be gone)."""
        sql = queries.EXPIRE_LEASE + (" AND lease_owner IS NULL" if owner is None
                                      else " AND lease_owner = :owner")
        await self.db.write(sql, {"run_id": run_id, "owner": owner, **lease_times()})
