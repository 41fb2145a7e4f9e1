"""Schema versions: check the database is current; upgrade it with Alembic.

Checking needs no SQLAlchemy (a backend reads the revision its own way);
upgrading imports SQLAlchemy and Alembic.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from brain._errors import StoreError

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncEngine

#: The Alembic revision this code expects; a test checks it is the migrations' head.
SCHEMA_REVISION = "0016"

MIGRATIONS = Path(__file__).parent / "migrations"
_SQLITE_HEADER = b"SQLite format 3\x00"
_REVISION_LINE = re.compile(r"^revision\s*=\s*[\"']([^\"']+)[\"']", re.MULTILINE)


def known_revisions() -> frozenset[str]:
    """The revisions this code's migrations define (read from the files, without Alembic)."""
    found = set()
    for file in (MIGRATIONS / "versions").glob("*.py"):
        m = _REVISION_LINE.search(file.read_text(encoding="utf-8"))
        if m:
            found.add(m.group(1))
    return frozenset(found)


def sqlite_file_problem(database: str) -> str | None:
    """What keeps SQLite from creating or opening ``database`` (a file path), found before
    connecting, or ``None``.

    A failed connect is checked here rather than left to the driver: aiosqlite's
    thread outlives the failure and can print a traceback after the message.
    """
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    folder = os.path.dirname(os.path.abspath(database))
    if not os.path.isdir(folder):
        return (f"the folder {folder} does not exist: create it, or point BRAIN_DATABASE_URL "
                "at a file in an existing folder")
    if os.path.isdir(database):
        return f"{database} is a folder, not a database file"
    try:
        with open(database, "rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return None  # a new database
    except OSError as exc:
        return f"{database} cannot be read: {exc.strerror}"
    # SQLite would take some non-empty files (a single byte) for a new database and
    # overwrite them: anything but an empty file or SQLite's header is refused.
    if head and head != _SQLITE_HEADER:
        return (f"{database} is not a SQLite database file; point BRAIN_DATABASE_URL at "
                "another file (a new one is created)")
    return None


def _newer(revision: str, shown_url: str) -> StoreError:
    return StoreError(
        f"the database at {shown_url} has schema revision {revision}, which this version of "
        f"The Brain does not know (it knows up to {SCHEMA_REVISION}): a newer version has "
        "upgraded it. Upgrade The Brain, or point BRAIN_DATABASE_URL at another database")


def _unknown(revision: str | None, shown_url: str) -> StoreError | None:
    """The error for a revision this code has no migration for and that is not older than
    its own (so, a newer schema), if so."""
    if revision is None or revision == SCHEMA_REVISION or revision in known_revisions():
        return None
    if revision.isdigit() and SCHEMA_REVISION.isdigit() and int(revision) < int(SCHEMA_REVISION):
        return None  # an older one we have no migration for: the upgrade says so
    return _newer(revision, shown_url)


RevisionReader = Callable[[], Awaitable[str | None]]
Migrator = Callable[[], Awaitable[None]]


def revision_of(conn: Connection) -> str | None:
    """The revision the database behind ``conn`` (SQLAlchemy's) is at, or ``None`` for an
    empty database."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    try:
        value = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except DBAPIError:  # no such table: a new database
        return None
    return None if value is None else str(value)


async def current_revision(engine: AsyncEngine) -> str | None:
    """:func:`revision_of`, through an async engine."""
    async with engine.connect() as conn:
        return await conn.run_sync(revision_of)


_alembic_lock = threading.Lock()


def apply_migrations(conn: Connection) -> None:
    """Upgrade the schema behind ``conn`` to the newest revision with Alembic (imported
    only here)."""
    import logging

    from alembic import command
    from alembic.config import Config

    logging.getLogger("alembic").setLevel(logging.WARNING)

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    # Alembic keeps its migration context in module globals: one upgrade at a time.
    with _alembic_lock:
        command.upgrade(cfg, "head")


async def upgrade_engine(engine: AsyncEngine) -> None:
    """:func:`apply_migrations` through an async engine, in one transaction."""
    async with engine.begin() as conn:
        await conn.run_sync(apply_migrations)


async def upgrade(current: RevisionReader, migrate: Migrator,
                  shown_url: str) -> tuple[str | None, str]:
    """Upgrade the schema to the newest revision; return (before, after).

    A revision this code does not know (a newer schema) is a :class:`StoreError`.
    """
    before = await current()
    unknown = _unknown(before, shown_url)
    if unknown is not None:
        raise unknown
    if before != SCHEMA_REVISION:
        from alembic.util import CommandError

        try:
            await migrate()
        except CommandError as exc:
            raise StoreError(f"cannot upgrade the schema of {shown_url}: {exc}") from None
    return before, await current() or ""


_upgrade_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary())


async def ensure_current(current: RevisionReader, migrate: Migrator, *, auto_upgrade: bool,
                         shown_url: str) -> None:
    """Make sure the schema is current: upgrade it (SQLite) or refuse to go on (PostgreSQL)."""
    revision = await current()
    if revision == SCHEMA_REVISION:
        return
    unknown = _unknown(revision, shown_url)
    if unknown is not None:
        raise unknown
    if auto_upgrade:
        # One upgrade at a time in this process (two first runs on a new file would
        # otherwise trip over each other).
        lock = _upgrade_locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            if await current() == SCHEMA_REVISION:
                return
            try:
                await upgrade(current, migrate, shown_url)
            except StoreError:
                raise
            except Exception:
                # Another process may be creating the schema at this moment (SQLite DDL is
                # not transactional under Alembic): give it a few seconds to finish.
                for _ in range(100):
                    if await current() == SCHEMA_REVISION:
                        return
                    await asyncio.sleep(0.1)
                raise
        return
    raise StoreError(
        f"the database at {shown_url} has schema revision {revision or 'none'}, this version of "
        f"The Brain needs {SCHEMA_REVISION}: run `brain db upgrade` first")
