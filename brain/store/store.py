"""``Store``: every read and write of runs and steps, for SQLite and PostgreSQL alike.

The runner, the CLI, the service and the server all go through these methods;
no other module writes SQL. The connections under them are in
:mod:`brain.store.database`, the queue's part in :mod:`brain.store.queue`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, and_, bindparam, delete, exists, func, insert, or_, select, update

from brain._clock import utcnow
from brain._errors import LeaseLost, RunNotFound
from brain.results import (
    FINISHED_RUN,
    RunResult,
    RunStatus,
    StepResult,
    StepStatus,
    TriggerData,
    clean_text,
    step_order,
)
from brain.store.base import QueuedRun, RunRecord, StepProcess
from brain.store.database import lease_clock
from brain.store.errors import database_problem
from brain.store.queue import RunQueue, insert_queued, queued_run_rows
from brain.store.tables import fires, runs, steps, workers
from brain.store.urls import default_url, redact_url

__all__ = ["Store", "database_problem", "default_url", "lease_clock", "redact_url", "utcnow"]

_FINISHED = [s.value for s in FINISHED_RUN]


class Store(RunQueue):
    """Where runs are recorded. ``Store()`` uses ``BRAIN_DATABASE_URL``.

    >>> async with Store("sqlite+aiosqlite:///runs.db") as store:   # doctest: +SKIP
    ...     print(await store.list_runs(limit=5))
    """

    # --- writing runs -------------------------------------------------------

    async def create_run(self, *, run_id: str, workflow: str, definition_hash: str,
                         trigger: TriggerData, step_rows: Sequence[tuple[str, str]],
                         owner: str | None = None, lease_seconds: float = 30,
                         previous_run_id: str | None = None) -> datetime:
        """Insert a run and its pending steps (``(name, kind)`` in call order) in one commit.

        With ``owner`` the run starts ``running`` under that owner's lease,
        else it is ``queued``. Returns the creation time.
        """
        now = utcnow()
        row, step_values = queued_run_rows(run_id, workflow, definition_hash, trigger, step_rows,
                                           now, previous_run_id=previous_run_id)
        statements: list[tuple[Any, Any]] = [(insert(runs), row)]
        if owner is not None:
            row.update(status=RunStatus.RUNNING.value, started_at=now, lease_owner=owner,
                       lease_expires_at=now + timedelta(seconds=lease_seconds))
            if self.dialect == "postgresql":  # the lease by the server's clock
                statements.append((update(runs).where(runs.c.id == run_id).values(
                    lease_expires_at=func.now() + timedelta(seconds=lease_seconds)), None))
        await self._transaction(statements
                                + ([(insert(steps), step_values)] if step_values else []))
        return now

    async def claim_run(self, run_id: str, owner: str, lease_seconds: float) -> bool:
        """Take a queued run, or a running one whose lease expired; ``True`` if taken."""
        now = lease_clock(self.dialect)
        result = await self._one(
                update(runs)
                .where(runs.c.id == run_id)
                .where(or_(runs.c.status == RunStatus.QUEUED.value,
                           and_(runs.c.status == RunStatus.RUNNING.value,
                                or_(runs.c.lease_expires_at.is_(None),
                                    runs.c.lease_expires_at < now))))
                .values(status=RunStatus.RUNNING.value, lease_owner=owner,
                        lease_expires_at=now + timedelta(seconds=lease_seconds),
                        started_at=func.coalesce(runs.c.started_at, utcnow())))
        return bool(result.rowcount)

    async def set_previous_run(self, run_id: str, previous_run_id: str | None, *,
                               owner: str | None = None) -> None:
        """Record which run ``{previous.X}`` reads from (under ``owner``'s lease, when given)."""
        query = update(runs).where(runs.c.id == run_id)
        if owner is not None:
            query = query.where(runs.c.lease_owner == owner)
        _check_lease(await self._one(query.values(previous_run_id=previous_run_id)), owner)

    async def heartbeat(self, run_id: str, owner: str, lease_seconds: float | None) -> tuple[bool, bool]:
        """Renew the lease (when ``lease_seconds``); return (still ours, cancel requested)."""
        if lease_seconds is not None:
            await self._one(update(runs).where(runs.c.id == run_id, runs.c.lease_owner == owner)
                            .values(lease_expires_at=lease_clock(self.dialect)
                                    + timedelta(seconds=lease_seconds)),
                            retry=False)
        row = (await self._one(select(runs.c.lease_owner, runs.c.cancel_requested)
                               .where(runs.c.id == run_id), retry=False)).first()
        if row is None:
            return False, True
        return row.lease_owner == owner, bool(row.cancel_requested)

    async def step_running(self, run_id: str, name: str, *, inputs: dict[str, Any],
                           tries: int, started_at: datetime, owner: str | None = None) -> None:
        """Mark a step ``running`` with its resolved (redacted) inputs.

        With ``owner``, only while that owner holds the run's lease (else
        :class:`LeaseLost`); the same holds for every runner write below.
        """
        params = dict(b_run=run_id, b_name=name, b_status=StepStatus.RUNNING.value,
                      b_inputs=json.dumps(inputs), b_tries=tries, b_started=started_at)
        if owner is None:
            await self._hot(_STEP_RUNNING, params)
        else:
            _check_lease(await self._hot(_STEP_RUNNING_LEASED, {**params, "b_owner": owner}), owner)

    async def step_finished(self, run_id: str, name: str, *, status: StepStatus, tries: int,
                            ended_at: datetime, output: str | None = None,
                            error: str | None = None, stderr: str | None = None,
                            inputs: dict[str, Any] | None = None,
                            started_at: datetime | None = None, owner: str | None = None) -> None:
        """Record a step's end; committed before this returns.

        ``inputs`` and ``started_at``, when given, are written too (a quick step
        is recorded once, finished, without a ``running`` write first). Text
        that cannot be stored as it is (lone surrogates) is stored with
        replacement characters.
        """
        output, error, stderr = clean_text(output), clean_text(error), clean_text(stderr)
        if inputs is not None and started_at is not None:
            params = dict(
                b_run=run_id, b_name=name, b_status=status.value, b_tries=tries, b_ended=ended_at,
                b_output=output, b_error=error, b_stderr=stderr, b_inputs=json.dumps(inputs),
                b_started=started_at)
            if owner is None:
                await self._hot(_STEP_FINISHED, params)
            else:
                _check_lease(await self._hot(_STEP_FINISHED_LEASED, {**params, "b_owner": owner}),
                             owner)
            return
        values: dict[str, Any] = dict(status=status.value, tries=tries, ended_at=ended_at,
                                      output=output, error=error, stderr=stderr)
        if inputs is not None:
            values["inputs"] = json.dumps(inputs)
        if started_at is not None:
            values["started_at"] = started_at
        query = update(steps).where(steps.c.run_id == run_id, steps.c.name == name)
        _check_lease(await self._one(_leased(query, run_id, owner).values(**values)), owner)

    async def step_process(self, run_id: str, process: StepProcess, *,
                           owner: str | None = None) -> None:
        """Record the process group a step's try has started (see :class:`StepProcess`),
        in place of an earlier try's; only while ``owner`` holds the run's lease, when given."""
        params = dict(b_run=run_id, b_name=process.step, b_pgid=process.pgid,
                      b_pstarted=process.started, b_machine=process.machine)
        if owner is None:
            await self._hot(_STEP_PROCESS, params)
        else:
            _check_lease(await self._hot(_STEP_PROCESS_LEASED, {**params, "b_owner": owner}),
                         owner)

    async def steps_ended(self, run_id: str, names: Iterable[str], status: StepStatus,
                          error: str | None = None, *, owner: str | None = None) -> None:
        """Mark several steps ``skipped``, ``cancelled`` or ``failed`` at once."""
        names = list(names)
        if not names:
            return
        now = utcnow()
        query = update(steps).where(steps.c.run_id == run_id, steps.c.name.in_(names))
        _check_lease(await self._one(_leased(query, run_id, owner).values(
            status=status.value, ended_at=now, error=clean_text(error))), owner)

    async def add_steps(self, run_id: str, rows: Sequence[tuple[str, str, int]], *,
                        owner: str | None = None) -> None:
        """Add pending steps ``(name, kind, position)`` a run does not have yet (a for_each
        block's instances), committed before this returns; only while ``owner`` holds the
        run's lease, when given."""
        if not rows:
            return
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            add: Any = pg_insert(steps).on_conflict_do_nothing()
        else:
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            add = sqlite_insert(steps).on_conflict_do_nothing()
        values = [dict(run_id=run_id, name=name, position=position, kind=kind,
                       status=StepStatus.PENDING.value, tries=0) for name, kind, position in rows]
        statements: list[tuple[Any, Any]] = []
        if owner is not None:  # changes nothing; counts one row while the lease is ours
            statements.append((update(runs).where(runs.c.id == run_id, runs.c.lease_owner == owner)
                               .values(lease_owner=owner), None))
        statements.append((add, values))
        counts = await self._transaction(statements)
        if owner is not None and not counts[0]:
            raise LeaseLost("this executor no longer holds the run's lease")

    async def end_unfinished_steps(self, run_id: str, *, pending: StepStatus,
                                   error: str | None = None, owner: str | None = None) -> None:
        """End every step still ``running`` (as ``cancelled``) or ``pending`` (as
        ``pending``, e.g. ``skipped``) in one commit."""
        now = utcnow()
        running = update(steps).where(steps.c.run_id == run_id,
                                      steps.c.status == StepStatus.RUNNING.value)
        waiting = update(steps).where(steps.c.run_id == run_id,
                                      steps.c.status == StepStatus.PENDING.value)
        await self._transaction([
            (_leased(running, run_id, owner).values(
                status=StepStatus.CANCELLED.value, ended_at=now, error=clean_text(error)), None),
            (_leased(waiting, run_id, owner).values(
                status=pending.value, ended_at=now,
                error=None if pending is StepStatus.SKIPPED else clean_text(error)), None)])

    async def reset_steps(self, run_id: str, names: Iterable[str], *,
                          owner: str | None = None) -> None:
        """Put unfinished steps back to ``pending`` before a resume."""
        names = list(names)
        if not names:
            return
        query = update(steps).where(steps.c.run_id == run_id, steps.c.name.in_(names))
        _check_lease(await self._one(_leased(query, run_id, owner).values(
            status=StepStatus.PENDING.value, ended_at=None, output=None, error=None)), owner)

    async def restamp_run(self, run_id: str, definition_hash: str,
                          step_rows: Sequence[tuple[str, str]], *, owner: str) -> bool:
        """Give a queued run that ``owner`` has just taken another definition of its
        workflow: the definition's hash, and pending rows for its steps instead of the old
        ones, in one transaction. ``False`` (and nothing changed) if a step of it has
        started after all."""
        _, step_values = queued_run_rows(run_id, "", definition_hash, TriggerData(), step_rows,
                                         utcnow())
        started = select(func.count()).select_from(steps).where(
            steps.c.run_id == run_id,
            or_(steps.c.status != StepStatus.PENDING.value, steps.c.tries > 0))

        def job(conn: Any) -> bool:
            if conn.execute(started).scalar():
                return False
            if not conn.execute(update(runs).where(runs.c.id == run_id,
                                                   runs.c.lease_owner == owner)
                                .values(definition_hash=definition_hash)).rowcount:
                raise LeaseLost("this executor no longer holds the run's lease")
            conn.execute(delete(steps).where(steps.c.run_id == run_id))
            if step_values:
                conn.execute(insert(steps), step_values)
            return True

        return bool(await self._atomically(job))

    async def finish_run(self, run_id: str, status: RunStatus, error: str | None = None, *,
                         owner: str | None = None,
                         then_queue: Sequence[QueuedRun] = ()) -> datetime:
        """Record the run's end and release its lease (only ``owner``'s, when given).

        ``then_queue`` (failure handlers) are queued in the same transaction: never one
        without the other, and never twice.
        """
        now = utcnow()
        query = update(runs).where(runs.c.id == run_id)
        if owner is not None:
            query = query.where(runs.c.lease_owner == owner)
        query = query.values(status=status.value, error=clean_text(error), ended_at=now,
                             lease_owner=None, lease_expires_at=None)
        if not then_queue:
            _check_lease(await self._one(query), owner)
            return now
        def job(conn: Any) -> None:
            if not conn.execute(query).rowcount and owner is not None:
                raise LeaseLost("this executor no longer holds the run's lease")
            insert_queued(conn, then_queue, now)

        await self._atomically(job)
        return now

    async def request_cancel(self, run_id: str) -> tuple[RunResult, bool]:
        """Ask for a run to stop; return the run and whether it was still queued or running.

        A run nobody executes is cancelled at once: a queued one, and a running one
        whose executor is gone (its lease expired, or its owner is a process of this
        machine that has died): its unfinished steps become ``cancelled`` and its
        lease is released. A run with a live executor is only marked
        cancel-requested; that executor stops it within a second.
        """
        from brain._owners import local_owner_gone

        full = await self.resolve_id(run_id)
        row = await self.run_row(full)
        if row is None:
            raise RunNotFound(f"no run {run_id!r}")
        if row.status in _FINISHED:
            return await self.get_run(full, with_steps=False), False
        now = utcnow()
        owner_gone = local_owner_gone(row.lease_owner)
        cancelled = dict(status=RunStatus.CANCELLED.value, error="cancelled", ended_at=now,
                         lease_owner=None, lease_expires_at=None)
        statements: list[Any] = [
            update(runs).where(runs.c.id == full).values(cancel_requested=True),
            update(runs).where(runs.c.id == full, runs.c.status == RunStatus.QUEUED.value)
            .values(**cancelled)]
        if row.status == RunStatus.RUNNING.value:
            # Only if nothing changed since the read: the same owner, and (unless that
            # owner is known dead) a lease that has run out. A live executor renewing,
            # or another one that has just claimed the run, keeps it.
            same_owner = (runs.c.lease_owner.is_(None) if row.lease_owner is None
                          else runs.c.lease_owner == row.lease_owner)
            abandoned = update(runs).where(runs.c.id == full,
                                           runs.c.status == RunStatus.RUNNING.value, same_owner)
            if not owner_gone:
                abandoned = abandoned.where(or_(
                    runs.c.lease_expires_at.is_(None),
                    runs.c.lease_expires_at < lease_clock(self.dialect)))
            statements.append(abandoned.values(**cancelled))
        statements.append(
            update(steps).where(steps.c.run_id == full,
                                steps.c.status.in_([StepStatus.PENDING.value,
                                                    StepStatus.RUNNING.value]),
                                select(runs.c.status).where(runs.c.id == full)
                                .scalar_subquery() == RunStatus.CANCELLED.value)
            .values(status=StepStatus.CANCELLED.value, ended_at=now, error="cancelled"))
        await self._transaction([(statement, None) for statement in statements])
        return await self.get_run(full, with_steps=False), True

    async def retry_run(self, run_id: str, *, definition_hash: str | None = None) -> str:
        """Queue a new run that retries ``run_id`` (failed or cancelled); return its id.

        Same workflow, trigger and ``{previous.X}`` run; ``retry_of`` points at the
        original. Steps that succeeded there are copied as they ended (outputs,
        inputs, tries and times) and do not run again; the others wait to run.
        With ``definition_hash``, a workflow whose definition changed since is a
        :class:`RunConflict`.
        """
        import uuid

        from brain._errors import WORKFLOW_CHANGED, RunConflict

        full = await self.resolve_id(run_id)
        original = await self.run_row(full)
        if original is None:
            raise RunNotFound(f"no run {run_id!r}")
        if original.status not in (RunStatus.FAILED.value, RunStatus.CANCELLED.value):
            verb = "is still " if original.status not in _FINISHED else ""
            raise RunConflict(f"run {full[:12]} {verb}{original.status}: only a failed or "
                              f"cancelled run can be retried")
        if definition_hash is not None and definition_hash != original.definition_hash:
            raise RunConflict(WORKFLOW_CHANGED)
        rows = await self._rows(select(steps).where(steps.c.run_id == full))
        new_id = uuid.uuid4().hex
        run_row, _ = queued_run_rows(new_id, original.workflow, original.definition_hash,
                                     original.trigger, (), utcnow(),
                                     previous_run_id=original.previous_run_id,
                                     trigger_key="retry", retry_of=full)
        done = StepStatus.SUCCEEDED.value
        step_values = [
            dict(run_id=new_id, name=r.name, position=r.position, kind=r.kind,
                 status=done if r.status == done else StepStatus.PENDING.value,
                 tries=r.tries if r.status == done else 0,
                 inputs=r.inputs if r.status == done else None,
                 output=r.output if r.status == done else None,
                 stderr=r.stderr if r.status == done else None,
                 started_at=r.started_at if r.status == done else None,
                 ended_at=r.ended_at if r.status == done else None, error=None)
            for r in rows]
        await self._transaction([(insert(runs), run_row)]
                                + ([(insert(steps), step_values)] if step_values else []))
        return new_id

    async def prune(self, finished_before: datetime) -> int:
        """Delete finished runs that ended before ``finished_before``, schedule fire
        records claimed before it (each trigger's latest is kept: catch-up counts from
        it) and the rows of workers silent since; return how many runs."""
        ids = select(runs.c.id).where(runs.c.status.in_(_FINISHED),
                                      runs.c.ended_at < finished_before)
        newer = fires.alias("newer")
        counts = await self._transaction([
            (delete(steps).where(steps.c.run_id.in_(ids)), None),
            (delete(runs).where(runs.c.status.in_(_FINISHED), runs.c.ended_at < finished_before),
             None),
            (delete(fires).where(fires.c.fire_time < finished_before,
                                 exists().where(newer.c.workflow == fires.c.workflow,
                                                newer.c.trigger_key == fires.c.trigger_key,
                                                newer.c.fire_time > fires.c.fire_time)), None),
            (delete(workers).where(workers.c.heartbeat_at < finished_before), None)])
        return int(counts[1] or 0)

    # --- reading ------------------------------------------------------------

    async def resolve_id(self, run_id: str) -> str:
        """The full id of the one run whose id is or starts with ``run_id``."""
        if not run_id or len(run_id) > 32 or not all(c in "0123456789abcdef" for c in run_id.lower()):
            raise RunNotFound(f"no run {run_id[:40]!r}: run ids are 32 hexadecimal digits "
                              f"(a unique prefix will do)")
        found = await self._rows(select(runs.c.id).where(runs.c.id.startswith(run_id.lower())).limit(2))
        if not found:
            raise RunNotFound(f"no run {run_id!r}")
        if len(found) > 1:
            raise RunNotFound(f"run id prefix {run_id!r} is ambiguous: give more characters")
        return str(found[0].id)

    async def get_run(self, run_id: str, *, with_steps: bool = True) -> RunResult:
        """One run by id or unique prefix, with its steps in call order."""
        full = await self.resolve_id(run_id)
        found = await self._rows(select(runs).where(runs.c.id == full))
        if not found:
            raise RunNotFound(f"no run {run_id!r}")
        row = found[0]
        step_rows = []
        if with_steps:
            step_rows = await self._rows(select(steps).where(steps.c.run_id == full)
                                         .order_by(steps.c.position))
        return _run_result(row, step_rows)

    async def list_runs(self, *, workflow: str | None = None, status: str | None = None,
                        limit: int = 20, event: str | None = None,
                        offset: int = 0) -> list[RunResult]:
        """The newest runs first, without their steps (``event``: only runs of that trigger
        kind; ``offset``: skip that many, for pages)."""
        query = select(runs).order_by(runs.c.created_at.desc()).limit(limit).offset(offset)
        if event:
            query = query.where(runs.c.trigger_event == event)
        if workflow:
            query = query.where(runs.c.workflow == workflow)
        if status:
            query = query.where(runs.c.status == status)
        return [_run_result(r, []) for r in await self._rows(query)]

    async def run_row(self, run_id: str) -> RunRecord | None:
        """The run's own record (for the runner: lease, hash, trigger, previous run)."""
        found = await self._rows(select(runs).where(runs.c.id == run_id))
        if not found:
            return None
        r = found[0]
        return RunRecord(id=r.id, workflow=r.workflow, definition_hash=r.definition_hash,
                         status=r.status, trigger=_trigger(r), error=r.error,
                         previous_run_id=r.previous_run_id, created_at=r.created_at,
                         started_at=r.started_at, ended_at=r.ended_at,
                         cancel_requested=bool(r.cancel_requested), lease_owner=r.lease_owner,
                         lease_expires_at=r.lease_expires_at, retry_of=r.retry_of)

    async def latest_succeeded_run(self, workflow: str, before: datetime) -> str | None:
        """The id of ``workflow``'s latest succeeded run that ended before ``before``."""
        found = await self._rows(
            select(runs.c.id).where(runs.c.workflow == workflow,
                                    runs.c.status == RunStatus.SUCCEEDED.value,
                                    runs.c.ended_at <= before)
            .order_by(runs.c.ended_at.desc()).limit(1))
        return str(found[0].id) if found else None

    async def step_outputs(self, run_id: str) -> dict[str, str]:
        """``{step name: output}`` of a run's succeeded steps."""
        query = select(steps.c.name, steps.c.output).where(
            steps.c.run_id == run_id, steps.c.status == StepStatus.SUCCEEDED.value)
        return {r.name: r.output or "" for r in await self._rows(query)}

    async def step_states(self, run_id: str) -> dict[str, tuple[str, int]]:
        """``{step name: (status, tries)}`` for a run."""
        rows = await self._rows(select(steps.c.name, steps.c.status, steps.c.tries)
                                .where(steps.c.run_id == run_id))
        return {r.name: (r.status, r.tries) for r in rows}

    async def step_processes(self, run_id: str) -> list[StepProcess]:
        """The process groups a run's steps started (the latest try's of each step)."""
        rows = await self._rows(
            select(steps.c.name, steps.c.process_group, steps.c.process_started,
                   steps.c.process_machine)
            .where(steps.c.run_id == run_id, steps.c.process_group.is_not(None)))
        return [StepProcess(r.name, r.process_group, r.process_started, r.process_machine or "")
                for r in rows if r.process_started is not None]

    async def recent_activity(self, ended_after: datetime,
                              limit: int = 500) -> list[tuple[RunResult, dict[str, tuple[str, str, int]]]]:
        """Runs running now, the newest ``limit`` queued or ended after ``ended_after``,
        each with ``{step: (kind, status, tries)}``: what a watcher of changes compares
        from one look to the next (three queries)."""
        # Every running run (executors take the oldest first, so a long queue must not
        # push them out), then the newest queued and recently ended ones.
        found = await self._rows(select(runs).where(runs.c.status == RunStatus.RUNNING.value))
        found += await self._rows(
            select(runs).where(or_(runs.c.status == RunStatus.QUEUED.value,
                                   runs.c.ended_at > ended_after))
            .order_by(runs.c.created_at.desc()).limit(limit))
        if not found:
            return []
        ids = [r.id for r in found]
        step_rows = await self._rows(
            select(steps.c.run_id, steps.c.name, steps.c.kind, steps.c.status, steps.c.tries)
            .where(steps.c.run_id.in_(ids)))
        by_run: dict[str, dict[str, tuple[str, str, int]]] = {i: {} for i in ids}
        for r in step_rows:
            by_run[r.run_id][r.name] = (r.kind, r.status, r.tries)
        return [(_run_result(r, []), by_run[r.id]) for r in found]

    async def expired_runs(self) -> list[str]:
        """Ids of ``running`` runs whose lease has expired (their executor died)."""
        now = lease_clock(self.dialect)
        rows = await self._rows(select(runs.c.id).where(runs.c.status == RunStatus.RUNNING.value,
                                                        runs.c.lease_expires_at < now))
        return [str(r.id) for r in rows]


# The statements every step runs, built once (building them costs more than running them).
_STEP_RUNNING = (
    update(steps)
    .where(steps.c.run_id == bindparam("b_run"), steps.c.name == bindparam("b_name"))
    .values(status=bindparam("b_status"), inputs=bindparam("b_inputs"), tries=bindparam("b_tries"),
            started_at=bindparam("b_started"), ended_at=None, error=None))
_STEP_FINISHED = (
    update(steps)
    .where(steps.c.run_id == bindparam("b_run"), steps.c.name == bindparam("b_name"))
    .values(status=bindparam("b_status"), tries=bindparam("b_tries"), ended_at=bindparam("b_ended"),
            output=bindparam("b_output"), error=bindparam("b_error"), stderr=bindparam("b_stderr"),
            inputs=bindparam("b_inputs"), started_at=bindparam("b_started")))
_STEP_PROCESS = (
    update(steps)
    .where(steps.c.run_id == bindparam("b_run"), steps.c.name == bindparam("b_name"))
    .values(process_group=bindparam("b_pgid"), process_started=bindparam("b_pstarted"),
            process_machine=bindparam("b_machine")))
# The same, only while the run's lease is held by ``b_owner``.
_HOLDS_LEASE = exists().where(runs.c.id == bindparam("b_run"),
                              runs.c.lease_owner == bindparam("b_owner"))
_STEP_RUNNING_LEASED = _STEP_RUNNING.where(_HOLDS_LEASE)
_STEP_FINISHED_LEASED = _STEP_FINISHED.where(_HOLDS_LEASE)
_STEP_PROCESS_LEASED = _STEP_PROCESS.where(_HOLDS_LEASE)


def _leased(query: Any, run_id: str, owner: str | None) -> Any:
    """``query`` (an update of steps) limited to while ``owner`` holds the run's lease."""
    if owner is None:
        return query
    return query.where(exists().where(runs.c.id == run_id, runs.c.lease_owner == owner))


def _check_lease(result: Any, owner: str | None) -> None:
    """A lease-conditional write that changed nothing means the lease is gone."""
    if owner is not None and not result.rowcount:
        raise LeaseLost("this executor no longer holds the run's lease")


def _trigger(row: Row[Any]) -> TriggerData:
    return TriggerData(event=row.trigger_event, body=row.trigger_body, path=row.trigger_path,
                       headers=json.loads(row.trigger_headers or "{}"))


def _run_result(row: Row[Any], step_rows: Sequence[Row[Any]]) -> RunResult:
    trigger = _trigger(row)
    step_results = {
        s.name: StepResult(name=s.name, kind=s.kind, status=StepStatus(s.status),
                           inputs=json.loads(s.inputs) if s.inputs else {}, output=s.output,
                           error=s.error, tries=s.tries, stderr=s.stderr,
                           started_at=s.started_at, ended_at=s.ended_at)
        for s in sorted(step_rows, key=lambda s: step_order(s.name, s.position))}
    return RunResult(run_id=row.id, workflow=row.workflow, status=RunStatus(row.status),
                     error=row.error, trigger=trigger, created_at=row.created_at,
                     started_at=row.started_at, ended_at=row.ended_at,
                     previous_run_id=row.previous_run_id, retry_of=row.retry_of,
                     steps=step_results)
