"""Steps' logs: lines added as a step runs (the tail's oldest dropped as it moves on),
read back by step, and the lines stored lately (for the change watcher).

Part of :class:`brain.store.Store`. With ``owner``, a write changes something only
while that owner holds the run's lease, else it raises
:class:`~brain._errors.LeaseLost` (and changes nothing).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from brain._clock import utcnow
from brain.results import LogBatch, LogLine, clean_text
from brain.store import queries
from brain.store.backend import Connection, Row, UsesBackend
from brain.store.records import check_lease

#: The most lines one read gives back (a kept log has far fewer: 72 KiB of text).
READ_LIMIT = 20_000


def _line(row: Row) -> LogLine:
    return LogLine(int(row["seq"]), str(row["stream"]), float(row["t"]), str(row["text"]))


class StepLogs(UsesBackend):
    """Writes and reads of steps' logs."""

    async def append_log(self, run_id: str, step: str, batch: LogBatch, *,
                         owner: str | None = None) -> None:
        """Store ``batch`` (see :class:`~brain.results.LogBatch`) in one commit."""
        await self.append_logs(run_id, [(step, batch)], owner=owner)

    async def append_logs(self, run_id: str, batches: Sequence[tuple[str, LogBatch]], *,
                          owner: str | None = None) -> None:
        """Store several steps' batches (``(step, batch)``) in one commit."""
        batches = [(step, batch) for step, batch in batches if batch]
        if not batches:
            return
        now = utcnow()

        def row(step: str, line: LogLine) -> dict[str, Any]:
            return {"run_id": run_id, "step": step, "seq": line.seq, "stream": line.stream,
                    "t": line.t, "text": clean_text(line.text) or "", "written_at": now}

        def job(conn: Connection) -> None:
            if owner is not None:  # the lease first: under a lost one nothing is written
                check_lease(conn.write(queries.HOLDS_LEASE, {"run_id": run_id, "owner": owner}),
                            owner)
            for step, batch in batches:
                if batch.drop is not None:
                    conn.write(queries.DROP_LOG_LINES, {"run_id": run_id, "step": step,
                                                        "first": batch.drop[0],
                                                        "last": batch.drop[1]})
                lines = [*batch.lines, *([batch.note] if batch.note is not None else [])]
                if lines:
                    conn.write(queries.UPSERT_LOG_LINE, [row(step, line) for line in lines])
                if batch.progress is not None:
                    conn.write(queries.STEP_PROGRESS, {"run_id": run_id, "name": step,
                                                       "progress": json.dumps(batch.progress)})

        await self.db.atomically(job)

    async def read_log(self, run_id: str, step: str, *, after: int = 0,
                       limit: int = READ_LIMIT) -> list[LogLine]:
        """The stored lines of ``step`` whose ``seq`` is greater than ``after``, in order."""
        rows = await self.db.read(queries.LOG_OF_STEP, {"run_id": run_id, "step": step,
                                                        "after": after, "limit": limit})
        return [_line(row) for row in rows]

    async def run_logs(self, run_id: str) -> dict[str, list[LogLine]]:
        """Every stored line of the run, by step."""
        logs: dict[str, list[LogLine]] = {}
        for row in await self.db.read(queries.LOGS_OF_RUN, {"run_id": run_id}):
            logs.setdefault(str(row["step"]), []).append(_line(row))
        return logs

    async def recent_logs(self, since: datetime, limit: int = READ_LIMIT
                          ) -> list[tuple[str, str, str, LogLine]]:
        """``(run id, workflow, step, line)`` of the lines stored at ``since`` or later, in
        the order they were stored."""
        rows = await self.db.read(queries.RECENT_LOG_LINES, {"since": since, "limit": limit})
        return [(str(r["run_id"]), str(r["workflow"]), str(r["step"]), _line(r)) for r in rows]
