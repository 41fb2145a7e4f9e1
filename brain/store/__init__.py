"""The run store: runs and steps through SQLAlchemy (SQLite by default, PostgreSQL too)."""

from brain.store.store import Store, default_url

__all__ = ["Store", "default_url"]
