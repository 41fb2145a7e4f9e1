"""Reading runs: by id or prefix, in lists, and what the runner reads back to resume.

Part of :class:`brain.store.Store`. The module's functions take a backend, so
the other parts (cancelling, retrying) read runs the same way.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from brain._errors import RunNotFound
from brain.results import RunResult, StepState
from brain.store import queries
from brain.store.backend import Backend, UsesBackend, lease_times
from brain.store.base import RunRecord, StepProcess
from brain.store.records import run_record, run_result

_HEX = frozenset("0123456789abcdef")


async def resolve(db: Backend, run_id: str) -> str:
    """The full id of the one run whose id is or starts with ``run_id``."""
    if not run_id or len(run_id) > 32 or not _HEX.issuperset(run_id.lower()):
        raise RunNotFound(f"no run {run_id[:40]!r}: run ids are 32 hexadecimal digits "
                          f"(a unique prefix will do)")
    found = await db.read(queries.RUN_IDS_LIKE, {"pattern": run_id.lower() + "%"})
    if not found:
        raise RunNotFound(f"no run {run_id!r}")
    if len(found) > 1:
        raise RunNotFound(f"run id prefix {run_id!r} is ambiguous: give more characters")
    return str(found[0]["id"])


async def read_run(db: Backend, full_id: str, *, with_steps: bool,
                   asked: str | None = None) -> RunResult:
    """The run whose full id is ``full_id``, with its steps when asked (``asked``: the id
    as the caller gave it, for the message when there is no such run)."""
    found = await db.read(queries.RUN_BY_ID, {"run_id": full_id})
    if not found:
        raise RunNotFound(f"no run {asked or full_id!r}")
    step_rows = []
    if with_steps:
        step_rows = await db.read(queries.STEPS_IN_ORDER, {"run_id": full_id})
    return run_result(found[0], step_rows)


async def read_record(db: Backend, run_id: str) -> RunRecord | None:
    """The run's own record, or ``None``."""
    found = await db.read(queries.RUN_BY_ID, {"run_id": run_id})
    return run_record(found[0]) if found else None


class RunReading(UsesBackend):
    """Reads of runs and steps."""

    async def resolve_id(self, run_id: str) -> str:
        """The full id of the one run whose id is or starts with ``run_id``."""
        return await resolve(self.db, run_id)

    async def get_run(self, run_id: str, *, with_steps: bool = True) -> RunResult:
        """One run by id or unique prefix, with its steps in call order."""
        db = self.db
        # A whole id needs no look-up of what it starts: one round trip fewer per run.
        whole = len(run_id) == 32 and _HEX.issuperset(run_id.lower())
        return await read_run(db, run_id.lower() if whole else await resolve(db, run_id),
                              with_steps=with_steps, asked=run_id)

    async def list_runs(self, *, workflow: str | None = None, status: str | None = None,
                        limit: int = 20, event: str | None = None,
                        offset: int = 0, parent: str | None = None) -> list[RunResult]:
        """The newest runs first, without their steps (``event``: only runs of that trigger
        kind; ``offset``: skip that many, for pages; ``parent``: only the child runs of that
        run, by its full id)."""
        where: list[str] = []
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        for column, value in (("trigger_event", event), ("workflow", workflow),
                              ("status", status), ("parent_run_id", parent)):
            if value:
                where.append(f"{column} = :{column}")
                params[column] = value
        sql = (queries.SELECT_RUN + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY created_at DESC LIMIT :limit OFFSET :offset")
        return [run_result(r, []) for r in await self.db.read(sql, params)]

    async def run_row(self, run_id: str) -> RunRecord | None:
        """The run's own record (for the runner: lease, hash, trigger, previous run)."""
        return await read_record(self.db, run_id)

    async def latest_succeeded_run(self, workflow: str, before: datetime) -> str | None:
        """The id of ``workflow``'s latest succeeded run that ended before ``before``."""
        found = await self.db.read(queries.LATEST_SUCCEEDED,
                                   {"workflow": workflow, "before": before})
        return str(found[0]["id"]) if found else None

    async def step_outputs(self, run_id: str) -> dict[str, str]:
        """``{step name: output}`` of a run's succeeded steps."""
        rows = await self.db.read(queries.STEP_OUTPUTS, {"run_id": run_id})
        return {r["name"]: r["output"] or "" for r in rows}

    async def step_states(self, run_id: str) -> dict[str, tuple[str, int]]:
        """``{step name: (status, tries)}`` for a run."""
        rows = await self.db.read(queries.STEP_STATES, {"run_id": run_id})
        return {r["name"]: (r["status"], r["tries"]) for r in rows}

    async def step_processes(self, run_id: str) -> list[StepProcess]:
        """The process groups a run's steps started (the latest try's of each step)."""
        rows = await self.db.read(queries.STEP_PROCESSES, {"run_id": run_id})
        return [StepProcess(r["name"], r["process_group"], r["process_started"],
                            r["process_machine"] or "")
                for r in rows if r["process_started"] is not None]

    async def recent_activity(self, ended_after: datetime, limit: int = 500
                              ) -> list[tuple[RunResult, dict[str, StepState]]]:
        """Runs running now, the newest ``limit`` queued or ended after ``ended_after``,
        each with ``{step: (kind, status, tries, progress)}`` (``progress``: its stored
        JSON): what a watcher of changes compares from one look to the next (three
        queries)."""
        db = self.db
        # Every running run (executors take the oldest first, so a long queue must not
        # push them out), then the newest queued and recently ended ones.
        found = await db.read(queries.RUNNING_RUNS)
        found += await db.read(queries.QUEUED_OR_ENDED_AFTER,
                               {"ended_after": ended_after, "limit": limit})
        if not found:
            return []
        ids = [r["id"] for r in found]
        listed, params = queries.in_list("run", ids)
        by_run: dict[str, dict[str, StepState]] = {i: {} for i in ids}
        for r in await db.read(queries.STEP_KINDS_OF + listed, params):
            by_run[r["run_id"]][r["name"]] = (r["kind"], r["status"], r["tries"], r["progress"])
        return [(run_result(r, []), by_run[r["id"]]) for r in found]

    async def expired_runs(self) -> list[str]:
        """Ids of ``running`` runs whose lease has expired (their executor died)."""
        rows = await self.db.read(queries.EXPIRED_RUNS, lease_times())
        return [str(r["id"]) for r in rows]
