"""The database tables (SQLAlchemy Core): what Alembic's migrations in ``migrations/`` create
and are checked against, and what tools and tests may query with SQLAlchemy. The store's own
statements are SQL text (:mod:`brain.store.queries`) and do not import this module."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from brain.store.schema import SCHEMA_REVISION

__all__ = ["SCHEMA_REVISION", "cache", "fires", "limit_uses", "limits", "metadata", "runs",
           "step_logs", "steps", "timers", "workers"]

metadata = MetaData()


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps stored in UTC and always read back timezone-aware."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        """The value written: UTC (naive on SQLite, as :mod:`brain.store.sqlite` writes it)."""
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        """The value read: aware, in UTC."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
        return value.astimezone(UTC)  # type: ignore[no-any-return]


class StoredText(TypeDecorator[str]):
    """Text as every database can keep it: PostgreSQL refuses the NUL character in text, so
    there it is stored as U+FFFD (SQLite keeps it as it is)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> Any:
        """The value written: NUL as U+FFFD on PostgreSQL."""
        if value is not None and dialect.name == "postgresql" and "\x00" in value:
            return value.replace("\x00", "\ufffd")
        return value


runs = Table(
    "brain_runs", metadata,
    Column("id", String(32), primary_key=True),
    Column("workflow", String(200), nullable=False),
    Column("definition_hash", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("trigger_event", String(16), nullable=False),
    Column("trigger_body", StoredText, nullable=False),
    Column("trigger_path", StoredText),
    Column("trigger_headers", StoredText, nullable=False),
    Column("error", StoredText),
    Column("previous_run_id", String(32)),
    Column("created_at", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime),
    Column("ended_at", UTCDateTime),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("lease_owner", String(200)),
    Column("lease_expires_at", UTCDateTime),
    Column("trigger_key", String(100)),
    Column("delivery_id", String(200)),
    Column("retry_of", String(32)),
    # How many of the run's waiting steps were decided, signalled or timed out (SPEC §16):
    # an executor lets go of a run only while this is what it last saw.
    Column("wakes", Integer, nullable=False, server_default="0"),
    # The run's concurrency key (SPEC §19), resolved from its trigger when it was queued.
    Column("concurrency_key", String(300)),
    # Its validated parameters (JSON; NULL is {}) and, once it succeeded, what its workflow
    # returned (JSON; SPEC §21).
    Column("params", StoredText),
    Column("output", StoredText),
    # A child run (SPEC §22): the run, step and try that queued it, and how deep it is (a run
    # nobody queued: NULL, depth 0). One child per try (the unique index).
    Column("parent_run_id", String(32)),
    Column("parent_step", String(200)),
    Column("parent_try", Integer),
    Column("depth", Integer),
    # The definition it runs on (SPEC §24): each step's fingerprint and upstream (JSON, see
    # brain.dsl.fingerprint), the version of the workflow's file it started on, and the
    # versions it continued on after a change (a JSON list; NULL: none).
    Column("step_prints", StoredText),
    Column("version", String(64)),
    Column("continued_on", StoredText),
    # Its trace context (SPEC §25): JSON, the root span's and its parent's W3C ``traceparent``.
    Column("trace_context", Text),
    Index("ux_brain_runs_parent", "parent_run_id", "parent_step", "parent_try", unique=True),
    Index("ix_brain_runs_workflow_status_ended", "workflow", "status", "ended_at"),
    Index("ix_brain_runs_concurrency", "workflow", "concurrency_key", "status"),
    Index("ix_brain_runs_status", "status"),
    Index("ix_brain_runs_created", "created_at"),
    Index("ux_brain_runs_delivery", "workflow", "delivery_id", unique=True),
)

# One row per schedule fire: the primary key is what makes a fire run once across servers.
fires = Table(
    "brain_fires", metadata,
    Column("workflow", String(200), primary_key=True),
    Column("trigger_key", String(100), primary_key=True),
    Column("fire_time", UTCDateTime, primary_key=True),
    Column("run_id", String(32)),
    Column("claimed_at", UTCDateTime, nullable=False),
)

steps = Table(
    "brain_steps", metadata,
    Column("run_id", String(32), ForeignKey("brain_runs.id", ondelete="CASCADE"), primary_key=True),
    Column("name", String(200), primary_key=True),
    Column("position", Integer, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("tries", Integer, nullable=False, default=0),
    Column("inputs", StoredText),
    Column("output", StoredText),
    Column("error", StoredText),
    Column("stderr", StoredText),
    Column("started_at", UTCDateTime),
    Column("ended_at", UTCDateTime),
    # The process group the step's latest try started, when its leader started (clock
    # ticks since boot) and on which machine (host, boot, pid namespace): how a resume on
    # that machine finds and ends what the try left running.
    Column("process_group", Integer),
    Column("process_started", BigInteger),
    Column("process_machine", String(200)),
    # A waiting step (SPEC §16): what it waits for (JSON, as the run JSON shows it), how it
    # was decided (JSON), and the signal and key it waits for (what a signal is matched by).
    Column("waiting_for", StoredText),
    Column("decision", StoredText),
    Column("wait_signal", String(200)),
    Column("wait_key", StoredText),
    # An LLM step's token usage and an MCP step's latest progress (JSON, SPEC §17, §18).
    Column("usage", StoredText),
    Column("progress", StoredText),
    # A step answered from the cache (SPEC §26): JSON, the usage it saved and where the
    # entry came from; NULL for a step that ran.
    Column("cached", StoredText),
    Index("ix_brain_steps_wait_signal", "wait_signal"),
)

# The timers of waiting steps (a sleep's wake time, a timeout), a row per step: whoever
# deletes a due row continues the step, in the same transaction (so each fires once).
# ``outcome`` and ``value``: what the step becomes then (``succeeded`` with the output,
# ``failed`` with the error).
timers = Table(
    "brain_timers", metadata,
    Column("run_id", String(32), primary_key=True),
    Column("step", String(200), primary_key=True),
    Column("due_at", UTCDateTime, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("value", StoredText, nullable=False),
    Index("ix_brain_timers_due", "due_at"),
)

# A step's log, a row per line: the first 8 KiB and the last 64 KiB a step wrote, with one
# line (stream ``brain``) between them saying what was dropped. ``t``: seconds since the
# step started; ``written_at``: when the line's batch was stored (what the change watcher
# looks for).
step_logs = Table(
    "brain_step_logs", metadata,
    Column("run_id", String(32), ForeignKey("brain_runs.id", ondelete="CASCADE"), primary_key=True),
    Column("step", String(200), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("stream", String(8), nullable=False),
    Column("t", Float, nullable=False),
    Column("text", StoredText, nullable=False),
    Column("written_at", UTCDateTime, nullable=False),
    Index("ix_brain_step_logs_written", "written_at"),
)

# One row per executor process (brain serve, brain worker), renewed by its heartbeat.
workers = Table(
    "brain_workers", metadata,
    Column("id", String(200), primary_key=True),
    Column("host", String(200), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("heartbeat_at", UTCDateTime, nullable=False),
    Column("executing", Integer, nullable=False),
)

# Cached steps' outputs (SPEC §26), by a digest of what the step does and what it was given
# (never the inputs themselves): one row per key, served until ``expires_at``.
cache = Table(
    "brain_cache", metadata,
    Column("cache_key", String(64), primary_key=True),
    Column("workflow", String(200), nullable=False),
    Column("step", String(200), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("output", StoredText),
    Column("stderr", StoredText),
    Column("usage", StoredText),
    Column("run_id", String(32)),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Index("ix_brain_cache_step", "workflow", "step"),
)

# Named rate limits (SPEC §26): a row per limit (locked by each take; ``paused_until``: a
# provider's Retry-After, epoch seconds) and a row per use in its window, counted until
# ``counts_until`` (epoch seconds).
limits = Table(
    "brain_limits", metadata,
    Column("name", String(200), primary_key=True),
    Column("paused_until", Float, nullable=False),
)

limit_uses = Table(
    "brain_limit_uses", metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("requests", Integer, nullable=False),
    Column("tokens", BigInteger, nullable=False),
    Column("counts_until", Float, nullable=False),
    Index("ix_brain_limit_uses_name", "name", "counts_until"),
)
