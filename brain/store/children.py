"""Child runs in the store (SPEC §22): queued by a step of another run, found again by
that step's try, and ending that step's wait when they end.

Part of :class:`brain.store.Store`. A child step's try queues its child and records
itself ``waiting`` in one transaction; the unique index on ``(parent_run_id,
parent_step, parent_try)`` makes a try started again find its child instead of
queuing a second. A child's end — :meth:`~brain.store.runs.RunLifecycle.finish_run`,
a cancel that ends it at once, a queued run failed — ends its parent's wait in the
same transaction (:func:`end_parent_wait`) and wakes the parent, as a decision or a
signal does (:mod:`brain.store.waits`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from brain._clock import utcnow
from brain.results import RunStatus, StepStatus, WaitTimer, clean_text
from brain.store import queries
from brain.store.backend import Connection, Row, UsesBackend, utc
from brain.store.base import QueuedRun
from brain.store.records import check_lease, queued_run_rows, run_statements

#: How deep child runs may nest: a run nobody queued is depth 0, its children 1, ...
MAX_DEPTH = 16


@dataclass(frozen=True)
class ChildRun:
    """A child run as its parent shows it: its id, workflow, status, and the step (and
    try) of the parent that queued it."""

    run_id: str
    workflow: str
    status: str
    step: str
    tries: int
    created_at: datetime


def child_step_end(child_id: str, status: str, output: str | None,
                   error: str | None) -> tuple[str, str]:
    """How a child's end ends its parent's step: ``(status, text)``. Succeeded: the
    child's output (its JSON text when it is not text; ``null`` when it returned
    nothing). Failed or cancelled: ``child run ID failed: ERROR``."""
    if status == RunStatus.SUCCEEDED.value:
        if output is None:
            return StepStatus.SUCCEEDED.value, "null"
        try:
            value = json.loads(output)
        except ValueError:
            return StepStatus.SUCCEEDED.value, output
        return StepStatus.SUCCEEDED.value, value if isinstance(value, str) else output
    return StepStatus.FAILED.value, f"child run {child_id} failed: {error or status}"


def end_parent_wait(conn: Connection, child: Row, status: str, output: str | None,
                    error: str | None, now: datetime) -> bool:
    """Inside the transaction that ends ``child`` (a row with ``id``, ``parent_run_id``,
    ``parent_step``, ``parent_try``): end its parent's step, if that step still waits for
    this very child, and wake the parent. ``True`` when it did."""
    parent = child.get("parent_run_id")
    if not parent:
        return False
    step_status, text = child_step_end(child["id"], status, output, error)
    ok = step_status == StepStatus.SUCCEEDED.value
    ids = {"run_id": parent, "name": child["parent_step"], "try": child["parent_try"],
           "no": False}
    # Rows are locked timer, step, run, in that order, as every ending does (store.waits).
    conn.write(queries.DROP_CHILD_TIMER, ids)
    changed = conn.write(queries.END_CHILD_WAIT, {
        **ids, "status": step_status, "now": now, "decision": None,
        "output": clean_text(text) if ok else None, "error": None if ok else clean_text(text)})
    if not changed:
        return False
    conn.write(queries.WAKE_RUN, {"run_id": parent})
    return True


def end_parent_of(conn: Connection, run_id: str, now: datetime) -> bool:
    """:func:`end_parent_wait` for a run just ended by a statement that did not return its
    row (a cancel, a queued run failed): its row is read here, in the same transaction."""
    found = conn.read(queries.CHILD_ROW, {"run_id": run_id})
    if not found or not found[0]["parent_run_id"]:
        return False
    row = found[0]
    if row["status"] not in (RunStatus.SUCCEEDED.value, RunStatus.FAILED.value,
                             RunStatus.CANCELLED.value):
        return False
    return end_parent_wait(conn, row, row["status"], row["output"], row["error"], now)


def unfinished_children(conn: Connection, run_id: str, step: str | None = None) -> list[str]:
    """The ids of ``run_id``'s children (of ``step`` alone, when given) not ended yet."""
    if step is None:
        rows = conn.read(queries.UNFINISHED_CHILDREN, {"run_id": run_id})
    else:
        rows = conn.read(queries.UNFINISHED_CHILDREN_OF_STEP, {"run_id": run_id, "step": step})
    return [str(r["id"]) for r in rows]


class ChildRuns(UsesBackend):
    """Queuing a step's child run, and reading a run's children."""

    async def start_child(self, parent_run_id: str, step: str, tries: int, child: QueuedRun, *,
                          inputs: Mapping[str, Any], started_at: datetime,
                          waiting_for: Mapping[str, Any], timer: WaitTimer | None = None,
                          owner: str | None = None,
                          max_depth: int = MAX_DEPTH) -> tuple[str, bool] | None:
        """Queue ``child`` for try ``tries`` of step ``step`` of ``parent_run_id`` and record
        the step ``waiting`` for it (``waiting_for`` gets the child's ``run_id``), with its
        timer, in one transaction, while ``owner`` holds the parent's lease when given.

        Returns ``(child run id, queued now)``: a try that queued its child before gets
        that child back, and nothing is queued twice. ``None`` (and nothing written) when
        the child would be deeper than ``max_depth``.
        """
        now = utcnow()

        def job(conn: Connection) -> tuple[str, bool] | None:
            found = conn.read(queries.RUN_DEPTH, {"run_id": parent_run_id})
            depth = (int(found[0]["depth"] or 0) if found else 0) + 1
            if depth > max_depth:
                return None
            ids = {"parent_run_id": parent_run_id, "parent_step": step, "parent_try": tries}
            again = conn.read(queries.CHILD_OF_TRY, ids)
            child_id, created = (str(again[0]["id"]), False) if again else (child.run_id, True)
            if created:
                row, step_values = queued_run_rows(
                    child.run_id, child.workflow, child.definition_hash, child.trigger,
                    child.step_rows, now, child.params, trigger_key="parent",
                    concurrency_key=child.concurrency_key, depth=depth,
                    trace_context=child.trace_context, step_prints=child.step_prints,
                    version=child.version, **ids)
                for sql, params in run_statements(row, step_values):
                    conn.write(sql, params)
            shown = {**waiting_for, "run_id": child_id}
            sql = queries.STEP_WAITING + (queries.LEASED if owner is not None else "")
            check_lease(conn.write(sql, {
                "run_id": parent_run_id, "name": step, "inputs": json.dumps(dict(inputs)),
                "tries": tries, "started_at": started_at, "waiting_for": json.dumps(shown),
                "signal": None, "key": None, "owner": owner}), owner)
            if timer is not None:
                conn.write(queries.SET_TIMER, {"run_id": parent_run_id, "step": step,
                                               "due_at": timer.due, "outcome": timer.end.status,
                                               "value": timer.end.to_json()})
            return child_id, created

        return await self.db.atomically(job)

    async def children_of(self, run_id: str) -> list[ChildRun]:
        """The runs ``run_id``'s steps queued, oldest first."""
        rows = await self.db.read(queries.CHILDREN_OF, {"run_id": run_id})
        return [ChildRun(str(r["id"]), r["workflow"], r["status"], r["parent_step"],
                         int(r["parent_try"] or 0), utc(r["created_at"])) for r in rows]

    async def waited_step(self, run_id: str, name: str) -> tuple[str, str | None, str | None]:
        """``(status, output, error)`` of one step of a run (``("", None, None)``: none)."""
        rows = await self.db.read(queries.WAITED_STEPS + " AND name = :name",
                                  {"run_id": run_id, "name": name})
        if not rows:
            return "", None, None
        return rows[0]["status"], rows[0]["output"], rows[0]["error"]

