"""The one small interface a store's database sits behind, and what passes through it.

A :class:`Backend` runs SQL text with named parameters (``:name``) that the
statements in :mod:`brain.store.queries` are written in, once, for both
databases. Two implementations: :class:`brain.store.sqlite.SqliteBackend`
(``sqlite3`` in threads of its own, no SQLAlchemy) and
:class:`brain.store.postgres.PostgresBackend` (SQLAlchemy's async engine on
asyncpg). What differs between the two databases' SQL is a
:class:`Dialect`: a few named pieces filled into the statements' ``{slots}``.

Rows come back as plain dicts, timestamps as timezone-aware UTC datetimes on
both databases (the columns in :data:`TIME_COLUMNS`, and any expression named
like one of them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

T = TypeVar("T")

#: A statement's named parameters; a sequence of them runs the statement once for each.
Params = Mapping[str, Any]
#: One row of a query: column name → value.
Row = dict[str, Any]
#: A statement of a transaction: SQL text and its parameters (one set, or one per row).
Statement = tuple[str, Params | Sequence[Params] | None]

#: Columns (and expression names) that hold timestamps: stored in UTC, read back aware.
TIME_COLUMNS = frozenset({"created_at", "started_at", "ended_at", "lease_expires_at",
                          "fire_time", "claimed_at", "heartbeat_at", "due_at"})


@dataclass(frozen=True)
class Dialect:
    """What differs in the two databases' SQL, by name.

    Leases are timed by the database server's clock on PostgreSQL, where
    executors on several machines compare them (one whose clock runs ahead must
    not take live runs), and by this machine's clock on SQLite, which one
    machine uses: there the lease times are parameters, filled by
    :func:`lease_times`.
    """

    name: str
    #: "Now", by the lease clock.
    lease_now: str
    #: "Now" plus ``:lease_seconds``, by the lease clock.
    lease_until: str
    #: A second ago, by the lease clock (a lease ended now).
    lease_past: str
    #: What follows a queue pick so that concurrent executors skip each other's rows.
    skip_locked: str
    #: Whether a ``WITH`` clause may hold an ``INSERT`` (a run and its steps in one
    #: statement, one round trip).
    inserts_in_with: bool = False
    _rendered: dict[str, str] = field(default_factory=dict, init=False, compare=False,
                                      repr=False)

    def render(self, template: str) -> str:
        """``template`` with this dialect's pieces in its ``{slots}`` (cached)."""
        sql = self._rendered.get(template)
        if sql is None:
            if len(self._rendered) > 2000:  # statements with long IN lists come and go
                self._rendered.clear()
            sql = template.format(lease_now=self.lease_now, lease_until=self.lease_until,
                                  lease_past=self.lease_past, skip_locked=self.skip_locked)
            self._rendered[template] = sql
        return sql


SQLITE = Dialect("sqlite", lease_now=":lease_now", lease_until=":lease_until",
                 lease_past=":lease_past", skip_locked="")
POSTGRESQL = Dialect(
    "postgresql", lease_now="now()",
    lease_until="now() + make_interval(secs => CAST(:lease_seconds AS double precision))",
    lease_past="now() - interval '1 second'", skip_locked=" FOR UPDATE SKIP LOCKED",
    inserts_in_with=True)


def lease_times(lease_seconds: float = 0, now: datetime | None = None) -> dict[str, Any]:
    """The parameters the lease pieces of a :class:`Dialect` use: this machine's clock for
    SQLite, the length alone for PostgreSQL (whose server clock fills in the rest)."""
    now = now or datetime.now(UTC)
    return {"lease_now": now, "lease_until": now + timedelta(seconds=lease_seconds),
            "lease_past": now - timedelta(seconds=1), "lease_seconds": float(lease_seconds)}


def utc(value: datetime) -> datetime:
    """A timestamp read back from either database: aware, in UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Written:
    """What a write left behind: the rows it returned (``RETURNING``) and how many rows it
    changed."""

    __slots__ = ("rowcount", "rows")

    def __init__(self, rows: list[Row], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount


class Connection(Protocol):
    """A connection inside one transaction, for :meth:`Backend.atomically` jobs
    (synchronous: the job runs in the database's thread)."""

    def read(self, sql: str, params: Params | None = None) -> list[Row]:
        """The rows a query returns."""
        ...

    def write(self, sql: str, params: Params | Sequence[Params] | None = None) -> int:
        """Run a statement (once per parameter set); how many rows it changed."""
        ...


class Backend(Protocol):
    """A store's database: what the store's statements need of it, and nothing more.

    A busy or briefly unreachable database is retried (for up to
    :data:`brain.store.errors.RETRY_SECONDS`), never reported as a lost
    write; any other database error is a :class:`brain.store.errors.DatabaseError`.
    """

    @property
    def dialect(self) -> Dialect:
        """The pieces of SQL that differ on this database."""
        ...

    @property
    def engine(self) -> AsyncEngine:
        """A SQLAlchemy async engine on this database, for tools and tests (imports
        SQLAlchemy; the store's own statements do not use it on SQLite)."""
        ...

    async def read(self, sql: str, params: Params | None = None, *,
                   retry: bool = True) -> list[Row]:
        """Run a query on its own; its rows."""
        ...

    async def write(self, sql: str, params: Params | None = None, *,
                    retry: bool = True) -> Written:
        """Run one statement atomically on its own; committed when this returns."""
        ...

    async def transaction(self, statements: Sequence[Statement]) -> list[int]:
        """Run ``statements`` in one transaction; how many rows each changed."""
        ...

    async def atomically(self, job: Callable[[Connection], T]) -> T:
        """Run ``job(connection)`` in one transaction and return what it returns; what it
        raises rolls everything back."""
        ...

    async def upgrade_schema(self) -> tuple[str | None, str]:
        """Create or upgrade the schema; the revisions before and after."""
        ...

    async def close(self) -> None:
        """Release the connections, after every write already queued."""
        ...


class UsesBackend:
    """What every part of :class:`brain.store.Store` shares: the backend it opened."""

    _backend: Backend | None = None

    @property
    def db(self) -> Backend:
        """The open backend (a :class:`~brain._errors.StoreError` before ``open()``)."""
        backend = self._backend
        if backend is None:
            from brain._errors import StoreError

            raise StoreError("the store is not open: use `async with store:` or "
                             "`await store.open()`")
        return backend
