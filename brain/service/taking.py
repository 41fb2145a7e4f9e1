"""Taking runs and executing them: N takers sharing one concurrency limit, the scan for
runs whose executor died, and this process's heartbeat row (``brain workers``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from brain._clock import utcnow

if TYPE_CHECKING:
    from brain.metrics import Metrics
    from brain.runner.context import RunContext
    from brain.store import Store
    from brain.workflow import Workflow

log = logging.getLogger("brain.service")
IDLE_POLL_SECONDS = 1.0
#: On SQLite nothing announces runs other processes queue: idle takers look this often, so
#: such a run starts within a second (SPEC §19).
SQLITE_POLL_SECONDS = 0.5
#: How long to wait before listening again after the listening connection was lost.
RELISTEN_SECONDS = 1.0
#: How often the timers of waiting steps are looked for, at most (a timer another process
#: recorded is fired within this of its due time).
TIMER_LOOK_SECONDS = 0.25
#: How many due timers one transaction fires.
FIRE_BATCH = 500
#: How long before a timer's due time (by this machine's clock) it is looked for: whether
#: it is due is the database's clock's say on PostgreSQL.
CLOCK_SLACK = timedelta(seconds=2)
EXPIRED_SCAN_SECONDS = 5.0
#: How often a serving process writes its heartbeat row (``brain workers``).
WORKER_BEAT_SECONDS = 5.0
#: How long the row of a process that died without a word (``kill -9``, a lost machine) is
#: kept, shown lost, before the live processes remove it.
LOST_WORKER_KEPT = timedelta(hours=1)
#: Every how many heartbeats a process removes such rows.
FORGET_EVERY_BEATS = 12


class RunTaker:
    """Takes queued runs (and runs whose executor died) and executes them, ``concurrency``
    at a time, with the workflows ``workflows()`` returns (as loaded now), under
    ``context`` (its settings; its observers are told of every run it executes)."""

    def __init__(self, store: Store, owner: str, workflows: Callable[[], Mapping[str, Workflow]],
                 *, concurrency: int, metrics: Metrics, kind: str, started_at: datetime,
                 tasks: list[asyncio.Task[Any]], context: RunContext) -> None:
        self.store = store
        self.context = context
        self.owner = owner
        self.workflows = workflows
        self.concurrency = concurrency
        self.metrics = metrics
        self.kind = kind
        self.started_at = started_at
        self.tasks = tasks
        self.wake = asyncio.Event()
        self.stopping = False
        #: The runs executing now, by id, with the task executing each.
        self.running: dict[str, asyncio.Task[Any]] = {}
        # Runs whose executor died (lease expired), found by the resume scan and taken by
        # the same takers as queued runs: one concurrency limit for both.
        self.resumable: list[str] = []
        self._ended: asyncio.Future[None] | None = None

    def execution_ended(self) -> asyncio.Future[None]:
        """Done when the next execution of this process ends (whichever run it was)."""
        if self._ended is None or self._ended.done():
            self._ended = asyncio.get_running_loop().create_future()
        return asyncio.shield(self._ended)

    async def start(self) -> None:
        """Resume at once what dead processes of this machine left, then start the takers,
        the resume scan and the heartbeat."""
        from brain._owners import local_owner_gone

        for run_id, owner in await self.store.running_leases():
            if owner != self.owner and local_owner_gone(owner):
                await self.store.expire_lease(run_id, owner)
        for i in range(self.concurrency):
            self.tasks.append(asyncio.create_task(self._taker(), name=f"brain-taker-{i}"))
        self.tasks.append(asyncio.create_task(self._resume_loop(), name="brain-resume"))
        self.tasks.append(asyncio.create_task(self._timer_loop(), name="brain-timers"))
        self.tasks.append(asyncio.create_task(self._heartbeat_loop(), name="brain-heartbeat"))
        if self.store.notifies:
            self.tasks.append(asyncio.create_task(self._listen_loop(), name="brain-listen"))

    @property
    def idle_poll(self) -> float:
        """How long an idle taker waits before it looks at the queue again unasked."""
        return IDLE_POLL_SECONDS if self.store.notifies else SQLITE_POLL_SECONDS

    async def _listen_loop(self) -> None:
        """Wake the idle takers whenever any process queues a run (PostgreSQL's NOTIFY),
        listening again when the connection is lost; polling goes on meanwhile."""
        while not self.stopping:
            try:
                await self.store.watch_queued(self.wake.set)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is away: poll until it is back
                log.debug("cannot listen for queued runs: %s", exc)
            await asyncio.sleep(RELISTEN_SECONDS)

    def is_stopping(self) -> bool:
        """Whether the service is stopping (a run cut off now is left to be resumed)."""
        return self.stopping

    async def wait_running(self, grace_seconds: float, hurry: asyncio.Event) -> list[str]:
        """Stop taking runs; wait up to ``grace_seconds`` (or until ``hurry``) for the
        running ones to end; return the ids of those still running."""
        self.stopping = True
        self.wake.set()
        running = list(self.running.values())
        if running and grace_seconds > 0:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + grace_seconds
            hurried: asyncio.Future[Any] = asyncio.ensure_future(hurry.wait())
            waiting: set[asyncio.Future[Any]] = set(running)
            while waiting and not hurried.done() and loop.time() < deadline:
                _, waiting = await asyncio.wait(waiting | {hurried}, timeout=deadline - loop.time(),
                                                return_when=asyncio.FIRST_COMPLETED)
                waiting.discard(hurried)
            hurried.cancel()
        return list(self.running)

    async def _take(self) -> tuple[str, bool, bool] | None:
        """The next run to execute, claimed: ``(run id, first start, woken)``, or ``None``.

        Runs whose executor died come first; then the oldest queued run of a
        workflow under its ``max_concurrent_runs`` (a run woken from its waits is
        queued again, SPEC §16).
        """
        lease_seconds = self.context.settings.lease_seconds
        while self.resumable:
            run_id = self.resumable.pop(0)
            if run_id in self.running:
                continue
            row = await self.store.run_row(run_id)
            if row is None or row.workflow not in self.workflows():
                continue
            if await self.store.claim_run(run_id, self.owner, lease_seconds):
                log.info("resuming run %s of %s (its executor stopped)", run_id, row.workflow)
                return run_id, row.started_at is None, False
        workflows = self.workflows()
        # Limits are counted and claimed in one transaction of the store's, serialised per
        # limit across processes (SPEC §19); without any, one statement claims.
        limits = {n: (wf.spec.max_concurrent_runs, wf.spec.concurrency_key is not None)
                  for n, wf in workflows.items() if wf.spec.max_concurrent_runs}
        queued = await self.store.take_next(list(workflows), self.owner, lease_seconds,
                                            limits=limits or None)
        return None if queued is None else (queued[0], not queued[1], queued[1])

    async def _taker(self) -> None:
        """Take a run, execute it, repeat; a store error is logged and retried."""
        while not self.stopping:
            # Cleared before looking, not after: a run queued while this taker looks wakes
            # it at once instead of a poll later.
            self.wake.clear()
            try:
                taken = await self._take()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cannot take a run to execute; retrying")
                taken = None
                await asyncio.sleep(self.idle_poll)
            if taken is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), self.idle_poll)
                continue
            run_id, first_start, woken = taken
            task = asyncio.current_task()
            assert task is not None
            self.running[run_id] = task
            self.metrics.executing.inc()
            try:
                await self._execute(run_id, first_start, woken)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("run %s stopped by an internal error", run_id)
            finally:
                self.metrics.executing.dec()
                self.running.pop(run_id, None)
                if self._ended is not None and not self._ended.done():
                    self._ended.set_result(None)

    async def _execute(self, run_id: str, first_start: bool, woken: bool) -> None:
        """Execute one claimed run with its workflow as loaded now (the context's observers
        log its start and end and count it)."""
        from brain.runner import execute_claimed

        row = await self.store.run_row(run_id)
        workflows = self.workflows()
        wf = workflows.get(row.workflow) if row else None
        if wf is None:
            return
        await execute_claimed(wf, self.store, run_id, self.owner, first_start=first_start,
                              woken=woken, row=row, abandon_on_cancel=self.is_stopping,
                              loaded=workflows, context=self.context)

    async def _heartbeat_loop(self) -> None:
        """Tell the database this process is alive, every few seconds (``brain workers``),
        and now and then remove the rows of processes silent for long."""
        beats = 0
        while not self.stopping:
            try:
                await self.store.worker_heartbeat(
                    self.owner, host=socket.gethostname(), pid=os.getpid(), kind=self.kind,
                    started_at=self.started_at, executing=len(self.running))
                if beats % FORGET_EVERY_BEATS == 0:
                    await self.store.forget_silent_workers(utcnow() - LOST_WORKER_KEPT)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a busy database: the next beat will do
                log.debug("worker heartbeat not written: %s", exc)
            beats += 1
            await asyncio.sleep(WORKER_BEAT_SECONDS)

    async def _resume_loop(self) -> None:
        """Find runs whose executor died (lease expired), now and every few seconds, and
        hand them to the takers. A run this process executes is never among them."""
        while not self.stopping:
            try:
                expired = await self.store.expired_runs()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cannot look for abandoned runs; retrying")
                expired = []
            fresh = [r for r in expired if r not in self.running and r not in self.resumable]
            if fresh:
                self.resumable.extend(fresh)
                self.wake.set()
            await asyncio.sleep(EXPIRED_SCAN_SECONDS)

    async def _timer_loop(self) -> None:
        """Fire the timers of waiting steps as they fall due, whoever recorded them (SPEC
        §16): each is taken by one process (see ``brain.store.waits``), its step ended and its
        run queued again, to be taken here or anywhere."""
        from brain.runner.waiting import fire_when_due

        # Due by the database's clock on PostgreSQL, which may differ from this machine's a
        # little: look from a little before, by this one's (SQLite: this machine's clock).
        slack = CLOCK_SLACK if getattr(self.store, "dialect", "") == "postgresql" \
            else timedelta(0)
        while not self.stopping:
            try:
                fired, wait = await fire_when_due(self.store, slack=slack, limit=FIRE_BATCH)
                if fired:
                    self.wake.set()
                if len(fired) >= FIRE_BATCH:
                    continue  # more may be due
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cannot fire the timers of waiting steps; retrying")
                wait = None
            await asyncio.sleep(min(TIMER_LOOK_SECONDS, wait or TIMER_LOOK_SECONDS))
