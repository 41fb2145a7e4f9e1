"""``brain workers`` and ``GET /api/workers``: the executor processes sharing the database,
from the heartbeats they write every few seconds (SPEC §14)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from brain._clock import utcnow


def describe_workers(rows: list[dict[str, Any]], lease_seconds: float,
                     now: datetime | None = None) -> list[dict[str, Any]]:
    """Each worker row as JSON, with ``lost`` (silent for longer than a lease) and
    ``silent_seconds``."""
    now = now or utcnow()
    found = []
    for row in rows:
        silent = (now - row["heartbeat_at"]).total_seconds()
        found.append({"id": row["id"], "host": row["host"], "pid": row["pid"],
                      "kind": row["kind"], "started_at": row["started_at"].isoformat(),
                      "heartbeat_at": row["heartbeat_at"].isoformat(),
                      "executing": row["executing"], "silent_seconds": round(silent, 1),
                      "lost": silent > lease_seconds})
    return found
