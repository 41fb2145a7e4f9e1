"""Schema versions: check the database is current; upgrade it with Alembic."""

from __future__ import annotations

import asyncio
import weakref
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from brain._errors import StoreError
from brain.store.tables import SCHEMA_REVISION

MIGRATIONS = Path(__file__).parent / "migrations"


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at, or ``None`` for an empty database."""
    async with engine.connect() as conn:
        try:
            value = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
        except DBAPIError:  # no such table: a new database
            return None
    return None if value is None else str(value)


def _upgrade(conn: Connection) -> None:
    import logging

    from alembic import command
    from alembic.config import Config

    logging.getLogger("alembic").setLevel(logging.WARNING)

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, "head")


async def upgrade(engine: AsyncEngine) -> tuple[str | None, str]:
    """Upgrade the schema to the newest revision; return (before, after)."""
    before = await current_revision(engine)
    if before != SCHEMA_REVISION:
        async with engine.begin() as conn:
            await conn.run_sync(_upgrade)
    return before, await current_revision(engine) or ""


_upgrade_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary())


async def ensure_current(engine: AsyncEngine, *, auto_upgrade: bool, shown_url: str) -> None:
    """Make sure the schema is current: upgrade it (SQLite) or refuse to go on (PostgreSQL)."""
    revision = await current_revision(engine)
    if revision == SCHEMA_REVISION:
        return
    if auto_upgrade:
        # Alembic keeps its migration context in module globals: one upgrade at a time
        # in this process (two first runs on a new file would otherwise trip over it).
        lock = _upgrade_locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            if await current_revision(engine) == SCHEMA_REVISION:
                return
            try:
                await upgrade(engine)
            except Exception:
                # Another process may be creating the schema at this moment (SQLite DDL is
                # not transactional under Alembic): give it a few seconds to finish.
                for _ in range(100):
                    if await current_revision(engine) == SCHEMA_REVISION:
                        return
                    await asyncio.sleep(0.1)
                raise
        return
    raise StoreError(
        f"the database at {shown_url} has schema revision {revision or 'none'}, this version of "
        f"The Brain needs {SCHEMA_REVISION}: run `brain db upgrade` first")
