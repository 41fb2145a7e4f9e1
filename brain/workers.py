"""``brain workers`` and ``GET /api/workers``: the executor processes sharing the database,
from the heartbeats they write every few seconds (SPEC §14).

What a row says a process executes is the truth of the database, not only of its last
heartbeat: a run counts while the heartbeat counted it *and* the run is still running
under that process's lease. A process killed mid-run (``kill -9``) beats no more, so its
last heartbeat counts the run forever; once another process takes the run over, or the
run ends, the dead one's row counts it no longer. Rows of processes silent for longer than
:data:`brain.service.taking.LOST_WORKER_KEPT` are removed by the live ones.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from brain._clock import utcnow


def describe_workers(rows: list[dict[str, Any]], lease_seconds: float,
                     now: datetime | None = None) -> list[dict[str, Any]]:
    """Each worker row (as :meth:`brain.store.Store.list_workers` gives it) as JSON, with
    ``lost`` (silent for longer than a lease), ``silent_seconds`` and ``executing``: the
    runs its last heartbeat counted that still run under its lease."""
    now = now or utcnow()
    found = []
    for row in rows:
        silent = (now - row["heartbeat_at"]).total_seconds()
        executing = min(int(row["executing"]), int(row["leased"]))
        found.append({"id": row["id"], "host": row["host"], "pid": row["pid"],
                      "kind": row["kind"], "started_at": row["started_at"].isoformat(),
                      "heartbeat_at": row["heartbeat_at"].isoformat(),
                      "executing": executing, "silent_seconds": round(silent, 1),
                      "lost": silent > lease_seconds})
    return found
