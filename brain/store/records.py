"""Rows to write and rows read: a new run's rows, and a run's rows as the records callers get.

Every part of the store builds the rows of a new run here (so a queued run,
a failure handler and a retry look alike), and turns rows read back into
:class:`~brain.results.RunResult` and :class:`~brain.store.base.RunRecord`.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from brain._errors import LeaseLost
from brain._secrets import scrub
from brain.results import (
    RunResult,
    RunStatus,
    StepResult,
    StepStatus,
    TriggerData,
    clean_text,
    step_order,
)
from brain.store import queries
from brain.store.backend import Backend, Connection, Row, Statement
from brain.store.base import QueuedRun, RunRecord, stored_trigger


def queued_run_rows(run_id: str, workflow: str, definition_hash: str, trigger: TriggerData,
                    step_rows: Sequence[tuple[str, str]], now: datetime,
                    params: Mapping[str, Any] | None = None,
                    **columns: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The rows of a new run, ``queued``, and of its pending steps (``(name, kind)`` in call
    order); the trigger and the parameters as every store records them. ``columns`` adds or
    overrides run columns (``trigger_key``, ``previous_run_id``...); every column has a
    value."""
    trigger = stored_trigger(trigger)
    columns.setdefault("params", params_text(params))
    row: dict[str, Any] = dict.fromkeys(queries.RUN_COLUMNS)
    row.update(id=run_id, workflow=workflow, definition_hash=definition_hash,
               status=RunStatus.QUEUED.value, trigger_event=trigger.event,
               trigger_body=trigger.body, trigger_path=trigger.path,
               trigger_headers=json.dumps(trigger.headers), created_at=now,
               cancel_requested=False, **columns)
    return row, pending_steps(run_id, [(name, kind, i) for i, (name, kind)
                                       in enumerate(step_rows)])


def pending_steps(run_id: str, rows: Sequence[tuple[str, str, int]]) -> list[dict[str, Any]]:
    """Rows of pending steps ``(name, kind, position)`` of a run."""
    return [step_row(run_id=run_id, name=name, position=position, kind=kind,
                     status=StepStatus.PENDING.value, tries=0)
            for name, kind, position in rows]


def step_row(**values: Any) -> dict[str, Any]:
    """A step row with every column (those not given ``NULL``)."""
    row: dict[str, Any] = dict.fromkeys(queries.STEP_COLUMNS)
    row.update(values)
    return row


def run_statements(row: dict[str, Any], step_values: list[dict[str, Any]],
                   insert_run: str = queries.INSERT_RUN) -> list[Statement]:
    """The statements that insert a run and its steps."""
    statements: list[Statement] = [(insert_run, row)]
    if step_values:
        statements.append((queries.INSERT_STEP, step_values))
    return statements


async def write_new_run(db: Backend, row: dict[str, Any], step_values: list[dict[str, Any]],
                        insert_run: str = queries.INSERT_RUN, *,
                        before: Sequence[Statement] = ()) -> None:
    """Insert a new run and its pending steps, committed together (after ``before``, in
    the same transaction). Where the database takes an ``INSERT`` inside a ``WITH`` and
    nothing comes before, that is one statement: one round trip instead of four."""
    if not before and db.dialect.inserts_in_with and step_values and all(
            s["status"] == StepStatus.PENDING.value and not s["tries"] for s in step_values):
        await db.write(queries.WITH_PENDING_STEPS[insert_run], {
            **row, "step_names": [s["name"] for s in step_values],
            "step_positions": [s["position"] for s in step_values],
            "step_kinds": [s["kind"] for s in step_values]})
        return
    await db.transaction([*before, *run_statements(row, step_values, insert_run)])


def queue_statements(queued: Sequence[QueuedRun], now: datetime) -> list[Statement]:
    """The statements that queue ``queued`` runs (failure handlers) with their steps."""
    statements: list[Statement] = []
    for q in queued:
        row, step_values = queued_run_rows(q.run_id, q.workflow, q.definition_hash, q.trigger,
                                           q.step_rows, now, q.params,
                                           trigger_key=q.trigger.event,
                                           concurrency_key=q.concurrency_key,
                                           step_prints=q.step_prints, version=q.version,
                                           trace_context=q.trace_context)
        statements += run_statements(row, step_values)
    return statements


def insert_queued(conn: Connection, queued: Sequence[QueuedRun], now: datetime) -> None:
    """Queue ``queued`` runs inside the caller's transaction."""
    for sql, params in queue_statements(queued, now):
        conn.write(sql, params)


def params_text(params: Mapping[str, Any] | None) -> str | None:
    """A run's parameters as stored: JSON, known secrets scrubbed from every string; ``None``
    (read back as ``{}``) for none."""
    if not params:
        return None
    return json.dumps(scrub_json(dict(params)), ensure_ascii=False, separators=(",", ":"))


def scrub_json(value: Any) -> Any:
    """A JSON value with every known secret scrubbed from its strings, object keys included."""
    if isinstance(value, str):
        return clean_text(scrub(value)) or ""
    if isinstance(value, dict):
        return {scrub_json(k) if isinstance(k, str) else k: scrub_json(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_json(v) for v in value]
    return value


def params_of(row: Row) -> dict[str, Any]:
    """The parameters a run row records (``{}`` for none)."""
    found = _json(row.get("params"))
    return found if isinstance(found, dict) else {}


def check_lease(changed: int, owner: str | None) -> None:
    """A lease-conditional write (``owner`` given) that changed nothing means the lease is
    gone: :class:`LeaseLost`."""
    if owner is not None and not changed:
        raise LeaseLost("this executor no longer holds the run's lease")


def trigger_of(row: Row) -> TriggerData:
    """The trigger a run row records."""
    return TriggerData(event=row["trigger_event"], body=row["trigger_body"],
                       path=row["trigger_path"],
                       headers=json.loads(row["trigger_headers"] or "{}"))


def run_record(row: Row) -> RunRecord:
    """A run row as the runner reads it."""
    return RunRecord(id=row["id"], workflow=row["workflow"],
                     definition_hash=row["definition_hash"], status=row["status"],
                     trigger=trigger_of(row), error=row["error"],
                     previous_run_id=row["previous_run_id"], created_at=row["created_at"],
                     started_at=row["started_at"], ended_at=row["ended_at"],
                     cancel_requested=bool(row["cancel_requested"]),
                     lease_owner=row["lease_owner"], lease_expires_at=row["lease_expires_at"],
                     retry_of=row["retry_of"], concurrency_key=row.get("concurrency_key"),
                     params=params_of(row), parent_run_id=row.get("parent_run_id"),
                     parent_step=row.get("parent_step"), step_prints=row.get("step_prints"),
                     version=row.get("version"), continued_on=continued_on_of(row),
                     trace_context=row.get("trace_context"))


def continued_on_of(row: Row) -> tuple[str, ...]:
    """The versions a run continued on after its workflow changed (SPEC §24), oldest first."""
    found = _json(row.get("continued_on"))
    return tuple(str(v) for v in found) if isinstance(found, list) else ()


def parent_of(row: Row) -> dict[str, str] | None:
    """A child run's parent as its run JSON shows it (SPEC §22): ``{"run_id", "step"}``."""
    parent = row.get("parent_run_id")
    return None if not parent else {"run_id": parent, "step": row.get("parent_step") or ""}


def _json(text: str | None) -> Any:
    return json.loads(text) if text else None


def _cached(text: str | None) -> dict[str, Any]:
    """A cache hit's mark (SPEC §26) as the step's ``cached`` and ``saved_usage``."""
    found = _json(text)
    if not isinstance(found, dict):
        return {}
    saved = found.get("usage")
    return {"cached": True, "saved_usage": saved if isinstance(saved, dict) else None}


def run_result(row: Row, step_rows: Sequence[Row]) -> RunResult:
    """A run row and its step rows as the result callers get (steps in call order)."""
    steps = {
        s["name"]: StepResult(name=s["name"], kind=s["kind"], status=StepStatus(s["status"]),
                              inputs=json.loads(s["inputs"]) if s["inputs"] else {},
                              output=s["output"], error=s["error"], tries=s["tries"],
                              stderr=s["stderr"], started_at=s["started_at"],
                              ended_at=s["ended_at"], waiting_for=_json(s.get("waiting_for")),
                              decision=_json(s.get("decision")), usage=_json(s.get("usage")),
                              progress=_json(s.get("progress")), **_cached(s.get("cached")))
        for s in sorted(step_rows, key=lambda s: step_order(s["name"], s["position"]))}
    return RunResult(run_id=row["id"], workflow=row["workflow"], status=RunStatus(row["status"]),
                     error=row["error"], trigger=trigger_of(row), created_at=row["created_at"],
                     started_at=row["started_at"], ended_at=row["ended_at"],
                     previous_run_id=row["previous_run_id"], retry_of=row["retry_of"],
                     concurrency_key=row.get("concurrency_key"), params=params_of(row),
                     output=_json(row.get("output")), parent=parent_of(row),
                     version=row.get("version"), continued_on=list(continued_on_of(row)),
                     steps=steps)


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def retry_trace(stored: str | None) -> str | None:
    """The trace context of a retry of a run whose own is ``stored`` (SPEC §25): the same
    trace, a new root span whose parent is the original's root, so the retry's spans sit
    beside the original's in one trace. ``None`` when the original has none (or not one
    that reads: a run is never failed by its trace). Plain W3C text: nothing of
    OpenTelemetry is needed for it, so a retry queued with traces off keeps its trace too."""
    if not stored:
        return None
    try:
        root = json.loads(stored)["root"]
        found = _TRACEPARENT.fullmatch(root["traceparent"])
    except (ValueError, KeyError, TypeError):
        return None
    if found is None:
        return None
    trace_id, _, flags = found.groups()
    new_root = {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-{flags}"}
    if isinstance(root.get("tracestate"), str):
        new_root["tracestate"] = root["tracestate"]
    parent = {k: v for k, v in root.items() if k in ("traceparent", "tracestate")}
    return json.dumps({"root": new_root, "parent": parent}, separators=(",", ":"))
