"""Storing steps' logs while they run: every :data:`FLUSH_SECONDS` one task per execution
(:class:`LogFlusher`) stores every running step's new lines in one commit, whatever the
line and step count; a step's last lines are stored before its end is recorded (so
whoever follows its log has every line before the step's end), and the run's end waits
for them. A step that prints nothing costs no write."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from brain.executors.steplog import StepLog
from brain.results import LogBatch
from brain.runner.events import LogEvent, ProgressEvent

if TYPE_CHECKING:
    from brain.runner.observe import RunObserver
    from brain.store.interfaces import RecordStore

log = logging.getLogger("brain.runner")

#: How often a running step's new lines are stored (SPEC §20: at least once a second).
FLUSH_SECONDS = 0.5
#: A step's lines get ``seq`` numbers from ``tries << SEQ_SHIFT`` on, so the lines of an
#: execution that resumed a step follow those of the one that died, without reading them.
SEQ_SHIFT = 32


class LogWriter:
    """Stores one step's :class:`StepLog` as it grows (see the module)."""

    def __init__(self, store: RecordStore, run_id: str, step: str, owner: str, *,
                 prior_tries: int, observer: RunObserver | None,
                 closing: set[asyncio.Future[None]], workflow: str = "") -> None:
        self.store = store
        #: Where a close's final write is kept until it is done (the run's end waits for it).
        self._closing = closing
        self.run_id = run_id
        self.step = step
        self.owner = owner
        self.workflow = workflow
        self.observer = observer
        self.log = StepLog(first_seq=(prior_tries << SEQ_SHIFT) + 1)
        #: The flusher's write in progress with this step's lines, if any.
        self.writing: asyncio.Future[None] | None = None
        self.closed = False

    def tell(self, batch: LogBatch) -> None:
        """Tell the observer of the batch's new lines (and of the step's progress, if it
        reported some since)."""
        if self.observer is None:
            return
        with contextlib.suppress(Exception):  # (an Observers fan-out never raises)
            if batch.lines:
                self.observer.step_log(LogEvent(self.run_id, self.step, batch.lines,
                                                self.workflow))
            if batch.progress is not None:
                self.observer.progress(ProgressEvent(self.run_id, self.workflow, self.step,
                                                     dict(batch.progress)))

    async def flush(self) -> None:
        """Store (and tell the observer of) the lines made so far, now: a try that will be
        tried again has its lines shown before the notice that it will be."""
        if self.writing is not None:  # shielded: a cancel of the step must not cancel it
            with contextlib.suppress(Exception):
                await asyncio.shield(self.writing)
        if self.closed or not self.log.fed_since_take:
            return
        writing = asyncio.ensure_future(_write_round([(self, self.log.take())]))
        self.writing = writing  # a close waits for it
        with contextlib.suppress(Exception):
            await asyncio.shield(writing)

    async def close(self) -> None:
        """Store what is left (call once the step's work ended); nothing if it printed
        nothing."""
        if self.closed:
            return
        self.closed = True
        if self.writing is None and not self.log.any_fed:
            return  # nothing printed, nothing being written: no task to make
        # Shielded: a cancel arriving now (a sibling failed) must not lose the last lines;
        # the run's end waits for them (LogFlusher.settle).
        final = asyncio.ensure_future(self._final())
        self._closing.add(final)
        final.add_done_callback(self._closing.discard)
        await asyncio.shield(final)

    async def _final(self) -> None:
        if self.writing is not None:
            with contextlib.suppress(Exception):
                await self.writing
        if self.log.any_fed:
            await _write_round([(self, self.log.take(final=True))])


class LogFlusher:
    """The one task of an execution that stores its running steps' new lines every
    :data:`FLUSH_SECONDS` (started with the first step, stopped with the execution)."""

    def __init__(self) -> None:
        self._writers: set[LogWriter] = set()
        self._task: asyncio.Task[None] | None = None
        #: Final writes of closed writers not done yet.
        self.closing: set[asyncio.Future[None]] = set()

    def add(self, writer: LogWriter) -> None:
        """Flush ``writer`` every interval until it is closed."""
        self._writers.add(writer)
        if self._task is None:
            self._task = asyncio.create_task(self._every_interval(), name="brain-step-logs")

    async def _every_interval(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            self._writers = {w for w in self._writers if not w.closed}
            ready = [w for w in self._writers if w.log.fed_since_take]
            if not ready:
                continue
            # Every step's new lines in one commit: many printing steps cost one write.
            batches = [(w, w.log.take()) for w in ready]
            writing = asyncio.ensure_future(_write_round(batches))
            for writer in ready:
                writer.writing = writing  # a close waits for it
            with contextlib.suppress(Exception):
                await asyncio.shield(writing)

    async def settle(self) -> None:
        """Wait until every closed writer's last lines are stored (before the run's end)."""
        while self.closing:
            await asyncio.gather(*list(self.closing), return_exceptions=True)

    def stop(self) -> None:
        """Stop flushing (the execution is over: every writer was closed)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._writers.clear()


async def _write_round(batches: list[tuple[LogWriter, LogBatch]]) -> None:
    """Store batches of an execution's steps (one interval's, or a step's last), in one
    commit, telling the observer first; a failed write never fails a step."""
    batches = [(w, b) for w, b in batches if b]
    if not batches:
        return
    first = batches[0][0]
    for writer, batch in batches:
        writer.tell(batch)
    try:
        await first.store.append_logs(first.run_id, [(w.step, b) for w, b in batches],
                                      owner=first.owner)
    except Exception as exc:  # a lost lease or a busy database: the steps go on
        log.debug("run %s: steps' logs were not stored: %s", first.run_id, exc)
