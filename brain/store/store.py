"""``Store``: every read and write of runs and steps, for SQLite and PostgreSQL alike.

The runner, the CLI and (later) the server all go through these methods; no
other module writes SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Row, and_, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from brain._errors import RunNotFound, StoreError
from brain.results import FINISHED_RUN, RunResult, RunStatus, StepResult, StepStatus, TriggerData
from brain.store import schema
from brain.store.base import RunRecord
from brain.store.queue import QueueMixin
from brain.store.tables import metadata, runs, steps

DEFAULT_URL = "sqlite+aiosqlite:///brain.db"
_FINISHED = [s.value for s in FINISHED_RUN]


def default_url() -> str:
    """``BRAIN_DATABASE_URL``, read now, or the SQLite default ``brain.db``."""
    return os.environ.get("BRAIN_DATABASE_URL") or DEFAULT_URL


def utcnow() -> datetime:
    """The current time in UTC (timezone-aware)."""
    return datetime.now(UTC)


def redact_url(url: str) -> str:
    """``url`` with any password shown as ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable database URL>"


class Store(QueueMixin):
    """Where runs are recorded. ``Store()`` uses ``BRAIN_DATABASE_URL``.

    >>> async with Store("sqlite+aiosqlite:///runs.db") as store:   # doctest: +SKIP
    ...     print(await store.list_runs(limit=5))
    """

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        self._engine: AsyncEngine | None = None
        self._auto: AsyncEngine | None = None
        self._held: AsyncConnection | None = None
        self._lock = asyncio.Lock()
        self._batch: list[tuple[list[tuple[Any, Any]], asyncio.Future[None]]] = []
        self._flushing = False
        self._flusher: asyncio.Future[None] | None = None

    @classmethod
    def memory(cls) -> Store:
        """A fresh private in-memory SQLite store (for tests)."""
        return cls("sqlite+aiosqlite://")

    def __repr__(self) -> str:
        return f"Store({self.shown_url!r})"

    @property
    def shown_url(self) -> str:
        """The URL with any password redacted: safe to print."""
        return redact_url(self.url)

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` has run (and :meth:`close` not yet)."""
        return self._engine is not None

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine; the store must be open."""
        if self._engine is None:
            raise StoreError("the store is not open: use `async with store:` or `await store.open()`")
        return self._engine

    async def open(self, *, check_schema: bool = True) -> Store:
        """Connect, apply SQLite settings, and make sure the schema is current."""
        if self._engine is not None:
            return self
        try:
            url = make_url(self.url)
        except ArgumentError:
            raise StoreError(f"BRAIN_DATABASE_URL is not a database URL: {self.shown_url}") from None
        kwargs: dict[str, Any] = {}
        memory = url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")
        if memory:
            from sqlalchemy.pool import StaticPool

            kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        try:
            engine = create_async_engine(url, **kwargs)
            # Single statements go through an autocommit engine: one round trip to the
            # driver's thread instead of three (BEGIN/COMMIT/reset), which is most of a
            # step's cost on SQLite.
            auto = engine if memory else create_async_engine(
                url, isolation_level="AUTOCOMMIT", pool_reset_on_return=None, **kwargs)
        except (ArgumentError, ImportError) as exc:
            raise StoreError(f"cannot use database {self.shown_url}: {exc}") from None
        if url.get_backend_name() == "sqlite":
            _sqlite_settings(engine, memory=memory)
            if auto is not engine:
                _sqlite_settings(auto, memory=memory)
        try:
            if memory:
                async with engine.begin() as conn:
                    await conn.run_sync(metadata.create_all)
            elif check_schema:
                await schema.ensure_current(engine, auto_upgrade=url.get_backend_name() == "sqlite",
                                            shown_url=self.shown_url)
        except (StoreError, SQLAlchemyError, OSError) as exc:
            await engine.dispose()
            await auto.dispose()
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"cannot open database {self.shown_url}: {_short(exc)}") from None
        self._engine, self._auto = engine, auto
        return self

    async def upgrade_schema(self) -> tuple[str | None, str]:
        """Create or upgrade the schema (``brain db upgrade``); return (before, after) revisions."""
        await self.open(check_schema=False)
        try:
            return await schema.upgrade(self.engine)
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(f"cannot upgrade database {self.shown_url}: {_short(exc)}") from None

    async def close(self) -> None:
        """Release connections (after any statement still in flight)."""
        async with self._lock:
            await self._close()

    async def _close(self) -> None:
        if self._held is not None:
            with contextlib.suppress(Exception):
                await self._held.close()
            self._held = None
        if self._engine is not None:
            await self._engine.dispose()
            if self._auto is not None and self._auto is not self._engine:
                await self._auto.dispose()
            self._engine = self._auto = None

    async def __aenter__(self) -> Store:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection]:
        """The connection single statements share (autocommit), one user at a time.

        Checking a connection out of the pool and resetting it costs more than
        the statement itself on SQLite, so one is kept open.
        """
        if self._auto is None:
            raise StoreError("the store is not open: use `async with store:` or `await store.open()`")
        async with self._lock:
            if self._auto is self._engine:  # in-memory: one shared connection, plain transactions
                async with self._auto.begin() as conn:
                    yield conn
                return
            if self._held is None or self._held.closed or self._held.invalidated:
                self._held = await self._auto.connect()
            try:
                yield self._held
            except DBAPIError as exc:
                if exc.connection_invalidated:
                    self._held = None
                raise

    async def _one(self, statement: Any, params: dict[str, Any] | None = None) -> Any:
        """Run one statement atomically on its own: the cheap path.

        Shielded: a caller cancelled mid-statement must not leave the shared
        connection half-way through a round trip.
        """
        async def go() -> Any:
            async with self._connection() as conn:
                result = await conn.execute(statement, params)
                return result if not result.returns_rows else _Buffered(list(result.all()))
        return await asyncio.shield(go())

    async def _transaction(self, statements: list[tuple[Any, Any]]) -> None:
        """Run ``(statement, params)`` pairs atomically.

        On a SQLite file they go through the shared connection between an explicit
        ``BEGIN IMMEDIATE`` and ``COMMIT`` (no pool checkout: the cheap path that
        makes webhook ingest fast); elsewhere through a pooled transaction.
        """
        if self.engine.dialect.name != "sqlite" or self._auto is self._engine:
            async with self.engine.begin() as conn:
                for statement, params in statements:
                    await conn.execute(statement, params)
            return

        # Group commit: transactions that arrive while one is being written wait and
        # are committed together in the next, each caller still answered only after
        # its own commit. Under concurrent webhooks this is most of the ingest rate.
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._batch.append((statements, future))
        if not self._flushing:
            self._flushing = True
            self._flusher = asyncio.ensure_future(self._flush_batches())
        await asyncio.shield(future)

    async def _flush_batches(self) -> None:
        try:
            while self._batch:
                batch, self._batch = self._batch, []
                try:
                    await self._write_batch([stmts for stmts, _ in batch])
                    outcomes: list[BaseException | None] = [None] * len(batch)
                except SQLAlchemyError:
                    # One of them broke a constraint (a repeated delivery, a claimed
                    # fire): write each alone, so only that one fails.
                    outcomes = []
                    for stmts, _ in batch:
                        try:
                            await self._write_batch([stmts])
                            outcomes.append(None)
                        except BaseException as exc:
                            outcomes.append(exc)
                except BaseException as exc:
                    outcomes = [exc] * len(batch)
                for (_, future), outcome in zip(batch, outcomes, strict=True):
                    if future.done():
                        continue
                    if outcome is None:
                        future.set_result(None)
                    else:
                        future.set_exception(outcome)
        finally:
            self._flushing = False

    async def _write_batch(self, transactions: list[list[tuple[Any, Any]]]) -> None:
        async with self._connection() as conn:
            await conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                for statements in transactions:
                    for statement, params in statements:
                        await conn.execute(statement, params)
            except BaseException:
                await conn.exec_driver_sql("ROLLBACK")
                raise
            await conn.exec_driver_sql("COMMIT")

    # --- writing runs -------------------------------------------------------

    async def create_run(self, *, run_id: str, workflow: str, definition_hash: str,
                         trigger: TriggerData, step_rows: Sequence[tuple[str, str]],
                         owner: str | None = None, lease_seconds: float = 30,
                         previous_run_id: str | None = None) -> datetime:
        """Insert a run and its pending steps (``(name, kind)`` in call order) in one commit.

        With ``owner`` the run starts ``running`` under that owner's lease,
        else it is ``queued``. Returns the creation time.
        """
        now = utcnow()
        row: dict[str, Any] = dict(
            id=run_id, workflow=workflow, definition_hash=definition_hash,
            status=RunStatus.QUEUED.value, trigger_event=trigger.event, trigger_body=trigger.body,
            trigger_path=trigger.path, trigger_headers=json.dumps(trigger.headers),
            created_at=now, cancel_requested=False, previous_run_id=previous_run_id)
        if owner is not None:
            row.update(status=RunStatus.RUNNING.value, started_at=now, lease_owner=owner,
                       lease_expires_at=now + timedelta(seconds=lease_seconds))
        step_values = [dict(run_id=run_id, name=name, position=i, kind=kind,
                            status=StepStatus.PENDING.value, tries=0)
                       for i, (name, kind) in enumerate(step_rows)]
        await self._transaction([(insert(runs), row)]
                                + ([(insert(steps), step_values)] if step_values else []))
        return now

    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        """Take a queued run, or a running one whose lease expired; ``True`` if taken."""
        now = utcnow()
        result = await self._one(
                update(runs)
                .where(runs.c.id == run_id)
                .where(or_(runs.c.status == RunStatus.QUEUED.value,
                           and_(runs.c.status == RunStatus.RUNNING.value,
                                or_(runs.c.lease_expires_at.is_(None),
                                    runs.c.lease_expires_at < now))))
                .values(status=RunStatus.RUNNING.value, lease_owner=owner,
                        lease_expires_at=now + timedelta(seconds=lease_seconds),
                        started_at=func.coalesce(runs.c.started_at, now)))
        return bool(result.rowcount)

    async def set_previous_run(self, run_id: str, previous_run_id: str | None) -> None:
        """Record which run ``{previous.X}`` reads from."""
        await self._one(update(runs).where(runs.c.id == run_id)
                        .values(previous_run_id=previous_run_id))

    async def heartbeat(self, run_id: str, owner: str, lease_seconds: float | None) -> tuple[bool, bool]:
        """Renew the lease (when ``lease_seconds``); return (still ours, cancel requested)."""
        if lease_seconds is not None:
            await self._one(update(runs).where(runs.c.id == run_id, runs.c.lease_owner == owner)
                            .values(lease_expires_at=utcnow() + timedelta(seconds=lease_seconds)))
        row = (await self._one(select(runs.c.lease_owner, runs.c.cancel_requested)
                               .where(runs.c.id == run_id))).first()
        if row is None:
            return False, True
        return row.lease_owner == owner, bool(row.cancel_requested)

    async def step_running(self, run_id: str, name: str, *, inputs: dict[str, Any],
                           tries: int, started_at: datetime) -> None:
        """Mark a step ``running`` with its resolved (redacted) inputs."""
        await self._one(_STEP_RUNNING, dict(
            b_run=run_id, b_name=name, b_status=StepStatus.RUNNING.value,
            b_inputs=json.dumps(inputs), b_tries=tries, b_started=started_at))

    async def step_finished(self, run_id: str, name: str, *, status: StepStatus, tries: int,
                            ended_at: datetime, output: str | None = None,
                            error: str | None = None, stderr: str | None = None,
                            inputs: dict[str, Any] | None = None,
                            started_at: datetime | None = None) -> None:
        """Record a step's end; committed before this returns.

        ``inputs`` and ``started_at``, when given, are written too (a quick step
        is recorded once, finished, without a ``running`` write first).
        """
        if inputs is not None and started_at is not None:
            await self._one(_STEP_FINISHED, dict(
                b_run=run_id, b_name=name, b_status=status.value, b_tries=tries, b_ended=ended_at,
                b_output=output, b_error=error, b_stderr=stderr, b_inputs=json.dumps(inputs),
                b_started=started_at))
            return
        values: dict[str, Any] = dict(status=status.value, tries=tries, ended_at=ended_at,
                                      output=output, error=error, stderr=stderr)
        if inputs is not None:
            values["inputs"] = json.dumps(inputs)
        if started_at is not None:
            values["started_at"] = started_at
        await self._one(update(steps).where(steps.c.run_id == run_id, steps.c.name == name)
                        .values(**values))

    async def steps_ended(self, run_id: str, names: Iterable[str], status: StepStatus,
                          error: str | None = None) -> None:
        """Mark several steps ``skipped`` or ``cancelled`` at once."""
        names = list(names)
        if not names:
            return
        now = utcnow()
        await self._one(update(steps).where(steps.c.run_id == run_id, steps.c.name.in_(names))
                        .values(status=status.value, ended_at=now, error=error))

    async def reset_steps(self, run_id: str, names: Iterable[str]) -> None:
        """Put unfinished steps back to ``pending`` before a resume."""
        names = list(names)
        if not names:
            return
        await self._one(update(steps).where(steps.c.run_id == run_id, steps.c.name.in_(names))
                        .values(status=StepStatus.PENDING.value, ended_at=None,
                                output=None, error=None))

    async def finish_run(self, run_id: str, status: RunStatus, error: str | None = None) -> datetime:
        """Record the run's end and release its lease."""
        now = utcnow()
        await self._one(update(runs).where(runs.c.id == run_id)
                        .values(status=status.value, error=error, ended_at=now,
                                lease_owner=None, lease_expires_at=None))
        return now

    async def request_cancel(self, run_id: str) -> tuple[RunResult, bool]:
        """Ask for a run to stop; a queued run is cancelled at once.

        Returns the run and whether it was still queued or running.
        """
        run = await self.get_run(run_id, with_steps=False)
        if run.status in FINISHED_RUN:
            return run, False
        now = utcnow()
        async with self.engine.begin() as conn:
            await conn.execute(update(runs).where(runs.c.id == run.run_id)
                               .values(cancel_requested=True))
            await conn.execute(
                update(runs).where(runs.c.id == run.run_id,
                                   runs.c.status == RunStatus.QUEUED.value)
                .values(status=RunStatus.CANCELLED.value, error="cancelled", ended_at=now))
            await conn.execute(
                update(steps).where(steps.c.run_id == run.run_id,
                                    steps.c.status == StepStatus.PENDING.value,
                                    select(runs.c.status).where(runs.c.id == run.run_id)
                                    .scalar_subquery() == RunStatus.CANCELLED.value)
                .values(status=StepStatus.CANCELLED.value, ended_at=now))
        return await self.get_run(run.run_id, with_steps=False), True

    async def prune(self, finished_before: datetime) -> int:
        """Delete finished runs that ended before ``finished_before``; return how many."""
        async with self.engine.begin() as conn:
            ids = select(runs.c.id).where(runs.c.status.in_(_FINISHED),
                                          runs.c.ended_at < finished_before)
            await conn.execute(delete(steps).where(steps.c.run_id.in_(ids)))
            result = await conn.execute(delete(runs).where(runs.c.status.in_(_FINISHED),
                                                           runs.c.ended_at < finished_before))
        return int(result.rowcount or 0)

    # --- reading ------------------------------------------------------------

    async def _rows(self, query: Any) -> list[Row[Any]]:
        rows: list[Row[Any]] = (await self._one(query)).all()
        return rows

    async def resolve_id(self, run_id: str) -> str:
        """The full id of the one run whose id is or starts with ``run_id``."""
        if not run_id or not all(c in "0123456789abcdef" for c in run_id.lower()):
            raise RunNotFound(f"no run {run_id!r}: run ids are hexadecimal")
        found = await self._rows(select(runs.c.id).where(runs.c.id.startswith(run_id.lower())).limit(2))
        if not found:
            raise RunNotFound(f"no run {run_id!r}")
        if len(found) > 1:
            raise RunNotFound(f"run id prefix {run_id!r} is ambiguous: give more characters")
        return str(found[0].id)

    async def get_run(self, run_id: str, *, with_steps: bool = True) -> RunResult:
        """One run by id or unique prefix, with its steps in call order."""
        full = await self.resolve_id(run_id)
        found = await self._rows(select(runs).where(runs.c.id == full))
        if not found:
            raise RunNotFound(f"no run {run_id!r}")
        row = found[0]
        step_rows = []
        if with_steps:
            step_rows = await self._rows(select(steps).where(steps.c.run_id == full)
                                         .order_by(steps.c.position))
        return _run_result(row, step_rows)

    async def list_runs(self, *, workflow: str | None = None, status: str | None = None,
                        limit: int = 20) -> list[RunResult]:
        """The newest runs first, without their steps."""
        query = select(runs).order_by(runs.c.created_at.desc()).limit(limit)
        if workflow:
            query = query.where(runs.c.workflow == workflow)
        if status:
            query = query.where(runs.c.status == status)
        return [_run_result(r, []) for r in await self._rows(query)]

    async def run_row(self, run_id: str) -> RunRecord | None:
        """The run's own record (for the runner: lease, hash, trigger, previous run)."""
        found = await self._rows(select(runs).where(runs.c.id == run_id))
        if not found:
            return None
        r = found[0]
        return RunRecord(id=r.id, workflow=r.workflow, definition_hash=r.definition_hash,
                         status=r.status, trigger=_trigger(r), error=r.error,
                         previous_run_id=r.previous_run_id, created_at=r.created_at,
                         started_at=r.started_at, ended_at=r.ended_at,
                         cancel_requested=bool(r.cancel_requested), lease_owner=r.lease_owner,
                         lease_expires_at=r.lease_expires_at)

    async def latest_succeeded_run(self, workflow: str, before: datetime) -> str | None:
        """The id of ``workflow``'s latest succeeded run that ended before ``before``."""
        found = await self._rows(
            select(runs.c.id).where(runs.c.workflow == workflow,
                                    runs.c.status == RunStatus.SUCCEEDED.value,
                                    runs.c.ended_at <= before)
            .order_by(runs.c.ended_at.desc()).limit(1))
        return str(found[0].id) if found else None

    async def step_outputs(self, run_id: str, *, succeeded_only: bool = True) -> dict[str, str]:
        """``{step name: output}`` of a run's (succeeded) steps."""
        query = select(steps.c.name, steps.c.output).where(steps.c.run_id == run_id)
        if succeeded_only:
            query = query.where(steps.c.status == StepStatus.SUCCEEDED.value)
        return {r.name: r.output or "" for r in await self._rows(query)}

    async def step_states(self, run_id: str) -> dict[str, tuple[str, int]]:
        """``{step name: (status, tries)}`` for a run."""
        rows = await self._rows(select(steps.c.name, steps.c.status, steps.c.tries)
                                .where(steps.c.run_id == run_id))
        return {r.name: (r.status, r.tries) for r in rows}

    async def expired_runs(self) -> list[str]:
        """Ids of ``running`` runs whose lease has expired (their executor died)."""
        rows = await self._rows(select(runs.c.id).where(runs.c.status == RunStatus.RUNNING.value,
                                                        runs.c.lease_expires_at < utcnow()))
        return [str(r.id) for r in rows]


class _Buffered:
    """Rows fetched inside the shielded call, so nothing is read after the lock is gone."""

    def __init__(self, rows: list[Row[Any]]) -> None:
        self.rows = rows

    def all(self) -> list[Row[Any]]:
        return self.rows

    def first(self) -> Row[Any] | None:
        return self.rows[0] if self.rows else None


# The two statements every step runs, built once (building them costs more than running them).
_STEP_RUNNING = (
    update(steps)
    .where(steps.c.run_id == bindparam("b_run"), steps.c.name == bindparam("b_name"))
    .values(status=bindparam("b_status"), inputs=bindparam("b_inputs"), tries=bindparam("b_tries"),
            started_at=bindparam("b_started"), ended_at=None, error=None))
_STEP_FINISHED = (
    update(steps)
    .where(steps.c.run_id == bindparam("b_run"), steps.c.name == bindparam("b_name"))
    .values(status=bindparam("b_status"), tries=bindparam("b_tries"), ended_at=bindparam("b_ended"),
            output=bindparam("b_output"), error=bindparam("b_error"), stderr=bindparam("b_stderr"),
            inputs=bindparam("b_inputs"), started_at=bindparam("b_started")))


def _trigger(row: Row[Any]) -> TriggerData:
    return TriggerData(event=row.trigger_event, body=row.trigger_body, path=row.trigger_path,
                       headers=json.loads(row.trigger_headers or "{}"))


def _run_result(row: Row[Any], step_rows: Sequence[Row[Any]]) -> RunResult:
    trigger = _trigger(row)
    step_results = {
        s.name: StepResult(name=s.name, kind=s.kind, status=StepStatus(s.status),
                           inputs=json.loads(s.inputs) if s.inputs else {}, output=s.output,
                           error=s.error, tries=s.tries, stderr=s.stderr,
                           started_at=s.started_at, ended_at=s.ended_at)
        for s in step_rows}
    return RunResult(run_id=row.id, workflow=row.workflow, status=RunStatus(row.status),
                     error=row.error, trigger=trigger, created_at=row.created_at,
                     started_at=row.started_at, ended_at=row.ended_at,
                     previous_run_id=row.previous_run_id, steps=step_results)


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _sqlite_settings(engine: AsyncEngine, *, memory: bool) -> None:
    """WAL, synchronous=NORMAL (FULL with BRAIN_SQLITE_SYNCHRONOUS), a busy timeout."""
    from sqlalchemy import event

    sync_mode = os.environ.get("BRAIN_SQLITE_SYNCHRONOUS", "NORMAL").upper()
    if sync_mode not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise StoreError(f"BRAIN_SQLITE_SYNCHRONOUS must be NORMAL (the default) or FULL "
                         f"(also OFF or EXTRA), not {sync_mode!r}")

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        # The busy timeout first: switching a new file to WAL needs a lock another
        # process opening the same new file may hold for a moment.
        cur.execute("PRAGMA busy_timeout=10000")
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={sync_mode}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()
