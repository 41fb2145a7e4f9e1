"""The run store: runs and steps in SQLite (by default, through ``sqlite3``) or PostgreSQL
(through SQLAlchemy and asyncpg)."""

from brain.store.store import Store, default_url

__all__ = ["Store", "default_url"]
