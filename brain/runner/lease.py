"""The lease of one execution: renewing it, noticing a cancel, and what losing it stops.

A lease that could not be renewed in time (the database stalled for longer
than a lease, or this process froze) may already be another executor's: the
process groups of the running steps are SIGKILLed at once, the work stops and
nothing more is written, so a step never runs twice at the same time. Every
process group a step starts is recorded with the step, so that a resume on
this machine can end what a frozen or dead executor left.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from typing import TYPE_CHECKING

from brain._errors import LeaseLost
from brain._owners import this_machine
from brain.executors.base import ProcessGroup
from brain.executors.process import signal_group
from brain.runner.texts import internal_error
from brain.store.base import StepProcess

if TYPE_CHECKING:
    from brain.store.interfaces import RecordStore

POLL_SECONDS = 0.5
log = logging.getLogger("brain.runner")


class Lease:
    """Holds ``run_id`` for ``owner`` while an execution runs; see the module's docstring."""

    def __init__(self, store: RecordStore, run_id: str, owner: str, seconds: float,
                 renewed_at: float | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.owner = owner
        self.seconds = seconds
        #: When (``time.monotonic()``) the renewal the lease runs from was sent: its time is
        #: counted from there, never from later (the database's lease ends no later).
        self.renewed_at = renewed_at
        #: Set when the work must stop: a cancel was asked for, or the lease is lost.
        self.stop = asyncio.Event()
        #: The lease is (or may be) another executor's: write nothing more.
        self.lost = False
        #: The work stopped because the lease could not be renewed in time (a stalled
        #: database): nothing was written since, and the run may be resumed.
        self.stalled = False
        #: The process groups of the steps running now, by step name.
        self.groups: dict[str, list[ProcessGroup]] = {}

    async def monitor(self) -> None:
        """Renew the lease now and then; notice cancel requests within a second."""
        renew_every = max(self.seconds / 3, POLL_SECONDS)
        last_renew = time.monotonic() if self.renewed_at is None else self.renewed_at
        while True:
            await asyncio.sleep(POLL_SECONDS)
            sent = time.monotonic()
            left = self.seconds - (sent - last_renew)
            if left <= 0:
                # After a stalled database, or a freeze of this process (SIGSTOP, a paused
                # VM): another executor may be running the steps again already.
                self.stalled = True
                self.lose()
                log.warning("run %s: lease could not be renewed in time; its work stopped",
                            self.run_id)
                return
            renew = sent - last_renew >= renew_every
            # asyncio.wait, not wait_for: a heartbeat that ends as its time runs out (after a
            # freeze, both at once) must never end this monitor by a stray cancellation, and
            # a late heartbeat is left to land rather than cut off mid-write.
            beat = asyncio.ensure_future(self.store.heartbeat(
                self.run_id, self.owner, self.seconds if renew else None))
            done, _ = await asyncio.wait({beat}, timeout=left)
            if not done:  # a busy database: try again at the next tick
                beat.add_done_callback(lambda t: t.cancelled() or t.exception())
                continue
            try:
                ours, cancel = beat.result()
            except Exception:  # a busy database: try again at the next tick
                continue
            if renew and ours:
                last_renew = sent
            if not ours:
                self.lose()
                return
            if cancel:
                self.stop.set()
                return

    def monitor_ended(self, monitor: asyncio.Task[None]) -> None:
        """The monitor ends only by saying why (lease lost, cancel requested) or when the
        execution stops it. Ended any other way (an error of its own), nobody renews the
        lease any more: the run's work stops as for a lost lease, and a resume takes over."""
        if self.stop.is_set():
            return
        error = None if monitor.cancelled() else monitor.exception()
        if monitor.cancelled() or error is not None:
            log.error("run %s: the lease monitor stopped (%s); its work stops", self.run_id,
                      "cancelled" if error is None else internal_error(error))
            self.stalled = True
            self.lose()

    def lose(self) -> None:
        """The lease is lost (or may be): SIGKILL the running steps' process groups now,
        before anything else (no grace: the run may be another executor's already), and
        stop the work; nothing more is written."""
        self.lost = True
        for groups in self.groups.values():
            for group in groups:
                signal_group(group.pgid, signal.SIGKILL)
        self.stop.set()

    def process_started(self, name: str, records: list[asyncio.Task[None]],
                        group: ProcessGroup) -> asyncio.Future[None]:
        """A step has started a process group (``StepContext.on_process``): keep it, to kill
        it if the lease is lost, and record it, so that a resume on this machine can end it.
        The step's program waits at its gate until the returned future is done (the record
        committed). Started after the lease was lost, it is killed at once."""
        if self.lost:
            signal_group(group.pgid, signal.SIGKILL)
            lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            lost.set_exception(LeaseLost("this executor no longer holds the run's lease"))
            return lost
        self.groups.setdefault(name, []).append(group)
        process = StepProcess(name, group.pgid, group.started, this_machine())
        task = asyncio.create_task(self.store.step_process(self.run_id, process,
                                                           owner=self.owner))
        records.append(task)

        def written(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and isinstance(task.exception(), LeaseLost):
                self.lose()

        # Collected here; the step's own path awaits it too before its final write.
        task.add_done_callback(written)
        return task

    def step_ended(self, name: str) -> None:
        """A step's work ended, and its process groups with it."""
        self.groups.pop(name, None)
