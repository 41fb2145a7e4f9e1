"""Writing a step's end and telling the run's observers about it, as one call."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from brain._clock import utcnow
from brain.results import StepStatus, base_name
from brain.runner.events import StepEvent, WaitEvent
from brain.runner.logwriter import LogFlusher, LogWriter
from brain.runner.observe import Observers, RunObserver

if TYPE_CHECKING:
    from brain.executors.waits import WaitRequest
    from brain.store.interfaces import RecordStore


class Recorder:
    """The writes of one execution's steps, each followed by its :class:`StepEvent` to
    ``observer`` (an :class:`~brain.runner.observe.Observers`: one that raises is ignored).

    Every write is conditional on ``owner`` still holding the run's lease (the
    store raises ``LeaseLost`` otherwise).
    """

    def __init__(self, store: RecordStore, run_id: str, owner: str, kinds: Mapping[str, str],
                 observer: RunObserver | None = None, *, workflow: str = "") -> None:
        self.store = store
        self.run_id = run_id
        self.owner = owner
        self.kinds = kinds
        self.workflow = workflow
        self.observer: RunObserver = observer if observer is not None else Observers()
        self.flusher = LogFlusher()
        #: What steps cut off by a cancel had printed: written with the run's end.
        self._cut_off: dict[str, tuple[str | None, str | None, dict[str, int] | None]] = {}

    def log_writer(self, step: str, prior_tries: int) -> LogWriter:
        """A writer that stores ``step``'s log as it runs (and tells the observer)."""
        writer = LogWriter(self.store, self.run_id, step, self.owner, prior_tries=prior_tries,
                           observer=self.observer, closing=self.flusher.closing,
                           workflow=self.workflow)
        self.flusher.add(writer)
        return writer

    def cut_off(self, step: str, output: str | None, stderr: str | None,
                usage: dict[str, int] | None = None) -> None:
        """Keep what ``step`` printed (and the tokens it spent) before a cancel cut it off,
        for :meth:`write_cut_off`."""
        if output or stderr or usage:
            self._cut_off[step] = (output or None, stderr, usage)

    async def write_cut_off(self) -> None:
        """Store what the steps cut off had printed, and their last log lines (before their
        end is written)."""
        await self.flusher.settle()
        while self._cut_off:
            step, (output, stderr, usage) = self._cut_off.popitem()
            await self.store.step_output(self.run_id, step, output=output, stderr=stderr,
                                         owner=self.owner, usage=usage)

    def emit(self, step: str, status: str, tries: int = 0, error: str | None = None,
             seconds: float | None = None, usage: dict[str, int] | None = None,
             model: str | None = None, cache: str | None = None,
             saved_usage: dict[str, int] | None = None) -> None:
        """Tell the observer that ``step`` (or an instance of it) is now ``status``:
        ``running`` starts it, any other status ends a try (``retrying``) or the step."""
        event = StepEvent(self.run_id, step, self.kinds[base_name(step)], status, tries, error,
                          seconds, usage, model, self.workflow, cache, saved_usage)
        with contextlib.suppress(Exception):  # (an Observers fan-out never raises)
            if status == "running":
                self.observer.step_started(event)
            else:
                self.observer.step_ended(event)

    def waiting(self, step: str, tries: int, request: WaitRequest) -> None:
        """Tell the observer that ``step`` now waits for what ``request`` says."""
        event = WaitEvent(self.run_id, self.workflow, step, request.kind, tries, request.due,
                          request.signal, request.key, request.shown)
        with contextlib.suppress(Exception):
            self.observer.step_waiting(event)

    def emit_all(self, names: Iterable[str], status: str) -> None:
        """:meth:`emit` for each of ``names``."""
        for name in names:
            self.emit(name, status)

    async def finished(self, name: str, status: StepStatus, *, tries: int,
                       ended_at: datetime | None = None, seconds: float | None = None,
                       cache_outcome: str | None = None, **fields: Any) -> None:
        """Write the final record of one step (``fields``: ``output``, ``error``,
        ``inputs``, ``started_at``, ``stderr``, ``usage``, ``cached``), then emit it
        (``cache_outcome``: ``hit`` or ``miss`` for a step with a cache, SPEC §26)."""
        await self.store.step_finished(self.run_id, name, status=status, tries=tries,
                                       ended_at=ended_at or utcnow(), owner=self.owner, **fields)
        saved = (fields.get("cached") or {}).get("usage")
        model = ((fields.get("inputs") or {}).get("model")
                 if fields.get("usage") or saved else None)
        self.emit(name, str(status), tries, fields.get("error"), seconds, fields.get("usage"),
                  model if isinstance(model, str) else None, cache_outcome, saved)

    async def ended(self, names: list[str], status: StepStatus, error: str | None = None, *,
                    emit: bool = True) -> None:
        """End several steps in one status (``error``: why), then emit each."""
        await self.store.steps_ended(self.run_id, names, status, error=error, owner=self.owner)
        if emit:
            self.emit_all(names, str(status))


@dataclass
class Outcome:
    """How a step (or a block, named after its first step) ended in this execution."""

    name: str
    ok: bool
    error: str | None = None
    #: False when the failure could not be written with the step (it is written at the end).
    recorded: bool = True
