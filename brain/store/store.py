"""``Store``: every read and write of runs and steps, for SQLite and PostgreSQL alike.

The runner, the CLI, the service and the server all go through its methods;
no other module writes SQL. ``Store`` is assembled from one part per concern
(each owns its methods, none extends another):

- :mod:`brain.store.runs` — a run's life: created, claimed, renewed, ended, cancelled, retried;
- :mod:`brain.store.steps` — a run's steps as the runner records them;
- :mod:`brain.store.logs` — steps' logs;
- :mod:`brain.store.waits` — waiting steps, their timers, decisions and signals;
- :mod:`brain.store.reading` — reading runs back;
- :mod:`brain.store.queue` — the queue and schedule-fire claims;
- :mod:`brain.store.housekeeping` — worker rows and pruning;
- :mod:`brain.store.children` — child runs: queued by a step, ending its wait;
- :mod:`brain.store.cache` — cached steps' outputs (SPEC §26);
- :mod:`brain.store.limits` — named rate limits' windows (SPEC §26).

Each part runs the SQL of :mod:`brain.store.queries` on the store's backend
(:mod:`brain.store.backend`), chosen by the URL when the store opens:
:mod:`brain.store.sqlite` (a file, or ``sqlite:///:memory:``) or
:mod:`brain.store.postgres`. Its consumers type it with the narrow interfaces of
:mod:`brain.store.interfaces`, all of which it has (mypy checks it below).
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import TYPE_CHECKING, Self

from brain._clock import utcnow
from brain._errors import StoreError
from brain._secrets import remember
from brain.store.backend import Backend
from brain.store.cache import StepCache
from brain.store.children import ChildRuns
from brain.store.errors import database_problem, short
from brain.store.housekeeping import Housekeeping
from brain.store.limits import RateLimits
from brain.store.logs import StepLogs
from brain.store.queue import RunQueue
from brain.store.reading import RunReading
from brain.store.runs import RunLifecycle
from brain.store.steps import StepRecords
from brain.store.urls import default_url, driver_name, redact_url, sqlite_file, url_passwords
from brain.store.waits import StepWaits

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from brain.store.interfaces import (
        ClaimStore,
        CostStore,
        HousekeepingStore,
        OpenableStore,
        ReadStore,
        RecordStore,
        RunStore,
        WaitStore,
    )

__all__ = ["Store", "database_problem", "default_url", "redact_url", "utcnow"]


class Store(RunLifecycle, StepRecords, StepLogs, StepWaits, RunReading, RunQueue, Housekeeping,
            ChildRuns, StepCache, RateLimits):
    """Where runs are recorded. ``Store()`` uses ``BRAIN_DATABASE_URL``.

    >>> async with Store("sqlite+aiosqlite:///runs.db") as store:   # doctest: +SKIP
    ...     print(await store.list_runs(limit=5))
    """

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        for password in url_passwords(self.url):
            remember(password)  # scrubbed from whatever runs store
        self._backend: Backend | None = None
        self._opening: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.shown_url!r})"

    @property
    def shown_url(self) -> str:
        """The URL with any password redacted: safe to print."""
        return redact_url(self.url)

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` has run (and :meth:`close` not yet)."""
        return self._backend is not None

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``; the store must be open."""
        return self.db.dialect.name

    @property
    def engine(self) -> AsyncEngine:
        """A SQLAlchemy async engine on this database, for tools and tests (the store's own
        SQLite traffic does not use it); the store must be open."""
        return self.db.engine

    async def open(self, *, check_schema: bool = True) -> Self:
        """Connect, apply SQLite settings, and make sure the schema is current (once: callers
        opening the store at the same time wait for the first)."""
        if self._backend is not None:
            return self
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._backend is None:
                self._backend = await _open_backend(self.url, self.shown_url, check_schema)
        return self

    async def upgrade_schema(self) -> tuple[str | None, str]:
        """Create or upgrade the schema (``brain db upgrade``); return (before, after)
        revisions."""
        await self.open(check_schema=False)
        try:
            return await self.db.upgrade_schema()
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot upgrade database {self.shown_url}: {short(exc)}") from None
        except Exception as exc:  # SQLAlchemy's errors (imported only to upgrade)
            if not type(exc).__module__.startswith("sqlalchemy."):
                raise
            raise StoreError(f"cannot upgrade database {self.shown_url}: {short(exc)}") from None

    async def close(self) -> None:
        """Release connections (after every write already queued)."""
        backend, self._backend = self._backend, None
        if backend is not None:
            await backend.close()

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _open_backend(url: str, shown_url: str, check_schema: bool) -> Backend:
    """The backend ``url`` names, open."""
    driver = driver_name(url)
    if driver is None:
        raise StoreError(f"BRAIN_DATABASE_URL is not a database URL: {shown_url}")
    if driver.split("+")[0] == "sqlite":  # any driver named: the store uses sqlite3 itself
        from brain.store.sqlite import SqliteBackend

        if url.partition("://")[2].split("/", 1)[0].split("?", 1)[0]:
            raise StoreError(f"cannot use database {shown_url}: a SQLite URL names no host "
                             "(sqlite:///relative/file.db, sqlite:////absolute/file.db)")
        return await SqliteBackend.open(sqlite_file(url), url, shown_url,
                                        check_schema=check_schema)
    if driver in ("postgresql", "postgresql+asyncpg"):  # no driver named: asyncpg
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            parsed = make_url(url).set(drivername="postgresql+asyncpg")
        except ArgumentError:
            raise StoreError(f"BRAIN_DATABASE_URL is not a database URL: {shown_url}") from None
        from brain.store.postgres import PostgresBackend

        return await PostgresBackend.open(parsed, shown_url, check_schema=check_schema)
    raise StoreError(
        f"BRAIN_DATABASE_URL must be SQLite (sqlite+aiosqlite:///FILE) or PostgreSQL "
        f"through asyncpg (postgresql+asyncpg://USER@HOST/DB), not {shown_url}")


if TYPE_CHECKING:
    def _has_every_interface(store: Store) -> tuple[OpenableStore, RecordStore, ClaimStore,
                                                    WaitStore, ReadStore, HousekeepingStore,
                                                    CostStore, RunStore]:
        """Never called: mypy checks here that ``Store`` has each interface."""
        return store, store, store, store, store, store, store, store
