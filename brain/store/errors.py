"""What a database error means: worth retrying, or worth telling the user in one line."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

from brain._secrets import scrub

#: How long a write keeps being retried while the database is busy or unreachable.
RETRY_SECONDS = 120.0

_TRANSIENT_DRIVER_ERRORS = frozenset({
    "ConnectionDoesNotExistError", "CannotConnectNowError", "ConnectionFailureError",
    "AdminShutdownError", "CrashShutdownError", "TooManyConnectionsError",
    "ConnectionRejectionError"})


def transient(exc: BaseException) -> bool:
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


def short(exc: BaseException) -> str:
    """The first line of a database error (the driver's own message when there is one)."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def database_problem(exc: BaseException) -> str:
    """One line saying what is wrong with the database (for an error that reached the CLI)."""
    text = short(exc)
    if "async" in text.lower() and "driver" in text.lower():
        return ("BRAIN_DATABASE_URL needs an async driver: sqlite+aiosqlite:///FILE or "
                "postgresql+asyncpg://USER@HOST/DB")
    return f"the database cannot be used: {scrub(text)}"
