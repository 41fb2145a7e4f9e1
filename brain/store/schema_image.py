"""The schema image: a new in-memory SQLite database with the current schema, as bytes.

An in-memory database (``sqlite:///:memory:``, what ``brain.testing`` runs on)
starts empty and has no migration history. Creating its tables costs
SQLAlchemy's DDL compiler every time (several milliseconds: more than a whole
mocked run), so the schema is built once per process, in a template database,
and every new in-memory connection starts as a copy of it
(``sqlite3.Connection.deserialize``, a memory copy).

The template's tables are :data:`brain.store.tables.metadata` (which a test
checks against the migrations), stamped with :data:`~brain.store.schema.
SCHEMA_REVISION` so that a schema check reads it as current.
"""

from __future__ import annotations

import sqlite3
import threading

from brain.store.schema import SCHEMA_REVISION

_image: bytes | None = None
_lock = threading.Lock()


def schema_image() -> bytes:
    """The serialized template database (built on the first call in the process)."""
    global _image
    image = _image
    if image is None:
        with _lock:
            if _image is None:
                _image = _build()
            image = _image
    return image


def new_memory_database() -> sqlite3.Connection:
    """A new in-memory database holding the current schema and no rows (autocommit, usable
    from any thread)."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False,
                           cached_statements=512)
    try:
        conn.deserialize(schema_image())
    except BaseException:
        conn.close()
        raise
    return conn


def _build() -> bytes:
    from sqlalchemy.dialects import sqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    from brain.store.tables import metadata

    dialect = sqlite.dialect()
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        conn.execute("BEGIN")
        for table in metadata.sorted_tables:
            conn.execute(str(CreateTable(table).compile(dialect=dialect)))
            for index in table.indexes:
                conn.execute(str(CreateIndex(index).compile(dialect=dialect)))
        # As Alembic records it: a schema check then finds the database current.
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
                     "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))")
        conn.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (SCHEMA_REVISION,))
        conn.execute("COMMIT")
        return conn.serialize()
    finally:
        conn.close()
