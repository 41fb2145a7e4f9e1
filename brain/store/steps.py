"""A run's steps as the runner records them: started, finished, their processes, ended
together, added (``for_each``), reset for a resume.

Part of :class:`brain.store.Store`. With ``owner``, every write here changes
something only while that owner holds the run's lease, else it raises
:class:`~brain._errors.LeaseLost` (and changes nothing).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from brain._clock import utcnow
from brain.results import StepStatus, clean_text
from brain.store import queries
from brain.store.backend import Connection, Statement, UsesBackend
from brain.store.base import StepProcess
from brain.store.records import check_lease, pending_steps

_leased_sql: dict[str, str] = {}


def _leased(sql: str, owner: str | None) -> str:
    """``sql`` limited to while ``owner`` (when given) holds the lease; the same string
    object each time (the statement caches below key on it)."""
    if owner is None:
        return sql
    found = _leased_sql.get(sql)
    if found is None:
        if len(_leased_sql) > 500:  # statements with IN lists of many lengths
            _leased_sql.clear()
        found = _leased_sql[sql] = sql + queries.LEASED
    return found


class StepRecords(UsesBackend):
    """Writes of a run's steps."""

    async def step_running(self, run_id: str, name: str, *, inputs: dict[str, Any],
                           tries: int, started_at: datetime, owner: str | None = None) -> None:
        """Mark a step ``running`` with its resolved (redacted) inputs.

        With ``owner``, only while that owner holds the run's lease (else
        :class:`LeaseLost`); the same holds for every write below.
        """
        written = await self.db.write(_leased(queries.STEP_RUNNING, owner), {
            "run_id": run_id, "name": name, "inputs": json.dumps(inputs), "tries": tries,
            "started_at": started_at, "owner": owner})
        check_lease(written.rowcount, owner)

    async def step_finished(self, run_id: str, name: str, *, status: StepStatus, tries: int,
                            ended_at: datetime, output: str | None = None,
                            error: str | None = None, stderr: str | None = None,
                            inputs: dict[str, Any] | None = None,
                            started_at: datetime | None = None, owner: str | None = None,
                            usage: dict[str, int] | None = None,
                            cached: dict[str, Any] | None = None) -> None:
        """Record a step's end; committed before this returns. ``cached``: the step was
        answered from the cache (SPEC §26): the usage it saved and where the entry came
        from.

        ``inputs`` and ``started_at``, when given, are written too (a quick step
        is recorded once, finished, without a ``running`` write first). Text
        that cannot be stored as it is (lone surrogates) is stored with
        replacement characters.
        """
        sql = (queries.STEP_FINISHED_WHOLE if inputs is not None and started_at is not None
               else queries.step_finished(inputs=inputs is not None,
                                          started_at=started_at is not None))
        written = await self.db.write(_leased(sql, owner), {
            "run_id": run_id, "name": name, "status": status.value, "tries": tries,
            "ended_at": ended_at, "output": clean_text(output), "error": clean_text(error),
            "stderr": clean_text(stderr), "owner": owner, "started_at": started_at,
            "inputs": None if inputs is None else json.dumps(inputs),
            "usage": None if usage is None else json.dumps(usage),
            "cached": None if cached is None else json.dumps(cached)})
        check_lease(written.rowcount, owner)

    async def step_output(self, run_id: str, name: str, *, output: str | None,
                          stderr: str | None, owner: str | None = None,
                          usage: dict[str, int] | None = None) -> None:
        """Keep what a step printed (and, an LLM step, the tokens it spent) before it was cut
        off (its status is written after)."""
        written = await self.db.write(_leased(queries.STEP_OUTPUT, owner), {
            "run_id": run_id, "name": name, "output": clean_text(output),
            "usage": None if usage is None else json.dumps(usage),
            "stderr": clean_text(stderr), "owner": owner})
        check_lease(written.rowcount, owner)

    async def step_process(self, run_id: str, process: StepProcess, *,
                           owner: str | None = None) -> None:
        """Record the process group a step's try has started (see :class:`StepProcess`),
        in place of an earlier try's; only while ``owner`` holds the run's lease, when given."""
        written = await self.db.write(_leased(queries.STEP_PROCESS, owner), {
            "run_id": run_id, "name": process.step, "pgid": process.pgid,
            "pstarted": process.started, "machine": process.machine, "owner": owner})
        check_lease(written.rowcount, owner)

    async def steps_ended(self, run_id: str, names: Iterable[str], status: StepStatus,
                          error: str | None = None, *, owner: str | None = None) -> None:
        """Mark several steps ``skipped``, ``cancelled`` or ``failed`` at once."""
        await self._write_named(run_id, names, queries.END_STEPS, owner, {
            "status": status.value, "now": utcnow(), "error": clean_text(error)})

    async def add_steps(self, run_id: str, rows: Sequence[tuple[str, str, int]], *,
                        owner: str | None = None) -> None:
        """Add pending steps ``(name, kind, position)`` a run does not have yet (a for_each
        block's instances), committed before this returns; only while ``owner`` holds the
        run's lease, when given."""
        if not rows:
            await self._check_lease(run_id, owner)
            return
        values = pending_steps(run_id, rows)
        if owner is None:
            await self.db.transaction([(queries.INSERT_NEW_STEP, values)])
            return

        def job(conn: Connection) -> None:
            # The lease first: under a lost one nothing is added.
            check_lease(conn.write(queries.HOLDS_LEASE, {"run_id": run_id, "owner": owner}),
                        owner)
            conn.write(queries.INSERT_NEW_STEP, values)

        await self.db.atomically(job)

    async def end_unfinished_steps(self, run_id: str, *, pending: StepStatus,
                                   error: str | None = None, owner: str | None = None) -> None:
        """End every step still ``running`` (as ``cancelled``) or ``pending`` (as
        ``pending``, e.g. ``skipped``) in one commit; under a lost lease, nothing."""
        params = {"run_id": run_id, "now": utcnow(), "error": clean_text(error),
                  "pending": pending.value, "owner": owner,
                  "pending_error": None if pending is StepStatus.SKIPPED else clean_text(error)}
        statements: list[Statement] = []
        if owner is not None:  # counts one row while the lease is ours
            statements.append((queries.HOLDS_LEASE, params))
        statements += [(_leased(queries.END_RUNNING_STEPS, owner), params),
                       (_leased(queries.END_PENDING_STEPS, owner), params)]
        counts = await self.db.transaction(statements)
        check_lease(counts[0], owner)

    async def reset_steps(self, run_id: str, names: Iterable[str], *,
                          owner: str | None = None) -> None:
        """Put unfinished steps back to ``pending`` before a resume."""
        await self._write_named(run_id, names, queries.RESET_STEPS, owner, {})

    async def _write_named(self, run_id: str, names: Iterable[str], statement: str,
                           owner: str | None, values: dict[str, object]) -> None:
        """Run ``statement`` (an UPDATE of steps) on the steps ``names`` of ``run_id``, only
        while ``owner`` holds the run's lease when given (none named: the lease is still
        checked)."""
        names = list(names)
        if not names:
            await self._check_lease(run_id, owner)
            return
        listed, params = queries.in_list("name", names)
        sql = statement + " WHERE run_id = :run_id AND name IN " + listed
        written = await self.db.write(_leased(sql, owner),
                                      {**params, **values, "run_id": run_id, "owner": owner})
        check_lease(written.rowcount, owner)

    async def _check_lease(self, run_id: str, owner: str | None) -> None:
        """A write of nothing still says whether ``owner`` (when given) holds the lease."""
        if owner is not None:
            found = await self.db.read(queries.LEASE_AND_CANCEL, {"run_id": run_id})
            check_lease(int(bool(found) and found[0]["lease_owner"] == owner), owner)
