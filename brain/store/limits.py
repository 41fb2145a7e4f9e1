"""Rate limits shared by every process on one database (SPEC §26): a row per limit (its
pause after a provider's ``Retry-After``) and a row per use in its sliding window.

Part of :class:`brain.store.Store`. A take locks its limit's row (``FOR UPDATE`` on
PostgreSQL; SQLite's writer commits one transaction at a time), drops the uses that no
longer count, and adds one only when :meth:`~brain.dsl.model.Limit.wait_for_room` says it
fits: concurrent takes of one limit, from any process, take turns. Times are seconds
since the epoch by the database server's clock on PostgreSQL (executors on several
machines compare them), by this machine's on SQLite.

A use counts from its take until ``per`` seconds after it is settled (its request
answered), so a window of ``per`` seconds at the provider never sees more than the limit;
a use never settled (its process died) stops counting ``per`` plus its step's timeout
after it was taken.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from brain.store import queries
from brain.store.backend import Connection, UsesBackend

if TYPE_CHECKING:
    from brain.dsl.cost import Limit

_PG_CLOCK = "CAST(extract(epoch FROM clock_timestamp()) AS double precision)"


class RateLimits(UsesBackend):
    """The uses of named rate limits."""

    def _clock(self) -> tuple[str, dict[str, float]]:
        """The SQL for "now" in seconds and its parameters."""
        if self.db.dialect.name == "postgresql":
            return _PG_CLOCK, {}
        return ":now", {"now": time.time()}

    async def limit_take(self, name: str, limit: Limit, tokens: int, hold: float
                         ) -> tuple[str | None, float]:
        """Take room for one request reserving ``tokens`` in limit ``name``: ``(use id,
        0)``, or ``(None, seconds)`` to wait before trying again. ``hold``: the longest
        the request may take (the use counts that long at most before it is settled)."""
        clock, times = self._clock()
        lock = queries.LIMIT_LOCK + (queries.LOCK_ROW if self.db.dialect.name == "postgresql"
                                     else "")

        def job(conn: Connection) -> tuple[str | None, float]:
            conn.write(queries.LIMIT_ROW, {"name": name})
            row = conn.read(lock.replace(":clock", clock), {"name": name, **times})[0]
            now = float(row["now"])
            conn.write(queries.LIMIT_EXPIRED, {"name": name, "now": now})
            uses = [(float(u["until"]), int(u["requests"]), int(u["tokens"]))
                    for u in conn.read(queries.LIMIT_USES, {"name": name})]
            wait = limit.wait_for_room(uses, tokens, now, float(row["paused_until"]))
            if wait > 0:
                return None, wait
            use = uuid.uuid4().hex
            conn.write(queries.LIMIT_USE, {"id": use, "name": name, "requests": 1,
                                           "tokens": max(tokens, 0),
                                           "until": now + limit.per + hold})
            return use, 0.0

        return await self.db.atomically(job)

    async def limit_settle(self, uses: Sequence[str], per: float,
                           tokens: Sequence[int | None]) -> None:
        """The requests of ``uses`` were answered: each counts ``per`` seconds more from now,
        with the tokens it really spent (``None``: its reservation stands)."""
        clock, times = self._clock()
        sql = queries.LIMIT_SETTLE.replace(":clock", clock)
        await self.db.transaction([(sql, [{"id": use, "per": per, "tokens": spent, **times}
                                          for use, spent in zip(uses, tokens, strict=True)])])

    async def limit_pause(self, name: str, seconds: float) -> None:
        """No request of limit ``name`` goes out for ``seconds`` from now (a provider's 429
        with ``Retry-After``), in every process."""
        clock, times = self._clock()
        await self.db.write(queries.LIMIT_PAUSE.replace(":clock", clock),
                            {"name": name, "seconds": max(seconds, 0.0), **times})
