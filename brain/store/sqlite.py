"""The SQLite backend: ``sqlite3`` in two threads of the store's own (a file), no SQLAlchemy.

Writes go to the writer thread (:mod:`brain.store.sqlite_threads`), which
commits whatever is queued together; queries go to the reader beside it (WAL
lets them run while the writer writes). Timestamps are stored as SQLAlchemy's
SQLite dialect has always stored them (``2026-01-02 03:04:05.000123``, UTC,
no offset), so files written before read back the same. Creating or upgrading
the schema (a new file, an old one) runs Alembic, which imports SQLAlchemy;
opening a current file does not.

An in-memory database (``sqlite:///:memory:``) has no threads: it starts as a copy of
the schema image (:mod:`brain.store.schema_image`, built once per process) and runs
its statements in the caller's thread (:class:`~brain.store.sqlite_threads.SqliteInline`).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from brain._errors import StoreError
from brain.store import schema
from brain.store.backend import SQLITE, TIME_COLUMNS, Dialect, Params, Row, Statement, Written
from brain.store.errors import DatabaseError, database_error, short
from brain.store.schema_image import new_memory_database
from brain.store.sqlite_threads import SqliteInline, SqliteThread
from brain.store.urls import SqliteFile

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine

T = TypeVar("T")
_SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def synchronous_mode() -> str:
    """``BRAIN_SQLITE_SYNCHRONOUS`` (``NORMAL`` unless set), checked."""
    mode = os.environ.get("BRAIN_SQLITE_SYNCHRONOUS", "NORMAL").upper()
    if mode not in _SYNC_MODES:
        raise StoreError(f"BRAIN_SQLITE_SYNCHRONOUS must be NORMAL (the default) or FULL "
                         f"(also OFF or EXTRA), not {mode!r}")
    return mode


def configure(conn: Any, *, memory: bool, sync_mode: str) -> None:
    """WAL, ``synchronous`` as asked, a busy timeout, foreign keys: on a ``sqlite3``
    connection, or a DB-API one SQLAlchemy opened."""
    cur = conn.cursor()
    # The busy timeout first: switching a new file to WAL needs a lock another
    # process opening the same new file may hold for a moment.
    cur.execute("PRAGMA busy_timeout=10000")
    if not memory:
        cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA synchronous={sync_mode}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _connect(target: SqliteFile, sync_mode: str) -> sqlite3.Connection:
    if target.memory:
        # A copy of the schema image: tables ready, no DDL run. Nothing to wait for and
        # nothing to sync: of the settings, only foreign keys matter.
        conn = new_memory_database()
        conn.execute("PRAGMA foreign_keys=ON")
        return conn
    conn = sqlite3.connect(target.filename, uri=target.uri, isolation_level=None,
                           check_same_thread=False, cached_statements=512)
    try:
        configure(conn, memory=target.memory, sync_mode=sync_mode)
    except BaseException:
        conn.close()
        raise
    return conn


def stored_time(value: datetime) -> str:
    """A timestamp as the store keeps it on SQLite: UTC, no offset, microseconds."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(sep=" ", timespec="microseconds")


def _bound(params: Params | None) -> Params:
    if not params:
        return {}
    return {k: stored_time(v) if isinstance(v, datetime) else v for k, v in params.items()}


def _rows(cursor: sqlite3.Cursor) -> list[Row]:
    if cursor.description is None:
        return []
    names = [d[0] for d in cursor.description]
    times = [i for i, name in enumerate(names) if name in TIME_COLUMNS]
    rows = [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
    if times:
        for row in rows:
            for i in times:
                value = row[names[i]]
                if isinstance(value, str):
                    parsed = datetime.fromisoformat(value)
                    row[names[i]] = (parsed.replace(tzinfo=UTC) if parsed.tzinfo is None
                                     else parsed.astimezone(UTC))
    return rows


class SqliteConnection:
    """A ``sqlite3`` connection inside the writer's transaction, for
    :meth:`SqliteBackend.atomically` jobs (see :class:`brain.store.backend.Connection`)."""

    def __init__(self, conn: sqlite3.Connection, dialect: Dialect) -> None:
        self.conn = conn
        self._dialect = dialect

    def read(self, sql: str, params: Params | None = None) -> list[Row]:
        """The rows a query returns."""
        return _rows(self.conn.execute(self._dialect.render(sql), _bound(params)))

    def write(self, sql: str, params: Params | Sequence[Params] | None = None) -> int:
        """Run a statement (once per parameter set); how many rows it changed."""
        sql = self._dialect.render(sql)
        if params is None or isinstance(params, Mapping):
            return self.conn.execute(sql, _bound(params)).rowcount
        return self.conn.executemany(sql, [_bound(p) for p in params]).rowcount


def _write(sql: str, params: Params, conn: sqlite3.Connection) -> Written:
    cursor = conn.execute(sql, params)
    return Written(_rows(cursor), cursor.rowcount)


def _read(sql: str, params: Params, conn: sqlite3.Connection) -> list[Row]:
    return _rows(conn.execute(sql, params))


def _statements(statements: Sequence[Statement], conn: sqlite3.Connection) -> list[int]:
    tx = SqliteConnection(conn, SQLITE)
    return [tx.write(sql, params) for sql, params in statements]


def _job(job: Callable[[SqliteConnection], T], conn: sqlite3.Connection) -> T:
    return job(SqliteConnection(conn, SQLITE))


def _translated(exc: sqlite3.Error) -> DatabaseError:
    return database_error(exc, integrity=isinstance(exc, sqlite3.IntegrityError))


class SqliteBackend:
    """A SQLite file behind a writer and a reader thread, or an in-memory database run in
    the caller's thread (:class:`~brain.store.sqlite_threads.SqliteInline`)."""

    def __init__(self, target: SqliteFile, url: str, shown_url: str) -> None:
        self._target = target
        self._url = url
        self._shown_url = shown_url
        sync_mode = synchronous_mode()
        connect = partial(_connect, target, sync_mode)
        self._writer: SqliteThread | SqliteInline
        self._reader: SqliteThread | SqliteInline
        if target.memory:  # one connection, nothing to wait for: no thread
            self._writer = self._reader = SqliteInline(connect)
        else:
            self._writer = SqliteThread(connect, name="brain-sqlite-writer")
            self._reader = SqliteThread(connect, name="brain-sqlite-reader")
        self._engine: AsyncEngine | None = None

    @property
    def dialect(self) -> Dialect:
        """SQLite's pieces of SQL: lease times are parameters (this machine's clock)."""
        return SQLITE

    @classmethod
    async def open(cls, target: SqliteFile, url: str, shown_url: str, *,
                   check_schema: bool) -> SqliteBackend:
        """Open the database: check the file, start the threads, make sure the schema is
        current (created or upgraded when it is not)."""
        if not target.memory:
            problem = schema.sqlite_file_problem(target.database)
            if problem:
                raise StoreError(f"cannot open database {shown_url}: {problem}")
        backend = cls(target, url, shown_url)
        try:
            if not target.memory and check_schema:  # in memory: a copy of the schema image
                await schema.ensure_current(backend._revision, backend._migrate,
                                            auto_upgrade=True, shown_url=shown_url)
        except BaseException as exc:
            await backend.close()
            if isinstance(exc, StoreError) or not isinstance(exc, Exception):
                raise
            raise StoreError(f"cannot open database {shown_url}: {short(exc)}") from None
        return backend

    async def read(self, sql: str, params: Params | None = None, *,
                   retry: bool = True) -> list[Row]:
        """Run a query on the reader thread; its rows."""
        try:
            rows: list[Row] = await self._reader.run(
                partial(_read, SQLITE.render(sql), _bound(params)), write=False)
        except sqlite3.Error as exc:
            raise _translated(exc) from exc
        return rows

    async def write(self, sql: str, params: Params | None = None, *,
                    retry: bool = True) -> Written:
        """Run one statement in the writer's next commit (shared with whatever else is
        queued by then)."""
        try:
            written: Written = await self._writer.run(
                partial(_write, SQLITE.render(sql), _bound(params)), write=True)
        except sqlite3.Error as exc:
            raise _translated(exc) from exc
        return written

    async def transaction(self, statements: Sequence[Statement]) -> list[int]:
        """Run ``statements`` together in the writer's next commit."""
        try:
            counts: list[int] = await self._writer.run(partial(_statements, statements),
                                                       write=True)
        except sqlite3.Error as exc:
            raise _translated(exc) from exc
        return counts

    async def atomically(self, job: Callable[[SqliteConnection], T]) -> T:
        """Run ``job(connection)`` in the writer's next commit; what it raises rolls its
        writes back (and only its own)."""
        try:
            result: T = await self._writer.run(partial(_job, job), write=True)
        except sqlite3.Error as exc:
            raise _translated(exc) from exc
        return result

    @property
    def engine(self) -> AsyncEngine:
        """A SQLAlchemy async engine on the same file (with the same pragmas), for tools
        and tests."""
        if self._engine is None:
            from sqlalchemy import event
            from sqlalchemy.engine import make_url
            from sqlalchemy.ext.asyncio import create_async_engine

            url = make_url(self._url)
            if url.drivername in ("sqlite", "sqlite+pysqlite"):
                url = url.set(drivername="sqlite+aiosqlite")
            self._engine = create_async_engine(url)
            event.listen(self._engine.sync_engine, "connect", _pragmas(self._target.memory))
        return self._engine

    async def upgrade_schema(self) -> tuple[str | None, str]:
        """Create or upgrade the schema (``brain db upgrade``)."""
        return await schema.upgrade(self._revision, self._migrate, self._shown_url)

    async def close(self) -> None:
        """Finish every queued write, then stop the threads."""
        # Both threads stop together (the reader runs no write the writer must finish).
        await asyncio.gather(self._writer.close(), self._reader.close())
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def _revision(self) -> str | None:
        revision: str | None = await self._reader.run(_revision_of, write=False)
        return revision

    async def _migrate(self) -> None:
        """Run the migrations on their own connection, in a thread (Alembic is
        synchronous and works through SQLAlchemy)."""
        await asyncio.to_thread(_migrate, self._url, self._target.memory)


def _pragmas(memory: bool) -> Callable[[Any, Any], None]:
    sync_mode = synchronous_mode()

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        configure(dbapi_conn, memory=memory, sync_mode=sync_mode)

    return on_connect


def _revision_of(conn: sqlite3.Connection) -> str | None:
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None  # a new database
        raise
    return None if row is None or row[0] is None else str(row[0])


def _migrate(url: str, memory: bool) -> None:
    from sqlalchemy import create_engine, event
    from sqlalchemy.engine import make_url

    engine: Engine = create_engine(make_url(url).set(drivername="sqlite"))
    event.listen(engine, "connect", _pragmas(memory))
    try:
        with engine.begin() as conn:
            schema.apply_migrations(conn)
    finally:
        engine.dispose()

