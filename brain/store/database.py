"""``Database``: a store's connections, and the three ways it talks to them.

Reads (:meth:`Database._rows`) go through SQLAlchemy's async engine. Writes
(:meth:`Database._one` with an ``INSERT``/``UPDATE``/``DELETE``, and
:meth:`Database._transaction`) go, on a SQLite file, to the database's single
writer thread (:mod:`brain.store.writer`), which commits whatever is queued
together; on PostgreSQL (and an in-memory SQLite) through the engine's pool.
A busy or briefly unreachable database is retried, never reported as a lost
write, for up to :data:`~brain.store.errors.RETRY_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Self

from sqlalchemy import Engine, Row, func
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from brain._clock import utcnow
from brain._errors import StoreError
from brain._secrets import remember
from brain.store import schema
from brain.store.errors import RETRY_SECONDS, short, transient
from brain.store.tables import metadata
from brain.store.urls import default_url, redact_url, url_passwords
from brain.store.writer import SqliteWriter

log = logging.getLogger("brain.store")


def lease_clock(dialect: str) -> Any:
    """"Now" for leases: the database server's clock on PostgreSQL, where executors on several
    machines compare leases (one whose clock runs ahead must not take live runs); this
    machine's clock on SQLite, which one machine uses."""
    return func.now() if dialect == "postgresql" else utcnow()


class Written:
    """What a statement left behind, fetched before its connection moved on: its rows
    (``RETURNING`` or a query) and how many rows it changed."""

    def __init__(self, rows: list[Row[Any]], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    def all(self) -> list[Row[Any]]:
        """Every row."""
        return self.rows

    def first(self) -> Row[Any] | None:
        """The first row, or ``None``."""
        return self.rows[0] if self.rows else None


def _execute(statement: Any, params: Any, conn: Connection) -> Written:
    result = conn.execute(statement, params)
    return Written(list(result.all()) if result.returns_rows else [], result.rowcount)


class Database:
    """A database URL and its connections; :class:`brain.store.Store` builds on it."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        for password in url_passwords(self.url):
            remember(password)  # scrubbed from whatever runs store
        self._engine: AsyncEngine | None = None
        self._auto: AsyncEngine | None = None
        self._held: AsyncConnection | None = None
        self._writer: SqliteWriter | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.shown_url!r})"

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

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``; the store must be open."""
        return self.engine.dialect.name

    async def open(self, *, check_schema: bool = True) -> Self:
        """Connect, apply SQLite settings, and make sure the schema is current."""
        if self._engine is not None:
            return self
        try:
            url = make_url(self.url)
        except ArgumentError:
            raise StoreError(f"BRAIN_DATABASE_URL is not a database URL: {self.shown_url}") from None
        kwargs: dict[str, Any] = {}
        sqlite = url.get_backend_name() == "sqlite"
        memory = sqlite and url.database in (None, "", ":memory:")
        if memory:
            from sqlalchemy.pool import StaticPool

            kwargs = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        try:
            engine = create_async_engine(url, **kwargs)
            # Single statements go through an autocommit engine: one round trip to the
            # driver instead of three (BEGIN/COMMIT/reset).
            auto = engine if memory else create_async_engine(
                url, isolation_level="AUTOCOMMIT", pool_reset_on_return=None, **kwargs)
        except (ArgumentError, ImportError) as exc:
            raise StoreError(f"cannot use database {self.shown_url}: {exc}") from None
        writer = None
        if sqlite:
            for each in {engine, auto}:
                _sqlite_settings(each.sync_engine, memory=memory)
            problem = None if memory else schema.sqlite_file_problem(url.database or "")
            if problem:
                raise StoreError(f"cannot open database {self.shown_url}: {problem}")
            if not memory:
                writer = SqliteWriter(url, lambda e: _sqlite_settings(e, memory=False))
        threads_before = set(threading.enumerate())
        try:
            if memory:
                async with engine.begin() as conn:
                    await conn.run_sync(metadata.create_all)
            elif check_schema:
                await schema.ensure_current(engine, auto_upgrade=sqlite, shown_url=self.shown_url)
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
            raise StoreError(f"cannot open database {self.shown_url}: {short(exc)}") from None
        if writer is not None:
            writer.start()
        self._engine, self._auto, self._writer = engine, auto, writer
        return self

    async def upgrade_schema(self) -> tuple[str | None, str]:
        """Create or upgrade the schema (``brain db upgrade``); return (before, after) revisions."""
        await self.open(check_schema=False)
        try:
            return await schema.upgrade(self.engine)
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(f"cannot upgrade database {self.shown_url}: {short(exc)}") from None

    async def close(self) -> None:
        """Release connections (after every write already queued)."""
        async with self._lock:
            if self._writer is not None:
                await self._writer.close()
                self._writer = None
            if self._held is not None:
                with contextlib.suppress(Exception):
                    await self._held.close()
                self._held = None
            if self._engine is not None:
                await self._engine.dispose()
                if self._auto is not None and self._auto is not self._engine:
                    await self._auto.dispose()
                self._engine = self._auto = None

    async def __aenter__(self) -> Self:
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
                   retry: bool = True) -> Written:
        """Run one statement atomically on its own: the cheap path.

        A write to a SQLite file goes to the writer thread. Anything else is
        shielded: a caller cancelled mid-statement must not leave the shared
        connection half-way through a round trip. A busy or briefly
        unreachable database is retried (unless ``retry=False``).
        """
        if self._writer is not None and getattr(statement, "is_dml", False):
            written: Written = await self._writer.run(lambda conn: _execute(statement, params, conn))
            return written

        async def go() -> Written:
            async with self._connection() as conn:
                result = await conn.execute(statement, params)
                return Written(list(result.all()) if result.returns_rows else [], result.rowcount)
        return await _shielded(_retrying(go) if retry else go())  # type: ignore[no-any-return]

    async def _rows(self, query: Any) -> list[Row[Any]]:
        """The rows a query returns."""
        return (await self._one(query)).all()

    async def _transaction(self, statements: list[tuple[Any, Any]]) -> list[int]:
        """Run ``(statement, params)`` pairs atomically; how many rows each changed."""
        if self._writer is not None:
            counts: list[int] = await self._writer.run(
                lambda conn: [conn.execute(st, params).rowcount for st, params in statements])
            return counts

        async def go() -> list[int]:
            async with self.engine.begin() as conn:
                return [(await conn.execute(st, params)).rowcount for st, params in statements]
        return await _shielded(_retrying(go))  # type: ignore[no-any-return]

    async def _write(self, job: Callable[[Connection], Any]) -> Any:
        """Run ``job(connection)`` in the SQLite writer's next transaction (SQLite files only)."""
        if self._writer is None:
            raise StoreError("only a store on a SQLite file has a writer thread")
        return await self._writer.run(job)


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
            if not transient(exc) or time.monotonic() + delay > deadline:
                raise
            if not warned:
                log.warning("database busy or unreachable (%s); retrying", short(exc))
                warned = True
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


def _sqlite_settings(engine: Engine, *, memory: bool) -> None:
    """WAL, synchronous=NORMAL (FULL with BRAIN_SQLITE_SYNCHRONOUS), a busy timeout."""
    from sqlalchemy import event

    sync_mode = os.environ.get("BRAIN_SQLITE_SYNCHRONOUS", "NORMAL").upper()
    if sync_mode not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise StoreError(f"BRAIN_SQLITE_SYNCHRONOUS must be NORMAL (the default) or FULL "
                         f"(also OFF or EXTRA), not {sync_mode!r}")

    @event.listens_for(engine, "connect")
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
