"""Storing steps' logs while they run: every :data:`FLUSH_SECONDS` one task per execution
(:class:`LogFlusher`) stores each running step's new lines, one write per step whatever
the line count; a step's last lines are stored before its end is recorded (so whoever
follows its log has every line before the step's end). A step that prints nothing costs
no write."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from brain.executors.steplog import StepLog
from brain.results import LogBatch
from brain.runner.events import LogEvent, LogHandler

if TYPE_CHECKING:
    from brain.store.base import RunStore

log = logging.getLogger("brain.runner")

#: How often a running step's new lines are stored (SPEC §20: at least once a second).
FLUSH_SECONDS = 0.5
#: A step's lines get ``seq`` numbers from ``tries << SEQ_SHIFT`` on, so the lines of an
#: execution that resumed a step follow those of the one that died, without reading them.
SEQ_SHIFT = 32


class LogWriter:
    """Stores one step's :class:`StepLog` as it grows (see the module)."""

    def __init__(self, store: RunStore, run_id: str, step: str, owner: str, *,
                 prior_tries: int, on_log: LogHandler | None) -> None:
        self.store = store
        self.run_id = run_id
        self.step = step
        self.owner = owner
        self.on_log = on_log
        self.log = StepLog(first_seq=(prior_tries << SEQ_SHIFT) + 1)
        self._writing: asyncio.Future[None] | None = None
        self.closed = False

    async def flush(self) -> None:
        """Store the lines made since the last flush (the flusher's interval)."""
        if self.closed or not self.log.fed_since_take:
            return
        self._writing = asyncio.ensure_future(self._write(self.log.take()))
        await asyncio.shield(self._writing)  # a close waits for a begun write

    async def _write(self, batch: LogBatch) -> None:
        if not batch:
            return
        if self.on_log is not None and batch.lines:
            with contextlib.suppress(Exception):
                self.on_log(LogEvent(self.run_id, self.step, batch.lines))
        try:
            await self.store.append_log(self.run_id, self.step, batch, owner=self.owner)
        except Exception as exc:  # a lost lease or a busy database: the step goes on
            log.debug("run %s: the log of step %r was not stored: %s", self.run_id, self.step,
                      exc)

    async def close(self) -> None:
        """Store what is left (call once the step's work ended); nothing if it printed
        nothing."""
        if self.closed:
            return
        self.closed = True
        if self._writing is not None:
            with contextlib.suppress(Exception):
                await self._writing
        if self.log.any_fed:
            await self._write(self.log.take(final=True))


class LogFlusher:
    """The one task of an execution that stores its running steps' new lines every
    :data:`FLUSH_SECONDS` (started with the first step, stopped with the execution)."""

    def __init__(self) -> None:
        self._writers: set[LogWriter] = set()
        self._task: asyncio.Task[None] | None = None

    def add(self, writer: LogWriter) -> None:
        """Flush ``writer`` every interval until it is closed."""
        self._writers.add(writer)
        if self._task is None:
            self._task = asyncio.create_task(self._every_interval(), name="brain-step-logs")

    async def _every_interval(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            for writer in list(self._writers):
                if writer.closed:
                    self._writers.discard(writer)
                    continue
                with contextlib.suppress(Exception):
                    await writer.flush()

    def stop(self) -> None:
        """Stop flushing (the execution is over: every writer was closed)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._writers.clear()
