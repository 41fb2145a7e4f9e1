"""Cached steps' outputs (SPEC §26), shared by every process on one database.

Part of :class:`brain.store.Store`. An entry is found by its key alone — a digest of the
step's kind, its fingerprint and its resolved inputs, made by the runner — and holds the
output the step stored (already scrubbed), its error stream's tail and the tokens it
spent, until it expires. Nothing of the inputs is kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from brain._clock import utcnow
from brain.results import clean_text
from brain.store import queries
from brain.store.backend import UsesBackend


@dataclass(frozen=True)
class CachedOutput:
    """A cache entry: what the step stored when it succeeded, the tokens it spent then,
    and the run that stored it and when."""

    output: str | None
    stderr: str | None
    usage: dict[str, int] | None
    run_id: str | None
    created_at: datetime | None


class StepCache(UsesBackend):
    """Cache entries: found, stored, cleared."""

    async def cache_get(self, key: str) -> CachedOutput | None:
        """The unexpired entry under ``key``, or ``None``."""
        rows = await self.db.read(queries.CACHE_GET, {"cache_key": key, "now": utcnow()})
        if not rows:
            return None
        row = rows[0]
        usage: Any = json.loads(row["usage"]) if row["usage"] else None
        return CachedOutput(row["output"], row["stderr"], usage if isinstance(usage, dict)
                            else None, row["run_id"], row["created_at"])

    async def cache_put(self, key: str, *, workflow: str, step: str, kind: str,
                        output: str | None, stderr: str | None,
                        usage: dict[str, int] | None, run_id: str | None,
                        expire_seconds: float) -> None:
        """Store a succeeded step's output under ``key`` for ``expire_seconds`` (in place of
        an older entry), dropping the step's expired entries in the same commit."""
        now = utcnow()
        try:
            expires = now + timedelta(seconds=expire_seconds)
        except OverflowError:
            expires = datetime.max.replace(tzinfo=now.tzinfo) - timedelta(days=1)
        await self.db.transaction([
            (queries.CACHE_EXPIRED, {"workflow": workflow, "step": step, "now": now}),
            (queries.CACHE_PUT, {
                "cache_key": key, "workflow": workflow, "step": step, "kind": kind,
                "output": clean_text(output), "stderr": clean_text(stderr),
                "usage": None if usage is None else json.dumps(usage), "run_id": run_id,
                "created_at": now, "expires_at": expires})])

    async def cache_clear(self, workflow: str | None = None, step: str | None = None) -> int:
        """Delete the entries of ``workflow`` (and of its step ``step``), or every entry;
        how many were deleted."""
        where, params = [], {}
        if workflow is not None:
            where.append("workflow = :workflow")
            params["workflow"] = workflow
        if step is not None:
            where.append("step = :step")
            params["step"] = step
        sql = queries.CACHE_CLEAR + (" WHERE " + " AND ".join(where) if where else "")
        written = await self.db.write(sql, params)
        return written.rowcount
