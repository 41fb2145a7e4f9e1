"""Housekeeping: the executor processes' own rows, and pruning what is old.

Part of :class:`brain.store.Store`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from brain._clock import utcnow
from brain.store import queries
from brain.store.backend import UsesBackend

#: Which statement of ``queries.PRUNE`` deletes the runs (its count is the answer).
_RUNS_DELETED = 3


class Housekeeping(UsesBackend):
    """Worker rows (``brain serve``/``brain worker`` processes) and retention."""

    async def worker_heartbeat(self, worker_id: str, *, host: str, pid: int, kind: str,
                               started_at: datetime, executing: int) -> None:
        """Say this executor process is alive (its row is created on the first beat)."""
        await self.db.write(queries.WORKER_BEAT, {
            "id": worker_id, "host": host, "pid": pid, "kind": kind, "started_at": started_at,
            "heartbeat_at": utcnow(), "executing": executing})

    async def forget_worker(self, worker_id: str) -> None:
        """Remove a worker's row (it stopped cleanly)."""
        await self.db.write(queries.FORGET_WORKER, {"worker_id": worker_id})

    async def forget_silent_workers(self, before: datetime) -> None:
        """Remove the rows of workers silent since ``before`` (they died without a word)."""
        await self.db.write(queries.FORGET_SILENT_WORKERS, {"before": before})

    async def list_workers(self) -> list[dict[str, Any]]:
        """Every executor process that has a row, most recent heartbeat first: ``executing``
        as its last heartbeat said, ``leased`` how many runs the database still has running
        under its lease."""
        rows = await self.db.read(queries.LIST_WORKERS)
        for row in rows:
            row["leased"] = int(row["leased"] or 0)
        return rows

    async def prune(self, finished_before: datetime) -> int:
        """Delete finished runs that ended before ``finished_before``, schedule fire
        records claimed before it (each trigger's latest is kept: catch-up counts from
        it) and the rows of workers silent since; return how many runs."""
        params = {"before": finished_before}
        counts = await self.db.transaction([(sql, params) for sql in queries.PRUNE])
        return int(counts[_RUNS_DELETED] or 0)
