"""``Store``: every read and write of runs and steps, for SQLite and PostgreSQL alike.

The runner, the CLI and (later) the server all go through these methods; no
other module writes SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Row, and_, bindparam, delete, exists, func, insert, or_, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from brain._errors import LeaseLost, RunNotFound, StoreError
from brain._secrets import remember, scrub
from brain.results import (
    FINISHED_RUN,
    RunResult,
    RunStatus,
    StepResult,
    StepStatus,
    TriggerData,
    clean_text,
)
from brain.store import schema
from brain.store.base import RunRecord, stored_trigger
from brain.store.queue import QueueMixin
from brain.store.tables import metadata, runs, steps

DEFAULT_URL = "sqlite+aiosqlite:///brain.db"
_FINISHED = [s.value for s in FINISHED_RUN]
#: How long a write keeps being retried while the database is busy or unreachable.
RETRY_SECONDS = 120.0
log = logging.getLogger("brain.store")


def default_url() -> str:
    """``BRAIN_DATABASE_URL``, read now, or the SQLite default ``brain.db``."""
    return os.environ.get("BRAIN_DATABASE_URL") or DEFAULT_URL


def utcnow() -> datetime:
    """The current time in UTC (timezone-aware)."""
    return datetime.now(UTC)


def lease_clock(dialect: str) -> Any:
    """"Now" for leases: the database server's clock on PostgreSQL, where executors on several
    machines compare leases (one whose clock runs ahead must not take live runs); this
    machine's clock on SQLite, which one machine uses."""
    return func.now() if dialect == "postgresql" else utcnow()


_PASSWORD_QUERY_KEYS = ("password", "passwd", "pwd", "pass", "sslpassword", "sslkey_password")


def redact_url(url: str) -> str:
    """``url`` with any password, in its user part or its query, shown as ``***``."""
    unescaped = _unescaped_at(url)
    if unescaped is not None:  # hide everything up to the last @; the query is not shown
        user, _, host = unescaped
        scheme, _, rest = url.partition("://")
        authority = rest.split("/", 1)[0].split("?", 1)[0]
        return f"{scheme}://{user}:***@{host}" + rest[len(authority):].split("?", 1)[0]
    try:
        parsed = make_url(url)
    except ArgumentError:
        return "<unparseable database URL>"
    hidden = {k: "***" for k in parsed.query if k.lower() in _PASSWORD_QUERY_KEYS}
    if hidden:
        parsed = parsed.update_query_dict(hidden)
    return parsed.render_as_string(hide_password=True).replace("%2A%2A%2A", "***")


def _unescaped_at(url: str) -> tuple[str, str, str] | None:
    """``(user, password, host)`` when the URL's password holds an unescaped ``@`` (which
    URL parsers split at the wrong ``@``), else ``None``."""
    authority = url.partition("://")[2].split("/", 1)[0].split("?", 1)[0]
    if authority.count("@") < 2:
        return None
    userinfo, host = authority.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    return user, password, host


def _url_passwords(url: str) -> list[str]:
    """Every password written in a database URL (user part and query)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return []
    found = [parsed.password] if parsed.password else []
    unescaped = _unescaped_at(url)
    if unescaped is not None and unescaped[1]:
        found.append(unescaped[1])
    for key, value in parsed.query.items():
        if key.lower() in _PASSWORD_QUERY_KEYS:
            found.extend([value] if isinstance(value, str) else list(value))
    return [str(v) for v in found]


class Store(QueueMixin):
    """Where runs are recorded. ``Store()`` uses ``BRAIN_DATABASE_URL``.

    >>> async with Store("sqlite+aiosqlite:///runs.db") as store:   # doctest: +SKIP
    ...     print(await store.list_runs(limit=5))
    """

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        for password in _url_passwords(self.url):
            remember(password)  # scrubbed from whatever runs store
        self._engine: AsyncEngine | None = None
        self._auto: AsyncEngine | None = None
        self._held: AsyncConnection | None = None
        self._lock = asyncio.Lock()
        self._batch: list[tuple[list[tuple[Any, Any]], asyncio.Future[None]]] = []
        self._flushing = False
        self._flusher: asyncio.Future[None] | None = None

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
            problem = None if memory else schema.sqlite_file_problem(url.database or "")
            if problem:
                raise StoreError(f"cannot open database {self.shown_url}: {problem}")
        threads_before = set(threading.enumerate())
        try:
            if memory:
                async with engine.begin() as conn:
                    await conn.run_sync(metadata.create_all)
            elif check_schema:
                await schema.ensure_current(engine, auto_upgrade=url.get_backend_name() == "sqlite",
                                            shown_url=self.shown_url)
        except (StoreError, SQLAlchemyError, OSError, TypeError, ValueError) as exc:
            # TypeError/ValueError: the driver refused a URL option (e.g. ?sslmode= for asyncpg).
            await engine.dispose()
            await auto.dispose()
            # A connection that failed to open stops its aiosqlite thread without waiting;
            # let that thread finish while the loop still runs (else, once the loop is
            # closed, it dies with a traceback on stderr).
            for thread in set(threading.enumerate()) - threads_before:
                if "_connection_worker_thread" in thread.name:
                    await asyncio.to_thread(thread.join, 1.0)
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

    async def _one(self, statement: Any, params: dict[str, Any] | None = None, *,
                   retry: bool = True) -> Any:
        """Run one statement atomically on its own: the cheap path.

        Shielded: a caller cancelled mid-statement must not leave the shared
        connection half-way through a round trip. A busy or briefly unreachable
        database is retried (unless ``retry=False``).
        """
        async def go() -> Any:
            async with self._connection() as conn:
                result = await conn.execute(statement, params)
                return result if not result.returns_rows else _Buffered(list(result.all()))
        return await _shielded(_retrying(go) if retry else go())

    async def _transaction(self, statements: list[tuple[Any, Any]]) -> None:
        """Run ``(statement, params)`` pairs atomically.

        On a SQLite file they go through the shared connection between an explicit
        ``BEGIN IMMEDIATE`` and ``COMMIT`` (no pool checkout: the cheap path that
        makes webhook ingest fast); elsewhere through a pooled transaction.
        """
        if self.engine.dialect.name != "sqlite" or self._auto is self._engine:
            async def go() -> None:
                async with self.engine.begin() as conn:
                    for statement, params in statements:
                        await conn.execute(statement, params)
            await _shielded(_retrying(go))
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
                    await _retrying(lambda b=batch: self._write_batch([st for st, _ in b]))
                    outcomes: list[BaseException | None] = [None] * len(batch)
                except Exception as exc:
                    if _transient(exc):  # still down after the retries: all fail alike
                        outcomes = [exc] * len(batch)
                    else:
                        # One of them broke a constraint (a repeated delivery, a claimed fire)
                        # or cannot be written: write each alone, so only that one fails.
                        outcomes = [await self._write_alone(stmts) for stmts, _ in batch]
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

    async def _write_alone(self, statements: list[tuple[Any, Any]]) -> BaseException | None:
        try:
            await _retrying(lambda: self._write_batch([statements]))
        except Exception as exc:
            return exc
        return None

    async def _write_batch(self, transactions: list[list[tuple[Any, Any]]]) -> None:
        async with self._connection() as conn:
            await conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                for statements in transactions:
                    for statement, params in statements:
                        await conn.execute(statement, params)
                await conn.exec_driver_sql("COMMIT")
            except BaseException:
                # Never leave the shared connection inside an open transaction (a COMMIT
                # that met a busy database included).
                with contextlib.suppress(Exception):
                    await conn.exec_driver_sql("ROLLBACK")
                raise

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
        trigger = stored_trigger(trigger)
        row: dict[str, Any] = dict(
            id=run_id, workflow=workflow, definition_hash=definition_hash,
            status=RunStatus.QUEUED.value, trigger_event=trigger.event,
            trigger_body=trigger.body, trigger_path=trigger.path,
            trigger_headers=json.dumps(trigger.headers),
            created_at=now, cancel_requested=False, previous_run_id=previous_run_id)
        statements: list[tuple[Any, Any]] = [(insert(runs), row)]
        if owner is not None:
            row.update(status=RunStatus.RUNNING.value, started_at=now, lease_owner=owner,
                       lease_expires_at=now + timedelta(seconds=lease_seconds))
            if self.engine.dialect.name == "postgresql":  # the lease by the server's clock
                statements.append((update(runs).where(runs.c.id == run_id).values(
                    lease_expires_at=func.now() + timedelta(seconds=lease_seconds)), None))
        step_values = [dict(run_id=run_id, name=name, position=i, kind=kind,
                            status=StepStatus.PENDING.value, tries=0)
                       for i, (name, kind) in enumerate(step_rows)]
        await self._transaction(statements
                                + ([(insert(steps), step_values)] if step_values else []))
        return now

    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        """Take a queued run, or a running one whose lease expired; ``True`` if taken."""
        now = lease_clock(self.engine.dialect.name)
        result = await self._one(
                update(runs)
                .where(runs.c.id == run_id)
                .where(or_(runs.c.status == RunStatus.QUEUED.value,
                           and_(runs.c.status == RunStatus.RUNNING.value,
                                or_(runs.c.lease_expires_at.is_(None),
                                    runs.c.lease_expires_at < now))))
                .values(status=RunStatus.RUNNING.value, lease_owner=owner,
                        lease_expires_at=now + timedelta(seconds=lease_seconds),
                        started_at=func.coalesce(runs.c.started_at, utcnow())))
        return bool(result.rowcount)

    async def set_previous_run(self, run_id: str, previous_run_id: str | None, *,
                               owner: str | None = None) -> None:
        """Record which run ``{previous.X}`` reads from (under ``owner``'s lease, when given)."""
        query = update(runs).where(runs.c.id == run_id)
        if owner is not None:
            query = query.where(runs.c.lease_owner == owner)
        _check_lease(await self._one(query.values(previous_run_id=previous_run_id)), owner)

    async def heartbeat(self, run_id: str, owner: str, lease_seconds: float | None) -> tuple[bool, bool]:
        """Renew the lease (when ``lease_seconds``); return (still ours, cancel requested)."""
        if lease_seconds is not None:
            await self._one(update(runs).where(runs.c.id == run_id, runs.c.lease_owner == owner)
                            .values(lease_expires_at=lease_clock(self.engine.dialect.name)
                                    + timedelta(seconds=lease_seconds)),
                            retry=False)
        row = (await self._one(select(runs.c.lease_owner, runs.c.cancel_requested)
                               .where(runs.c.id == run_id), retry=False)).first()
        if row is None:
            return False, True
        return row.lease_owner == owner, bool(row.cancel_requested)

    async def step_running(self, run_id: str, name: str, *, inputs: dict[str, Any],
                           tries: int, started_at: datetime, owner: str | None = None) -> None:
        """Mark a step ``running`` with its resolved (redacted) inputs.

        With ``owner``, only while that owner holds the run's lease (else
        :class:`LeaseLost`); the same holds for every runner write below.
        """
        params = dict(b_run=run_id, b_name=name, b_status=StepStatus.RUNNING.value,
                      b_inputs=json.dumps(inputs), b_tries=tries, b_started=started_at)
        if owner is None:
            await self._one(_STEP_RUNNING, params)
        else:
            _check_lease(await self._one(_STEP_RUNNING_LEASED, {**params, "b_owner": owner}), owner)

    async def step_finished(self, run_id: str, name: str, *, status: StepStatus, tries: int,
                            ended_at: datetime, output: str | None = None,
                            error: str | None = None, stderr: str | None = None,
                            inputs: dict[str, Any] | None = None,
                            started_at: datetime | None = None, owner: str | None = None) -> None:
        """Record a step's end; committed before this returns.

        ``inputs`` and ``started_at``, when given, are written too (a quick step
        is recorded once, finished, without a ``running`` write first). Text
        that cannot be stored as it is (lone surrogates) is stored with
        replacement characters.
        """
        output, error, stderr = clean_text(output), clean_text(error), clean_text(stderr)
        if inputs is not None and started_at is not None:
            params = dict(
                b_run=run_id, b_name=name, b_status=status.value, b_tries=tries, b_ended=ended_at,
                b_output=output, b_error=error, b_stderr=stderr, b_inputs=json.dumps(inputs),
                b_started=started_at)
            if owner is None:
                await self._one(_STEP_FINISHED, params)
            else:
                _check_lease(await self._one(_STEP_FINISHED_LEASED, {**params, "b_owner": owner}),
                             owner)
            return
        values: dict[str, Any] = dict(status=status.value, tries=tries, ended_at=ended_at,
                                      output=output, error=error, stderr=stderr)
        if inputs is not None:
            values["inputs"] = json.dumps(inputs)
        if started_at is not None:
            values["started_at"] = started_at
        query = update(steps).where(steps.c.run_id == run_id, steps.c.name == name)
        _check_lease(await self._one(_leased(query, run_id, owner).values(**values)), owner)

    async def steps_ended(self, run_id: str, names: Iterable[str], status: StepStatus,
                          error: str | None = None, *, owner: str | None = None) -> None:
        """Mark several steps ``skipped``, ``cancelled`` or ``failed`` at once."""
        names = list(names)
        if not names:
            return
        now = utcnow()
        query = update(steps).where(steps.c.run_id == run_id, steps.c.name.in_(names))
        _check_lease(await self._one(_leased(query, run_id, owner).values(
            status=status.value, ended_at=now, error=clean_text(error))), owner)

    async def reset_steps(self, run_id: str, names: Iterable[str], *,
                          owner: str | None = None) -> None:
        """Put unfinished steps back to ``pending`` before a resume."""
        names = list(names)
        if not names:
            return
        query = update(steps).where(steps.c.run_id == run_id, steps.c.name.in_(names))
        _check_lease(await self._one(_leased(query, run_id, owner).values(
            status=StepStatus.PENDING.value, ended_at=None, output=None, error=None)), owner)

    async def finish_run(self, run_id: str, status: RunStatus, error: str | None = None, *,
                         owner: str | None = None) -> datetime:
        """Record the run's end and release its lease (only ``owner``'s, when given)."""
        now = utcnow()
        query = update(runs).where(runs.c.id == run_id)
        if owner is not None:
            query = query.where(runs.c.lease_owner == owner)
        _check_lease(await self._one(query.values(
            status=status.value, error=clean_text(error), ended_at=now,
            lease_owner=None, lease_expires_at=None)), owner)
        return now

    async def request_cancel(self, run_id: str) -> tuple[RunResult, bool]:
        """Ask for a run to stop; return the run and whether it was still queued or running.

        A run nobody executes is cancelled at once: a queued one, and a running one
        whose executor is gone (its lease expired, or its owner is a process of this
        machine that has died): its unfinished steps become ``cancelled`` and its
        lease is released. A run with a live executor is only marked
        cancel-requested; that executor stops it within a second.
        """
        from brain._owners import local_owner_gone

        full = await self.resolve_id(run_id)
        row = await self.run_row(full)
        if row is None:
            raise RunNotFound(f"no run {run_id!r}")
        if row.status in _FINISHED:
            return await self.get_run(full, with_steps=False), False
        now = utcnow()
        owner_gone = local_owner_gone(row.lease_owner)
        cancelled = dict(status=RunStatus.CANCELLED.value, error="cancelled", ended_at=now,
                         lease_owner=None, lease_expires_at=None)
        statements: list[Any] = [
            update(runs).where(runs.c.id == full).values(cancel_requested=True),
            update(runs).where(runs.c.id == full, runs.c.status == RunStatus.QUEUED.value)
            .values(**cancelled)]
        if row.status == RunStatus.RUNNING.value:
            # Only if nothing changed since the read: the same owner, and (unless that
            # owner is known dead) a lease that has run out. A live executor renewing,
            # or another one that has just claimed the run, keeps it.
            same_owner = (runs.c.lease_owner.is_(None) if row.lease_owner is None
                          else runs.c.lease_owner == row.lease_owner)
            abandoned = update(runs).where(runs.c.id == full,
                                           runs.c.status == RunStatus.RUNNING.value, same_owner)
            if not owner_gone:
                abandoned = abandoned.where(or_(
                    runs.c.lease_expires_at.is_(None),
                    runs.c.lease_expires_at < lease_clock(self.engine.dialect.name)))
            statements.append(abandoned.values(**cancelled))
        statements.append(
            update(steps).where(steps.c.run_id == full,
                                steps.c.status.in_([StepStatus.PENDING.value,
                                                    StepStatus.RUNNING.value]),
                                select(runs.c.status).where(runs.c.id == full)
                                .scalar_subquery() == RunStatus.CANCELLED.value)
            .values(status=StepStatus.CANCELLED.value, ended_at=now, error="cancelled"))
        await self._transaction([(statement, None) for statement in statements])
        return await self.get_run(full, with_steps=False), True

    async def prune(self, finished_before: datetime) -> int:
        """Delete finished runs that ended before ``finished_before``, and schedule fire
        records claimed before it (each trigger's latest is kept: catch-up counts from
        it); return how many runs."""
        from brain.store.tables import fires

        async def go() -> int:
            async with self.engine.begin() as conn:
                ids = select(runs.c.id).where(runs.c.status.in_(_FINISHED),
                                              runs.c.ended_at < finished_before)
                await conn.execute(delete(steps).where(steps.c.run_id.in_(ids)))
                result = await conn.execute(delete(runs).where(runs.c.status.in_(_FINISHED),
                                                               runs.c.ended_at < finished_before))
                newer = fires.alias("newer")
                await conn.execute(delete(fires).where(
                    fires.c.fire_time < finished_before,
                    exists().where(newer.c.workflow == fires.c.workflow,
                                   newer.c.trigger_key == fires.c.trigger_key,
                                   newer.c.fire_time > fires.c.fire_time)))
            return int(result.rowcount or 0)

        return int(await _retrying(go))

    # --- reading ------------------------------------------------------------

    async def _rows(self, query: Any) -> list[Row[Any]]:
        rows: list[Row[Any]] = (await self._one(query)).all()
        return rows

    async def resolve_id(self, run_id: str) -> str:
        """The full id of the one run whose id is or starts with ``run_id``."""
        if not run_id or len(run_id) > 32 or not all(c in "0123456789abcdef" for c in run_id.lower()):
            raise RunNotFound(f"no run {run_id[:40]!r}: run ids are 32 hexadecimal digits "
                              f"(a unique prefix will do)")
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

    async def step_outputs(self, run_id: str) -> dict[str, str]:
        """``{step name: output}`` of a run's succeeded steps."""
        query = select(steps.c.name, steps.c.output).where(
            steps.c.run_id == run_id, steps.c.status == StepStatus.SUCCEEDED.value)
        return {r.name: r.output or "" for r in await self._rows(query)}

    async def step_states(self, run_id: str) -> dict[str, tuple[str, int]]:
        """``{step name: (status, tries)}`` for a run."""
        rows = await self._rows(select(steps.c.name, steps.c.status, steps.c.tries)
                                .where(steps.c.run_id == run_id))
        return {r.name: (r.status, r.tries) for r in rows}

    async def expired_runs(self) -> list[str]:
        """Ids of ``running`` runs whose lease has expired (their executor died)."""
        now = lease_clock(self.engine.dialect.name)
        rows = await self._rows(select(runs.c.id).where(runs.c.status == RunStatus.RUNNING.value,
                                                        runs.c.lease_expires_at < now))
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
# The same, only while the run's lease is held by ``b_owner``.
_HOLDS_LEASE = exists().where(runs.c.id == bindparam("b_run"),
                              runs.c.lease_owner == bindparam("b_owner"))
_STEP_RUNNING_LEASED = _STEP_RUNNING.where(_HOLDS_LEASE)
_STEP_FINISHED_LEASED = _STEP_FINISHED.where(_HOLDS_LEASE)


def _leased(query: Any, run_id: str, owner: str | None) -> Any:
    """``query`` (an update of steps) limited to while ``owner`` holds the run's lease."""
    if owner is None:
        return query
    return query.where(exists().where(runs.c.id == run_id, runs.c.lease_owner == owner))


def _check_lease(result: Any, owner: str | None) -> None:
    """A lease-conditional write that changed nothing means the lease is gone."""
    if owner is not None and not result.rowcount:
        raise LeaseLost("this executor no longer holds the run's lease")


def _transient(exc: BaseException) -> bool:
    """A busy or briefly unreachable database: worth trying the same write again."""
    if isinstance(exc, ConnectionError):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    text = str(exc.orig or exc).lower()
    if "database is locked" in text or "database table is locked" in text or "busy" in text:
        return True
    name = type(exc.orig).__name__
    return name in _TRANSIENT_DRIVER_ERRORS or isinstance(exc.orig, ConnectionError)


_TRANSIENT_DRIVER_ERRORS = frozenset({
    "ConnectionDoesNotExistError", "CannotConnectNowError", "ConnectionFailureError",
    "AdminShutdownError", "CrashShutdownError", "TooManyConnectionsError",
    "ConnectionRejectionError"})


async def _shielded(work: Any) -> Any:
    """Await ``work`` shielded from the caller's cancellation; if the caller goes away (a
    timed-out heartbeat), the work's eventual error is collected, not reported as
    "never retrieved"."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return await asyncio.shield(task)


async def _retrying(attempt: Any) -> Any:
    """Await ``attempt()`` until it succeeds, retrying busy/unreachable-database errors
    with backoff for up to :data:`RETRY_SECONDS`; other errors raise at once."""
    deadline = time.monotonic() + RETRY_SECONDS
    delay = 0.05
    warned = False
    while True:
        try:
            return await attempt()
        except (DBAPIError, ConnectionError) as exc:
            if not _transient(exc) or time.monotonic() + delay > deadline:
                raise
            if not warned:
                log.warning("database busy or unreachable (%s); retrying", _short(exc))
                warned = True
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


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


def database_problem(exc: BaseException) -> str:
    """One line saying what is wrong with the database (for an error that reached the CLI)."""
    text = _short(exc)
    if "async" in text.lower() and "driver" in text.lower():
        return ("BRAIN_DATABASE_URL needs an async driver: sqlite+aiosqlite:///FILE or "
                "postgresql+asyncpg://USER@HOST/DB")
    return f"the database cannot be used: {scrub(text)}"


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
