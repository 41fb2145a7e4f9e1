"""Waiting steps in the store (SPEC §16): recorded waiting with their timers, ended once by
a timer, a decision or a signal, and their runs let go of and woken.

Part of :class:`brain.store.Store`. A waiting step ends only through
:func:`end_wait`, whose first statement changes the step's row only while it is
``waiting``: of two endings that race (two servers taking one timer, a decision
and a timeout, two decisions), exactly one changes it, and only that one wakes the
run. A due timer is deleted by the transaction that takes it, so each is taken by
one server (on PostgreSQL, concurrent takers skip each other's rows).

On PostgreSQL every ending locks rows in one order, so that two never wait for each
other: the timers first (a batch of due timers takes all of its own at once; a signal
deletes the timers of all the steps it ends before it ends any), then each step and its
run, in the order of run id and step name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from brain._clock import utcnow
from brain._errors import RunConflict, StepNotFound
from brain._secrets import scrub
from brain.results import StepStatus, WaitEnd, WaitTimer, clean_text
from brain.store import queries
from brain.store.backend import Connection, UsesBackend, lease_times, utc
from brain.store.children import unfinished_children
from brain.store.reading import resolve
from brain.store.records import check_lease
from brain.store.runs import cancel_tree

#: A decision's sources (SPEC §16).
DECIDERS = ("console", "cli", "api")


#: How a waiting step's key is kept: the SHA-256 of the key as resolved.
WHOLE_KEY = "sha256:"
#: How migration 0011 marked keys kept until then as the digest of their scrubbed text:
#: their real key is known to nobody, so no signal matches them (they end by a timeout or
#: a cancel).
SCRUBBED_KEY = "scrubbed-sha256:"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def key_digest(key: str | None) -> str | None:
    """How a waiting step's key is kept (never the key itself: it may hold a secret, which
    no record may keep): the SHA-256 of the key as resolved, which only a signal sent with
    that very key matches. (A key the run has only scrubbed never gets here: the step fails
    instead, see :mod:`brain.executors.waits`.)"""
    return None if key is None else WHOLE_KEY + _sha256(key)


def signal_key_digests(key: str) -> list[str]:
    """The kept keys a signal sent with ``key`` matches: the digest of ``key`` itself, as
    sent (never of its scrubbed text: ``deploy-***`` is no key anyone waits for)."""
    return [WHOLE_KEY + _sha256(key)]


def approval_end(approved: bool, comment: str | None, by: str) -> WaitEnd:
    """How a decision ends an approval: its output ``true``/``false``, and the decision
    (the comment scrubbed of known secrets)."""
    decision = {"approved": approved, "comment": clean_text(scrub(comment)) or None, "by": by}
    return WaitEnd(StepStatus.SUCCEEDED.value, "true" if approved else "false", decision)


def signal_end(signal: str, waiting_for: Mapping[str, Any] | None, body: str,
               by: str) -> WaitEnd:
    """How a signal ends a ``wait_for`` step: the body (scrubbed) as its output. The key in
    its decision is the step's own, as it shows it (``waiting_for``): the sender's key is
    the same but in clear, and the process that got the signal (``brain signal``) may not
    know the secret it holds to scrub it."""
    key = (waiting_for or {}).get("key")
    return WaitEnd(StepStatus.SUCCEEDED.value, scrub(body) or "",
                   {"signal": signal, "key": scrub(key if isinstance(key, str) else None),
                    "by": by})


def check_approval(run_id: str, step: str, kind: str) -> None:
    """Only an approval takes a decision: :class:`RunConflict` for another kind of step."""
    if kind != "approval":
        raise RunConflict(f"step {step!r} is a {kind} step, not an approval: "
                          f"it takes no decision")


def not_decided(run_id: str, step: str, status: str, decided: bool) -> RunConflict:
    """Why a decision for ``step`` changed nothing: it was decided already, or it is not
    waiting."""
    if decided or status == StepStatus.WAITING.value:
        return RunConflict(f"step {step!r} of run {run_id[:12]}: already decided")
    return RunConflict(f"step {step!r} of run {run_id[:12]} is not waiting for a decision "
                       f"(it is {status})")


def _dumps(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def end_wait(conn: Connection, run_id: str, name: str, end: WaitEnd, now: datetime, *,
             timer_taken: bool = False) -> bool:
    """End a waiting step and wake its run, inside the caller's transaction; ``False`` (and
    nothing changed) when the step is not waiting any more. ``timer_taken``: its timer was
    deleted already (it is what ends it)."""
    decision = None if end.decision is None else {**end.decision, "at": now.isoformat()}
    ok = end.status == StepStatus.SUCCEEDED.value
    # Rows are locked timer, step, run, in that order, by every ending (see the module).
    if not timer_taken:
        conn.write(queries.DROP_TIMER, {"run_id": run_id, "name": name})
    changed = conn.write(queries.END_WAIT, {
        "run_id": run_id, "name": name, "status": end.status, "now": now,
        "output": clean_text(end.text) if ok else None,
        "error": None if ok else clean_text(end.text), "decision": _dumps(decision)})
    if not changed:
        return False
    conn.write(queries.WAKE_RUN, {"run_id": run_id})
    return True


class StepWaits(UsesBackend):
    """Reads and writes of waiting steps and their timers."""

    async def step_waiting(self, run_id: str, name: str, *, inputs: dict[str, Any], tries: int,
                           started_at: datetime, waiting_for: dict[str, Any],
                           signal: str | None = None, key: str | None = None,
                           timer: WaitTimer | None = None, owner: str | None = None) -> None:
        """Record a step ``waiting`` (what for, and its timer) in one commit, while
        ``owner`` holds the run's lease when given."""
        params = {"run_id": run_id, "name": name, "inputs": json.dumps(inputs), "tries": tries,
                  "started_at": started_at, "waiting_for": _dumps(waiting_for),
                  "signal": signal, "key": key_digest(key), "owner": owner}
        sql = queries.STEP_WAITING + (queries.LEASED if owner is not None else "")

        def job(conn: Connection) -> None:
            check_lease(conn.write(sql, params), owner)
            if timer is not None:
                conn.write(queries.SET_TIMER, {"run_id": run_id, "step": name,
                                               "due_at": timer.due, "outcome": timer.end.status,
                                               "value": timer.end.to_json()})

        await self.db.atomically(job)

    async def park_run(self, run_id: str, owner: str, wakes: int) -> bool:
        """Let go of a run whose steps all wait: ``waiting``, no lease. ``False`` (nothing
        changed) when ``owner`` lost the lease, a wait ended since ``wakes`` was read, or a
        cancel was asked for."""
        written = await self.db.write(queries.PARK_RUN, {
            "run_id": run_id, "owner": owner, "wakes": wakes, "no": False})
        return bool(written.rowcount)

    async def run_wakes(self, run_id: str) -> int:
        """How many waits of the run have ended so far (``-1``: no such run)."""
        found = await self.db.read(queries.RUN_WAKES, {"run_id": run_id})
        return int(found[0]["wakes"]) if found else -1

    async def waited_steps(self, run_id: str) -> dict[str, tuple[str, str | None, str | None]]:
        """``{step: (status, output, error)}`` of the run's steps that waited (or wait)."""
        rows = await self.db.read(queries.WAITED_STEPS, {"run_id": run_id})
        return {r["name"]: (r["status"], r["output"], r["error"]) for r in rows}

    async def fire_due_timers(self, now: datetime | None = None, *, run_id: str | None = None,
                              limit: int = 500) -> list[tuple[str, str]]:
        """Take the timers due by ``now`` (of ``run_id`` alone, when given) and end their
        steps, in one transaction; the ``(run id, step)`` of those that ended here. Without
        ``now``, due by the lease clock: the database server's on PostgreSQL, as for leases."""
        sql = queries.take_due_timers(of_run=run_id is not None, by_lease_clock=now is None)
        now = now or utcnow()
        params = {"now": now, "limit": limit, "run_id": run_id, **lease_times(0, now)}

        def job(conn: Connection) -> list[tuple[str, str]]:
            ended = []
            for row in sorted(conn.read(sql, params), key=lambda r: (r["run_id"], r["step"])):
                if end_wait(conn, row["run_id"], row["step"], WaitEnd.from_json(row["value"]),
                            now, timer_taken=True):
                    ended.append((row["run_id"], row["step"]))
                    # A child step that timed out cancels its child (SPEC §22).
                    cancel_tree(conn, unfinished_children(conn, row["run_id"], row["step"]),
                                now)
            return ended

        return await self.db.atomically(job)

    async def next_timer(self, run_id: str | None = None) -> datetime | None:
        """When the next timer falls due (of ``run_id`` alone, when given), if any."""
        if run_id is None:
            found = await self.db.read(queries.NEXT_TIMER)
        else:
            found = await self.db.read(queries.NEXT_TIMER_OF_RUN, {"run_id": run_id})
        value = found[0]["due_at"] if found else None
        return None if value is None else utc(value)

    async def decide(self, run_id: str, step: str, *, approved: bool, comment: str | None = None,
                     by: str = "api") -> dict[str, Any]:
        """Approve or reject a waiting ``approval`` step, committed before this returns; the
        decision stored. :class:`RunConflict` for a step already decided or not waiting."""
        full = await resolve(self.db, run_id)
        end = approval_end(approved, comment, by)
        now = utcnow()

        def job(conn: Connection) -> dict[str, Any]:
            found = conn.read(queries.WAITING_STEP, {"run_id": full, "name": step})
            if not found:
                raise StepNotFound(f"run {full[:12]} has no step {step!r}")
            row = found[0]
            check_approval(full, step, row["kind"])
            if row["status"] != StepStatus.WAITING.value or not end_wait(conn, full, step, end,
                                                                         now):
                raise not_decided(full, step, row["status"], bool(row["decision"]))
            return {**(end.decision or {}), "at": now.isoformat()}

        return await self.db.atomically(job)

    async def send_signal(self, signal: str, key: str | None = None, body: str = "", *,
                          by: str = "api") -> list[tuple[str, str]]:
        """End every step waiting for ``signal`` with ``key`` (``None`` matches steps that
        wait for a signal without one), its output ``body``, in one commit; their
        ``(run id, step)``. Keys are matched by digest (see :func:`key_digest`)."""
        params: dict[str, Any] = {"signal": signal}
        if key is None:
            sql = queries.SIGNALLED_STEPS + " AND wait_key IS NULL"
        else:
            digests = signal_key_digests(key)
            params.update((f"key{i}", d) for i, d in enumerate(digests))
            sql = queries.SIGNALLED_STEPS + " AND wait_key IN (" + ", ".join(
                f":key{i}" for i in range(len(digests))) + ")"
        now = utcnow()

        def job(conn: Connection) -> list[tuple[str, str]]:
            matched = sorted((r["run_id"], r["name"], r["waiting_for"])
                             for r in conn.read(sql, params))
            for run_id, name, _ in matched:  # every timer first (see the module)
                conn.write(queries.DROP_TIMER, {"run_id": run_id, "name": name})
            return [(run_id, name) for run_id, name, waiting_for in matched
                    if end_wait(conn, run_id, name,
                                signal_end(signal, json.loads(waiting_for or "{}"), body, by),
                                now, timer_taken=True)]

        return await self.db.atomically(job)

    async def count_waiting(self) -> list[tuple[str, str, int]]:
        """``(workflow, step kind, runs)``: how many runs wait, by what their steps wait for."""
        rows = await self.db.read(queries.WAITING_KINDS)
        return [(r["workflow"], r["kind"], int(r["n"])) for r in rows]

    async def decisions_waiting(self, limit: int = 100) -> list[dict[str, Any]]:
        """The approval steps waiting for a decision, oldest first: ``run_id``, ``workflow``,
        ``step``, ``prompt``, ``since``, ``timeout_at``."""
        rows = await self.db.read(queries.DECISIONS_WAITING, {"limit": limit})
        found = []
        for r in rows:
            waiting_for = json.loads(r["waiting_for"] or "{}")
            found.append({"run_id": r["run_id"], "workflow": r["workflow"], "step": r["name"],
                          "prompt": waiting_for.get("prompt", ""), "since": r["started_at"],
                          "timeout_at": waiting_for.get("timeout_at")})
        return found

