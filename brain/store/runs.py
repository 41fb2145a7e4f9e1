"""A run's life in the store: created, claimed under a lease, renewed, restamped, ended,
cancelled, retried.

Part of :class:`brain.store.Store`. Leases are timed by the lease clock of
the backend's :class:`~brain.store.backend.Dialect` (the server's on
PostgreSQL).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from brain._clock import utcnow
from brain._errors import WORKFLOW_CHANGED, RunConflict, RunNotFound
from brain._secrets import scrub
from brain.dsl.fingerprint import REMOVED
from brain.results import FINISHED_RUN, RunResult, RunStatus, StepStatus, TriggerData, clean_text
from brain.store import queries
from brain.store.backend import Connection, Statement, UsesBackend, lease_times
from brain.store.base import QueuedRun, RunRecord
from brain.store.children import end_parent_of, end_parent_wait, unfinished_children
from brain.store.reading import read_record, read_run, resolve
from brain.store.records import (
    check_lease,
    insert_queued,
    pending_steps,
    queued_run_rows,
    run_record,
    run_statements,
    scrub_json,
    step_row,
    write_new_run,
)

_FINISHED = frozenset(s.value for s in FINISHED_RUN)


class RunLifecycle(UsesBackend):
    """Writes of a run's own row, from creation to its end."""

    async def create_run(self, *, run_id: str, workflow: str, definition_hash: str,
                         trigger: TriggerData, step_rows: Sequence[tuple[str, str]],
                         owner: str | None = None, lease_seconds: float = 30,
                         previous_run_id: str | None = None,
                         params: Mapping[str, Any] | None = None,
                         trace_context: str | None = None,
                         step_prints: str | None = None,
                         version: str | None = None) -> datetime:
        """Insert a run and its pending steps (``(name, kind)`` in call order) in one commit.

        With ``owner`` the run starts ``running`` under that owner's lease,
        else it is ``queued``. ``params``: its validated parameters; ``step_prints`` and
        ``version``: what its steps do and its file's version (SPEC §24). Returns the
        creation time.
        """
        now = utcnow()
        row, step_values = queued_run_rows(run_id, workflow, definition_hash, trigger, step_rows,
                                           now, params, previous_run_id=previous_run_id,
                                           trace_context=trace_context,
                                           step_prints=step_prints, version=version)
        insert = queries.INSERT_RUN
        if owner is not None:
            row.update(status=RunStatus.RUNNING.value, started_at=now, lease_owner=owner,
                       **lease_times(lease_seconds, now))
            insert = queries.INSERT_LEASED_RUN
        await write_new_run(self.db, row, step_values, insert)
        return now

    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        """Take a queued run, or a running one whose lease expired; ``True`` if taken."""
        written = await self.db.write(queries.CLAIM_RUN, {
            "run_id": run_id, "owner": owner, "now": utcnow(), **lease_times(lease_seconds)})
        return bool(written.rowcount)

    async def set_previous_run(self, run_id: str, previous_run_id: str | None, *,
                               owner: str | None = None) -> None:
        """Record which run ``{previous.X}`` reads from (under ``owner``'s lease, when given)."""
        sql = queries.SET_PREVIOUS + (queries.OWNED if owner is not None else "")
        written = await self.db.write(sql, {"run_id": run_id, "previous": previous_run_id,
                                            "owner": owner})
        check_lease(written.rowcount, owner)

    async def heartbeat(self, run_id: str, owner: str,
                        lease_seconds: float | None) -> tuple[bool, bool]:
        """Renew the lease (when ``lease_seconds``); return (still ours, cancel requested).

        Not retried: the next heartbeat is the retry."""
        db = self.db
        if lease_seconds is not None:
            await db.write(queries.RENEW_LEASE,
                           {"run_id": run_id, "owner": owner, **lease_times(lease_seconds)},
                           retry=False)
        found = await db.read(queries.LEASE_AND_CANCEL, {"run_id": run_id}, retry=False)
        if not found:
            return False, True
        return found[0]["lease_owner"] == owner, bool(found[0]["cancel_requested"])

    async def restamp_run(self, run_id: str, definition_hash: str,
                          step_rows: Sequence[tuple[str, str]], *, owner: str,
                          step_prints: str | None = None, version: str | None = None) -> bool:
        """Give a queued run that ``owner`` has just taken another definition of its
        workflow: the definition's hash, fingerprints and version (SPEC §24), and pending
        rows for its steps instead of the old ones, in one transaction. ``False`` (and
        nothing changed) if a step of it has started after all."""
        _, step_values = queued_run_rows(run_id, "", definition_hash, TriggerData(), step_rows,
                                         utcnow())
        ids = {"run_id": run_id}

        def job(conn: Connection) -> bool:
            if conn.read(queries.STARTED_STEPS, ids)[0]["n"]:
                return False
            changed = conn.write(queries.SET_DEFINITION, {
                **ids, "owner": owner, "definition_hash": definition_hash,
                "step_prints": step_prints, "version": version})
            check_lease(changed, owner)
            conn.write(queries.DELETE_STEPS, ids)
            if step_values:
                conn.write(queries.INSERT_STEP, step_values)
            return True

        return await self.db.atomically(job)

    async def continue_on(self, run_id: str, *, owner: str, definition_hash: str,
                          step_prints: str, continued_on: Sequence[str],
                          fresh: Sequence[tuple[str, str, int]],
                          removed: Sequence[str]) -> None:
        """A run that ``owner`` executes goes on with another definition of its workflow
        after a change (SPEC §24), in one transaction: the run's definition hash,
        fingerprints and the versions it continued on (``continued_on``, the new one last)
        in one statement; its steps not started yet written again as the definition has
        them now (``fresh``: ``(name, kind, position)``, pending); the pending steps it no
        longer has (``removed``) end skipped. :class:`~brain.LeaseLost` (nothing changed)
        when ``owner`` no longer holds the lease."""
        import json

        now = utcnow()
        ids = {"run_id": run_id}
        rows = pending_steps(run_id, fresh)

        def job(conn: Connection) -> None:
            check_lease(conn.write(queries.CONTINUE_ON, {
                **ids, "owner": owner, "definition_hash": definition_hash,
                "step_prints": step_prints,
                "continued_on": json.dumps(list(continued_on)) if continued_on else None}),
                owner)
            if rows:
                conn.write(queries.DELETE_PENDING_STEP, [{**ids, "name": r["name"]}
                                                         for r in rows])
                conn.write(queries.INSERT_NEW_STEP, rows)
            if removed:
                conn.write(queries.SKIP_PENDING_STEP, [
                    {**ids, "name": n, "error": REMOVED, "now": now} for n in removed])

        await self.db.atomically(job)

    async def finish_run(self, run_id: str, status: RunStatus, error: str | None = None, *,
                         owner: str | None = None,
                         then_queue: Sequence[QueuedRun] = (),
                         output: str | None = None) -> datetime:
        """Record the run's end and release its lease (only ``owner``'s, when given).

        ``then_queue`` (failure handlers) are queued in the same transaction: never one
        without the other, and never twice. ``output``: what the workflow returned, as
        JSON text (SPEC §21).
        """
        now = utcnow()
        sql = (queries.FINISH_RUN + (queries.OWNED if owner is not None else "")
               + queries.RETURNING_PARENT)
        message, stored = clean_text(error), _scrubbed_json_text(output)
        params = {"run_id": run_id, "status": status.value, "error": message,
                  "now": now, "owner": owner, "output": stored}

        def job(conn: Connection) -> None:
            ended = conn.read(sql, params)
            check_lease(len(ended), owner)
            # A child's end ends its parent's wait; a run's end cancels its children still
            # going (SPEC §22): both in this transaction.
            if ended and ended[0]["parent_run_id"]:
                end_parent_wait(conn, ended[0], status.value, stored, message, now)
            if ended:
                cancel_tree(conn, unfinished_children(conn, run_id), now)
            insert_queued(conn, then_queue, now)

        await self.db.atomically(job)
        return now

    async def request_cancel(self, run_id: str) -> tuple[RunResult, bool]:
        """Ask for a run to stop; return the run and whether it was still queued or running.

        A run nobody executes is cancelled at once: a queued one, and a running one
        whose executor is gone (its lease expired, or its owner is a process of this
        machine that has died): its unfinished steps become ``cancelled`` and its
        lease is released. A run with a live executor is only marked
        cancel-requested; that executor stops it within a second.
        """
        db = self.db
        full = await resolve(db, run_id)
        row = await read_record(db, full)
        if row is None:
            raise RunNotFound(f"no run {run_id!r}")
        if row.status in _FINISHED:
            return await read_run(db, full, with_steps=False), False
        # Its children still going, and theirs, are cancelled with it (SPEC §22).
        await db.atomically(lambda conn: cancel_tree(conn, [full], utcnow()))
        return await read_run(db, full, with_steps=False), True

    async def retry_run(self, run_id: str, *, definition_hash: str | None = None,
                        rerun: Collection[str] | None = None) -> str:
        """Queue a new run that retries ``run_id`` (failed or cancelled); return its id.

        Same workflow, trigger and ``{previous.X}`` run; ``retry_of`` points at the
        original. Steps that succeeded there are copied as they ended (outputs,
        inputs, tries and times) and do not run again; the others wait to run.
        With ``definition_hash``, a workflow whose definition changed since is a
        :class:`RunConflict`. ``rerun`` (``brain retry --from``, SPEC §24): these steps (and
        their ``for_each`` instances) run again even where they succeeded, and a run that
        succeeded may be retried too.

        A run is retried once: a second retry of it is :class:`AlreadyRetried` (naming
        the run that retries it), checked in the transaction that queues the retry, so
        of two concurrent retries one queues and the other is refused. (On PostgreSQL
        the original's row is locked first; SQLite's writes take turns anyway.)
        """
        db = self.db
        full = await resolve(db, run_id)
        now = utcnow()
        read_original = queries.RUN_BY_ID + (queries.LOCK_ROW if db.dialect.name == "postgresql"
                                             else "")

        def job(conn: Connection) -> str:
            found = conn.read(read_original, {"run_id": full})
            if not found:
                raise RunNotFound(f"no run {run_id!r}")
            original = run_record(found[0])
            _check_retryable(original, definition_hash, rerun is not None)
            retried = conn.read(queries.RETRIED_BY, {"workflow": original.workflow,
                                                     "run_id": full})
            if retried:
                raise AlreadyRetried(full, str(retried[0]["id"]), str(retried[0]["status"]))
            new_id = uuid.uuid4().hex
            # It starts on the definition its original ended on; taken, it goes on with the
            # one loaded then under SPEC §24's rule (its kept steps must be unchanged).
            last = original.continued_on[-1] if original.continued_on else original.version
            run_row, _ = queued_run_rows(new_id, original.workflow, original.definition_hash,
                                         original.trigger, (), now, original.params,
                                         previous_run_id=original.previous_run_id,
                                         trigger_key="retry", retry_of=full,
                                         concurrency_key=original.concurrency_key,
                                         step_prints=original.step_prints, version=last)
            again = frozenset(rerun or ())
            copied = [_retried_step(new_id, r, again)
                      for r in conn.read(queries.STEPS_OF_RUN, {"run_id": full})]
            for sql, params in run_statements(run_row, copied):
                conn.write(sql, params)
            return new_id

        return await db.atomically(job)


class AlreadyRetried(RunConflict):
    """A run that another run retries already is not retried again: retry that one.

    ``run_id`` is the original's full id; ``retried_by`` and ``status`` are the id and
    status of the newest run that retries it."""

    def __init__(self, run_id: str, retried_by: str, status: str) -> None:
        self.run_id, self.retried_by, self.status = run_id, retried_by, status
        then = ("retry that one instead" if status in (RunStatus.FAILED.value,
                                                        RunStatus.CANCELLED.value)
                else "once it has ended, retry that one if need be")
        super().__init__(f"run {run_id[:12]} was already retried by run {retried_by[:12]} "
                         f"({status}): {then}")


def _check_retryable(original: RunRecord, definition_hash: str | None,
                     from_step: bool = False) -> None:
    """:class:`RunConflict` unless ``original`` failed or was cancelled (or, retried from a
    step, succeeded), and (with ``definition_hash``) its workflow's definition is the one
    it ran."""
    allowed = (RunStatus.FAILED.value, RunStatus.CANCELLED.value) + (
        (RunStatus.SUCCEEDED.value,) if from_step else ())
    if original.status not in allowed:
        verb = "is still " if original.status not in _FINISHED else ""
        which = "an ended" if from_step else "a failed or cancelled"
        hint = (" (a succeeded one from a step: retry --from STEP)"
                 if original.status == RunStatus.SUCCEEDED.value else "")
        raise RunConflict(f"run {original.id[:12]} {verb}{original.status}: only {which} run "
                          f"can be retried{hint}")
    if definition_hash is not None and definition_hash != original.definition_hash:
        raise RunConflict(WORKFLOW_CHANGED)


def _retried_step(run_id: str, old: dict[str, object],
                  rerun: frozenset[str] = frozenset()) -> dict[str, object]:
    """A step of a retry: as it ended when it succeeded (and is not to run again), else
    pending."""
    if old["status"] == StepStatus.SUCCEEDED.value and \
            str(old["name"]).split("[", 1)[0] not in rerun:
        return step_row(**{**old, "run_id": run_id, "error": None})
    return step_row(run_id=run_id, name=old["name"], position=old["position"], kind=old["kind"],
                    status=StepStatus.PENDING.value, tries=0)


def cancel_tree(conn: Connection, run_ids: Sequence[str], now: datetime) -> None:
    """Cancel ``run_ids`` and, depth first, their children still going, inside the caller's
    transaction (see :func:`_cancel_statements`): a run nobody executes ends cancelled at
    once (and its end ends its parent's wait), one that is executed is asked to stop."""
    todo = list(run_ids)
    while todo:
        run_id = todo.pop()
        found = conn.read(queries.RUN_BY_ID, {"run_id": run_id})
        if not found or found[0]["status"] in _FINISHED:
            continue
        for sql, params in _cancel_statements(run_record(found[0]), now):
            conn.write(sql, params)
        end_parent_of(conn, run_id, now)
        todo.extend(unfinished_children(conn, run_id))


def _cancel_statements(row: RunRecord, now: datetime) -> list[Statement]:
    """Mark the run cancel-requested; cancel it at once if nobody executes it: queued, or
    running under the owner read before (unchanged since) whose lease ran out or who is a
    dead process of this machine. A live executor renewing, or another one that has just
    claimed the run, keeps it."""
    from brain._owners import local_owner_gone

    params = {"run_id": row.id, "now": now, "owner": row.lease_owner, "yes": True,
              **lease_times(0, now)}
    statements: list[Statement] = [(queries.REQUEST_CANCEL, params),
                                   (queries.CANCEL_QUEUED, params)]
    if row.status == RunStatus.RUNNING.value:
        abandoned = (queries.CANCEL_ABANDONED_UNOWNED if row.lease_owner is None
                     else queries.CANCEL_ABANDONED)
        if not local_owner_gone(row.lease_owner):
            abandoned += queries.LEASE_RAN_OUT
        statements.append((abandoned, params))
    statements += [(queries.CANCEL_STEPS, params), (queries.CANCEL_TIMERS, params)]
    return statements


def _scrubbed_json_text(text: str | None) -> str | None:
    """A run's output (JSON text) with every known secret scrubbed from its strings and
    object keys, still one JSON value."""
    if text is None:
        return None
    import json

    try:
        value = json.loads(text)
    except ValueError:  # not ours to reshape: scrubbed as text
        return clean_text(scrub(text))
    return clean_text(json.dumps(scrub_json(value), ensure_ascii=False, separators=(",", ":")))
