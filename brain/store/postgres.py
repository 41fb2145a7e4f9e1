"""The PostgreSQL backend: SQLAlchemy's async engine on asyncpg.

Single statements go through a pool of autocommit connections (one round trip
to the server instead of three: BEGIN/COMMIT/reset; as many at once as the pool
holds), transactions through a pool of their own. Every call is shielded from its caller's
cancellation (a caller cancelled mid-statement must not leave a connection
half-way through a round trip) and retried while the server is busy or
briefly unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import text
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine

from brain._errors import StoreError
from brain.store import schema
from brain.store.backend import POSTGRESQL, TIME_COLUMNS, Dialect, Params, Row, Statement, Written
from brain.store.errors import RETRY_SECONDS, database_error, short, transient

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, Connection, CursorResult
    from sqlalchemy.ext.asyncio import AsyncEngine
    from sqlalchemy.sql.elements import TextClause

log = logging.getLogger("brain.store")
T = TypeVar("T")
_texts: dict[str, TextClause] = {}


def _text(sql: str | Any) -> Any:
    """The SQLAlchemy statement for SQL text (rendered for PostgreSQL), built once; a
    statement that is not text passes as it is."""
    if not isinstance(sql, str):
        return sql
    found = _texts.get(sql)
    if found is None:
        if len(_texts) > 2000:  # statements with long IN lists come and go
            _texts.clear()
        found = _texts[sql] = text(POSTGRESQL.render(sql))
    return found


def _value(value: Any) -> Any:
    if isinstance(value, str):
        # PostgreSQL refuses the NUL character in text: stored as U+FFFD.
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    if isinstance(value, list):  # an array parameter (a new run's step names)
        return [_value(v) for v in value]
    return value


def _bound(params: Params | Sequence[Params] | None) -> Any:
    if params is None:
        return None
    if isinstance(params, Mapping):
        return {k: _value(v) for k, v in params.items()}
    return [{k: _value(v) for k, v in p.items()} for p in params]


def _rows(result: CursorResult[Any]) -> list[Row]:
    if not result.returns_rows:
        return []
    rows = [dict(r._mapping) for r in result]
    for row in rows:
        for name in TIME_COLUMNS.intersection(row):
            value = row[name]
            if isinstance(value, datetime):
                row[name] = value.replace(tzinfo=UTC) if value.tzinfo is None else \
                    value.astimezone(UTC)
    return rows


class PostgresConnection:
    """A connection inside one transaction, for :meth:`PostgresBackend.atomically` jobs
    (see :class:`brain.store.backend.Connection`)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def read(self, sql: str, params: Params | None = None) -> list[Row]:
        """The rows a query returns."""
        return _rows(self.conn.execute(_text(sql), _bound(params)))

    def write(self, sql: str, params: Params | Sequence[Params] | None = None) -> int:
        """Run a statement (once per parameter set); how many rows it changed."""
        return self.conn.execute(_text(sql), _bound(params)).rowcount


#: How often a listening connection is checked (a connection that went silent is lost).
LISTEN_CHECK_SECONDS = 5.0
#: The ``application_name`` of a listening connection.
LISTENER_NAME = "brain-listen"


class PostgresBackend:
    """A PostgreSQL database through SQLAlchemy's async engine (asyncpg)."""

    def __init__(self, engine: AsyncEngine, auto: AsyncEngine, shown_url: str) -> None:
        self._engine = engine
        self._auto = auto
        self._shown_url = shown_url

    @property
    def dialect(self) -> Dialect:
        """PostgreSQL's pieces of SQL: leases by the server's clock, ``SKIP LOCKED``."""
        return POSTGRESQL

    @property
    def engine(self) -> AsyncEngine:
        """The pooled engine the store's transactions use."""
        return self._engine

    @classmethod
    async def open(cls, url: URL, shown_url: str, *, check_schema: bool) -> PostgresBackend:
        """Create the engines and, with ``check_schema``, refuse a schema that is not
        current (``brain db upgrade`` upgrades it)."""
        try:
            engine = create_async_engine(url)
            auto = create_async_engine(url, isolation_level="AUTOCOMMIT",
                                       pool_reset_on_return=None)
        except (ArgumentError, ImportError) as exc:
            raise StoreError(f"cannot use database {shown_url}: {exc}") from None
        backend = cls(engine, auto, shown_url)
        try:
            if check_schema:
                await schema.ensure_current(
                    partial(schema.current_revision, engine), partial(schema.upgrade_engine, engine),
                    auto_upgrade=False, shown_url=shown_url)
        except (StoreError, SQLAlchemyError, OSError, TypeError, ValueError) as exc:
            # TypeError/ValueError: the driver refused a URL option (e.g. ?sslmode= for asyncpg).
            await backend.close()
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"cannot open database {shown_url}: {short(exc)}") from None
        return backend

    async def read(self, sql: str, params: Params | None = None, *,
                   retry: bool = True) -> list[Row]:
        """Run a query on a pooled autocommit connection; its rows."""
        return (await self.write(sql, params, retry=retry)).rows

    async def write(self, sql: str, params: Params | None = None, *,
                    retry: bool = True) -> Written:
        """Run one statement on a pooled autocommit connection (retried while the server
        is busy or unreachable, unless ``retry=False``)."""
        async def go() -> Written:
            async with self._auto.connect() as conn:
                result = await conn.execute(_text(sql), _bound(params))
                return Written(_rows(result), result.rowcount)
        return await _guarded(partial(_retrying, go) if retry else go)

    async def transaction(self, statements: Sequence[Statement]) -> list[int]:
        """Run ``statements`` in one transaction on a pooled connection."""
        async def go() -> list[int]:
            async with self._engine.begin() as conn:
                return [(await conn.execute(_text(sql), _bound(params))).rowcount
                        for sql, params in statements]
        return await _guarded(partial(_retrying, go))

    async def atomically(self, job: Callable[[PostgresConnection], T]) -> T:
        """Run ``job(connection)`` (synchronous) in one transaction on a pooled
        connection."""
        async def go() -> T:
            async with self._engine.begin() as conn:
                return await conn.run_sync(lambda sync: job(PostgresConnection(sync)))
        return await _guarded(partial(_retrying, go))

    async def listen(self, channel: str, on_notify: Callable[[], None]) -> None:
        """Call ``on_notify`` at once and then on every ``NOTIFY`` on ``channel``, on a
        connection of its own, until the connection is lost (then return: the caller
        listens again) or the task is cancelled. A lost connection is noticed within
        :data:`LISTEN_CHECK_SECONDS`, even one that went silent."""
        conn = await self._auto.connect()
        try:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            lost = asyncio.Event()
            # Named, so an operator can see it in pg_stat_activity.
            await driver.execute(f"SET application_name = '{LISTENER_NAME}'")
            await driver.add_listener(channel, lambda *_: on_notify())
            driver.add_termination_listener(lambda *_: lost.set())
            on_notify()  # what was queued while nobody listened
            while not lost.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), LISTEN_CHECK_SECONDS)
                if not lost.is_set():
                    await asyncio.wait_for(driver.execute("SELECT 1"), LISTEN_CHECK_SECONDS)
        finally:
            # Never back to the pool: the listener would stay on the connection.
            with contextlib.suppress(Exception):
                await asyncio.shield(conn.invalidate())

    async def upgrade_schema(self) -> tuple[str | None, str]:
        """Create or upgrade the schema (``brain db upgrade``)."""
        return await schema.upgrade(partial(schema.current_revision, self._engine),
                                    partial(schema.upgrade_engine, self._engine),
                                    self._shown_url)

    async def close(self) -> None:
        """Dispose of both engines' pools."""
        await self._engine.dispose()
        await self._auto.dispose()


async def _guarded(attempt: Callable[[], Awaitable[T]]) -> T:
    """Await ``attempt()`` shielded from the caller's cancellation, its database errors
    turned into :class:`~brain.store.errors.DatabaseError`. If the caller goes away (a
    timed-out heartbeat), the work's eventual error is collected, not reported as "never
    retrieved"."""
    async def translated() -> T:
        try:
            return await attempt()
        except DBAPIError as exc:
            raise database_error(exc, integrity=isinstance(exc, IntegrityError)) from exc

    task = asyncio.ensure_future(translated())
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return await asyncio.shield(task)


async def _retrying(attempt: Callable[[], Awaitable[T]]) -> T:
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
