"""What a database error means: worth retrying, or worth telling the user in one line.

Both backends turn what their driver raises (after retrying what is transient)
into :class:`DatabaseError`, so callers see one kind of error whichever
database is behind the store.
"""

from __future__ import annotations

import sqlite3
import sys

from brain._errors import StoreError
from brain._secrets import scrub

#: How long a write keeps being retried while the database is busy or unreachable.
RETRY_SECONDS = 120.0

_TRANSIENT_DRIVER_ERRORS = frozenset({
    "ConnectionDoesNotExistError", "CannotConnectNowError", "ConnectionFailureError",
    "AdminShutdownError", "CrashShutdownError", "TooManyConnectionsError",
    "ConnectionRejectionError",
    # Two transactions that waited for each other: PostgreSQL rolled one back, whole.
    "DeadlockDetectedError", "SerializationError"})
#: PostgreSQL's codes for a transaction rolled back whole, to be tried again: a deadlock,
#: a serialization failure (SQLAlchemy's adapter keeps the code as ``sqlstate``).
_RETRIED_STATES = frozenset({"40P01", "40001"})


class DatabaseError(StoreError):
    """The database refused or failed a statement (a corrupt file, a lost server, a bad
    value); the message says what, in one line."""


class ConstraintViolation(DatabaseError):
    """A write broke a constraint of the schema: most often a row that exists already (a
    repeated run id, webhook delivery or schedule fire)."""


def _busy(text: str) -> bool:
    text = text.lower()
    return "database is locked" in text or "database table is locked" in text or "busy" in text


def transient(exc: BaseException) -> bool:
    """A busy or briefly unreachable database: worth trying the same write again."""
    if isinstance(exc, ConnectionError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return _busy(str(exc))
    sa_exc = sys.modules.get("sqlalchemy.exc")  # only PostgreSQL's errors come through it
    if sa_exc is None or not isinstance(exc, sa_exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    if _busy(str(exc.orig or exc)):
        return True
    if getattr(exc.orig, "sqlstate", None) in _RETRIED_STATES:
        return True
    name = type(exc.orig).__name__
    return name in _TRANSIENT_DRIVER_ERRORS or isinstance(exc.orig, ConnectionError)


def short(exc: BaseException) -> str:
    """The first line of a database error (the driver's own message when there is one)."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def database_problem(exc: BaseException) -> str:
    """One line saying what is wrong with the database (for an error that reached the CLI)."""
    if isinstance(exc, DatabaseError):
        return str(exc)
    text = short(exc)
    if "async" in text.lower() and "driver" in text.lower():
        return ("BRAIN_DATABASE_URL needs an async driver: sqlite+aiosqlite:///FILE or "
                "postgresql+asyncpg://USER@HOST/DB")
    return f"the database cannot be used: {scrub(text)}"


def database_error(exc: BaseException, *, integrity: bool) -> DatabaseError:
    """The :class:`DatabaseError` a driver's error becomes (``integrity``: it broke a
    constraint)."""
    if integrity:
        return ConstraintViolation(f"the database refused a write: {scrub(short(exc))}")
    return DatabaseError(database_problem(exc))
