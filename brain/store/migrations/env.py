"""Alembic environment: always handed a live connection by :mod:`brain.store.schema`."""

from __future__ import annotations

from alembic import context

from brain.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `brain db upgrade`, which supplies the connection")
context.configure(connection=connection, target_metadata=metadata,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
