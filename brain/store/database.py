"""``Database``: a store's connections, and the three ways it talks to them.

On SQLite, reads and writes go to two threads of the store's own, each with a
plain ``sqlite3`` connection (:mod:`brain.store.sqlite_threads`): the writer
commits whatever is queued together, the reader runs queries beside it. No
async driver is imported for SQLite. On PostgreSQL they go through
SQLAlchemy's async engine (asyncpg): single statements on one autocommit
connection, transactions through the pool. A busy or briefly unreachable
database is retried, never reported as a lost write, for up to
:data:`~brain.store.errors.RETRY_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Self

from sqlalchemy import Engine, Row, func
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError

from brain._clock import utcnow
from brain._errors import StoreError
from brain._secrets import remember
from brain.store import schema
from brain.store.errors import RETRY_SECONDS, short, transient
from brain.store.sqlite_threads import SqliteThread
from brain.store.tables import metadata
from brain.store.urls import default_url, redact_url, url_passwords

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

log = logging.getLogger("brain.store")


def lease_clock(dialect: str) -> Any:
    """"Now" for leases: the database server's clock on PostgreSQL, where executors on several
    machines compare leases (one whose clock runs ahead must not take live runs); this
    machine's clock on SQLite, which one machine uses."""
    return func.now() if dialect == "postgresql" else utcnow()


class Written:
    """What a statement left behind, fetched before its connection moved on: its rows
    (a query's, or ``RETURNING``) and how many rows it changed."""

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
        self._open = False
        self._url: URL | None = None
        # SQLite: the writer and the reader (one thread for both in memory).
        self._writer: SqliteThread | None = None
        self._reader: SqliteThread | None = None
        # PostgreSQL (and, on request, SQLite for tools): SQLAlchemy's async engines.
        self._engine: AsyncEngine | None = None
        self._auto: AsyncEngine | None = None
        self._held: AsyncConnection | None = None
        self._lock = asyncio.Lock()
        self._opening = asyncio.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.shown_url!r})"

    @property
    def shown_url(self) -> str:
        """The URL with any password redacted: safe to print."""
        return redact_url(self.url)

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` has run (and :meth:`close` not yet)."""
        return self._open

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``; the store must be open."""
        if self._url is None:
            raise StoreError("the store is not open: use `async with store:` or `await store.open()`")
        return self._url.get_backend_name()

    @property
    def engine(self) -> AsyncEngine:
        """A SQLAlchemy async engine on this database, for tools and tests (the store's own
        SQLite traffic does not use it); the store must be open."""
        if not self._open or self._url is None:
            raise StoreError("the store is not open: use `async with store:` or `await store.open()`")
        if self._engine is None:
            from sqlalchemy.ext.asyncio import create_async_engine

            self._engine = create_async_engine(self._url)
            if self.dialect == "sqlite":
                _sqlite_settings(self._engine.sync_engine, memory=False)
        return self._engine

    async def open(self, *, check_schema: bool = True) -> Self:
        """Connect, apply SQLite settings, and make sure the schema is current (once: callers
        opening the store at the same time wait for the first)."""
        if self._open:
            return self
        async with self._opening:
            if self._open:
                return self
            return await self._open_now(check_schema)

    async def _open_now(self, check_schema: bool) -> Self:
        try:
            url = make_url(self.url)
        except ArgumentError:
            raise StoreError(f"BRAIN_DATABASE_URL is not a database URL: {self.shown_url}") from None
        if url.drivername == "postgresql":  # no driver named: asyncpg, the one The Brain uses
            url = url.set(drivername="postgresql+asyncpg")
        if url.get_backend_name() == "sqlite":  # any driver named: the store uses sqlite3 itself
            await self._open_sqlite(url, check_schema)
        elif url.drivername == "postgresql+asyncpg":
            await self._open_async(url, check_schema)
        else:
            raise StoreError(
                f"BRAIN_DATABASE_URL must be SQLite (sqlite+aiosqlite:///FILE) or PostgreSQL "
                f"through asyncpg (postgresql+asyncpg://USER@HOST/DB), not {self.shown_url}")
        self._url, self._open = url, True
        return self

    async def _open_sqlite(self, url: URL, check_schema: bool) -> None:
        memory = url.database in (None, "", ":memory:")
        if not memory:
            problem = schema.sqlite_file_problem(url.database or "")
            if problem:
                raise StoreError(f"cannot open database {self.shown_url}: {problem}")
        configure = partial(_sqlite_settings, memory=memory)
        try:
            writer = SqliteThread(url, configure, name="brain-sqlite-writer")
            reader = writer if memory else SqliteThread(url, configure, name="brain-sqlite-reader")
        except (ArgumentError, ImportError) as exc:
            raise StoreError(f"cannot use database {self.shown_url}: {exc}") from None
        try:
            if memory:
                await writer.run(metadata.create_all, write=True)
            elif check_schema:
                await schema.ensure_current(
                    partial(_sqlite_revision, reader), partial(_sqlite_upgrade, url),
                    auto_upgrade=True, shown_url=self.shown_url)
        except (StoreError, SQLAlchemyError, OSError) as exc:
            await writer.close()
            await reader.close()
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"cannot open database {self.shown_url}: {short(exc)}") from None
        self._writer, self._reader = writer, reader

    async def _open_async(self, url: URL, check_schema: bool) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        try:
            engine = create_async_engine(url)
            # Single statements go through an autocommit engine: one round trip to the
            # server instead of three (BEGIN/COMMIT/reset).
            auto = create_async_engine(url, isolation_level="AUTOCOMMIT",
                                       pool_reset_on_return=None)
        except (ArgumentError, ImportError) as exc:
            raise StoreError(f"cannot use database {self.shown_url}: {exc}") from None
        try:
            if check_schema:
                await schema.ensure_current(
                    partial(schema.current_revision, engine), partial(schema.upgrade_engine, engine),
                    auto_upgrade=False, shown_url=self.shown_url)
        except (StoreError, SQLAlchemyError, OSError, TypeError, ValueError) as exc:
            # TypeError/ValueError: the driver refused a URL option (e.g. ?sslmode= for asyncpg).
            await engine.dispose()
            await auto.dispose()
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"cannot open database {self.shown_url}: {short(exc)}") from None
        self._engine, self._auto = engine, auto

    async def upgrade_schema(self) -> tuple[str | None, str]:
        """Create or upgrade the schema (``brain db upgrade``); return (before, after) revisions."""
        await self.open(check_schema=False)
        assert self._url is not None
        try:
            if self._reader is not None:
                return await schema.upgrade(partial(_sqlite_revision, self._reader),
                                            partial(_sqlite_upgrade, self._url), self.shown_url)
            engine = self.engine
            return await schema.upgrade(partial(schema.current_revision, engine),
                                        partial(schema.upgrade_engine, engine), self.shown_url)
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(f"cannot upgrade database {self.shown_url}: {short(exc)}") from None

    async def close(self) -> None:
        """Release connections (after every write already queued)."""
        async with self._lock:
            self._open = False
            for thread in {self._writer, self._reader} - {None}:
                assert thread is not None
                await thread.close()
            self._writer = self._reader = None
            if self._held is not None:
                with contextlib.suppress(Exception):
                    await self._held.close()
                self._held = None
            for engine in (self._engine, self._auto):
                if engine is not None:
                    await engine.dispose()
            self._engine = self._auto = None

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConnection]:
        """PostgreSQL: the connection single statements share (autocommit), one user at a time."""
        if self._auto is None:
            raise StoreError("the store is not open: use `async with store:` or `await store.open()`")
        async with self._lock:
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

        On SQLite a write goes to the writer thread, a query to the reader. On
        PostgreSQL it is shielded: a caller cancelled mid-statement must not
        leave the shared connection half-way through a round trip. A busy or
        briefly unreachable database is retried (unless ``retry=False``, on
        PostgreSQL).
        """
        if self._writer is not None and self._reader is not None:
            write = bool(getattr(statement, "is_dml", False))
            thread = self._writer if write else self._reader
            written: Written = await thread.run(partial(_execute, statement, params), write=write)
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
            counts: list[int] = await self._writer.run(partial(_counts, statements), write=True)
            return counts
        if self._engine is None:
            raise StoreError("the store is not open: use `async with store:` or `await store.open()`")
        engine = self._engine

        async def go() -> list[int]:
            async with engine.begin() as conn:
                return [(await conn.execute(st, params)).rowcount for st, params in statements]
        return await _shielded(_retrying(go))  # type: ignore[no-any-return]

    async def _hot(self, statement: Any, params: dict[str, Any]) -> Written:
        """A write every step makes: as :meth:`_one`, but on SQLite compiled once and run
        on the writer's ``sqlite3`` connection itself, without SQLAlchemy's per-statement
        work (which would hold the GIL while the step's own work waits for it)."""
        if self._writer is None:
            return await self._one(statement, params)
        written: Written = await self._writer.run(partial(_raw_sqlite, statement, params),
                                                  write=True)
        return written

    async def _atomically(self, job: Callable[[Connection], Any]) -> Any:
        """Run ``job(connection)`` (synchronous SQLAlchemy) in one transaction on either
        database: the SQLite writer's, or a pooled PostgreSQL connection's. What it raises
        rolls everything back."""
        if self._writer is not None:
            return await self._writer.run(job, write=True)
        if self._engine is None:
            raise StoreError("the store is not open: use `async with store:` or `await store.open()`")
        engine = self._engine

        async def go() -> Any:
            async with engine.begin() as conn:
                return await conn.run_sync(job)
        return await _shielded(_retrying(go))

    async def _write(self, job: Callable[[Connection], Any]) -> Any:
        """Run ``job(connection)`` in the SQLite writer's next transaction (SQLite only)."""
        if self._writer is None:
            raise StoreError("only a store on SQLite has a writer thread")
        return await self._writer.run(job, write=True)


_compiled: dict[int, tuple[Any, str, dict[str, Any]]] = {}


def _raw_sqlite(statement: Any, params: dict[str, Any], conn: Connection) -> Written:
    """Run ``statement`` with ``params`` on the plain sqlite3 connection under ``conn``;
    timestamps are written in the form SQLAlchemy's SQLite dialect writes and reads."""
    found = _compiled.get(id(statement))
    if found is None or found[0] is not statement:
        from sqlalchemy.dialects import sqlite

        compiled = statement.compile(dialect=sqlite.dialect(paramstyle="named"))
        found = (statement, str(compiled), dict(compiled.params))
        _compiled[id(statement)] = found
    _, sql, defaults = found
    values = {**defaults, **{k: _sqlite_time(v) if isinstance(v, datetime) else v
                             for k, v in params.items()}}
    cursor = conn.connection.driver_connection.execute(sql, values)  # type: ignore[union-attr]
    return Written([], cursor.rowcount)


def _sqlite_time(value: datetime) -> str:
    """A timestamp as the store keeps it on SQLite: UTC, no offset, microseconds."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


def _counts(statements: list[tuple[Any, Any]], conn: Connection) -> list[int]:
    return [conn.execute(statement, params).rowcount for statement, params in statements]


async def _sqlite_revision(reader: SqliteThread) -> str | None:
    revision: str | None = await reader.run(schema.revision_of, write=False)
    return revision


async def _sqlite_upgrade(url: URL) -> None:
    """Run the migrations on their own connection, in a thread (Alembic is synchronous)."""
    def go() -> None:
        from sqlalchemy import create_engine

        engine = create_engine(url.set(drivername="sqlite"))
        _sqlite_settings(engine, memory=False)
        try:
            with engine.begin() as conn:
                schema.apply_migrations(conn)
        finally:
            engine.dispose()

    await asyncio.to_thread(go)


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
