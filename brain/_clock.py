"""The one clock every layer reads: the current time in UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """The current time in UTC (timezone-aware)."""
    return datetime.now(UTC)
