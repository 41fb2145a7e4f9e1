"""Observing runs: the one interface the runner announces what happens to (SPEC §25's
traces will be one more implementation).

The runner calls a :class:`RunObserver` — an :class:`Observers` fan-out — as a run
executes: its start and end, each step's start, end (or retried try), waits, log
lines and progress. Metrics (:class:`brain.metrics.Metrics`), the run log lines
(:class:`RunLog`), the server's live events (``brain.server.events.ChangeWatcher``)
and ``brain run``'s live output (``on_event``/``on_log``, through
:class:`Callbacks`) each implement it; none is a hook scattered through the loop.

Observers are called on the run's event loop, synchronously, as things happen: they
must be quick and must not block (queue work for later if needed). One that raises is
logged once and ignored from then on; it never breaks a run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from brain.results import FINISHED_RUN, RunResult, RunStatus, StepStatus
from brain.runner.events import (
    EventHandler,
    LogEvent,
    LogHandler,
    ProgressEvent,
    RunEvent,
    StepEvent,
    WaitEvent,
)

log = logging.getLogger("brain.runner")
#: One line per run start and end and per step failure (SPEC §14), with the run's fields as
#: record attributes (``run_id``, ``workflow``, ``step``, ``status``) for the JSON format.
run_log = logging.getLogger("brain.runs")


class RunObserver(Protocol):
    """What the runner tells of a run as it executes. Every method does nothing by
    default: subclass this and override what you need.

    >>> class Ends(RunObserver):                     # doctest: +SKIP
    ...     def step_ended(self, event: StepEvent) -> None:
    ...         print(event.step, event.status)
    >>> wf.run(observers=[Ends()])                   # doctest: +SKIP
    """

    def run_started(self, run: RunEvent) -> None:
        """An execution of ``run`` began (its first, a resume, or after its waits)."""
        return None

    def run_ended(self, run: RunEvent, result: RunResult, seconds: float) -> None:
        """The execution that :meth:`run_started` announced returned or raised:
        ``result`` as the store has it (``waiting`` when only waits were left, ``running``
        when the lease was lost or the run could not be read after a raise: whoever takes
        it next ends it); ``seconds`` it took (for a run continued after its waits, the
        whole run's time from its start)."""
        return None

    def step_started(self, event: StepEvent) -> None:
        """A step (or a ``for_each`` instance) began its tries (``status == "running"``)."""
        return None

    def step_ended(self, event: StepEvent) -> None:
        """A try ended and another follows (``status == "retrying"``), or the step ended in
        its final status (with its tries, error, seconds, and an LLM step's usage and
        model)."""
        return None

    def step_waiting(self, event: WaitEvent) -> None:
        """A step began to wait (a sleep, an approval, a signal)."""
        return None

    def step_log(self, event: LogEvent) -> None:
        """New lines of a step's log, as they are stored."""
        return None

    def progress(self, event: ProgressEvent) -> None:
        """A step's latest progress report, as it is stored."""
        return None


class Observers(RunObserver):
    """Several observers as one: each call goes to every observer in order; one that raises
    is logged (once per observer) and the others and the run go on."""

    def __init__(self, observers: Iterable[RunObserver] = ()) -> None:
        self.observers: list[RunObserver] = list(observers)
        self._complained: set[int] = set()

    def __bool__(self) -> bool:
        return bool(self.observers)

    def add(self, observer: RunObserver) -> None:
        """Tell ``observer`` too, from the next announcement on."""
        if observer not in self.observers:
            self.observers.append(observer)

    def joined(self, *more: RunObserver | None) -> Observers:
        """These observers and ``more`` (``None`` left out), as a new fan-out."""
        return Observers([*self.observers, *(o for o in more if o is not None)])

    def _tell(self, method: str, *args: object) -> None:
        for observer in self.observers:
            try:
                getattr(observer, method)(*args)
            except Exception as exc:
                if id(observer) not in self._complained:
                    self._complained.add(id(observer))
                    log.warning("observer %r failed in %s (%s: %s); its further errors are "
                                "ignored", observer, method, type(exc).__name__, exc)

    def run_started(self, run: RunEvent) -> None:
        self._tell("run_started", run)

    def run_ended(self, run: RunEvent, result: RunResult, seconds: float) -> None:
        self._tell("run_ended", run, result, seconds)

    def step_started(self, event: StepEvent) -> None:
        self._tell("step_started", event)

    def step_ended(self, event: StepEvent) -> None:
        self._tell("step_ended", event)

    def step_waiting(self, event: WaitEvent) -> None:
        self._tell("step_waiting", event)

    def step_log(self, event: LogEvent) -> None:
        self._tell("step_log", event)

    def progress(self, event: ProgressEvent) -> None:
        self._tell("progress", event)


class Callbacks(RunObserver):
    """The ``on_event``/``on_log`` callbacks of ``wf.run()`` as an observer: ``on_event``
    gets every step's change of status (a wait as ``waiting``), ``on_log`` new log lines."""

    def __init__(self, on_event: EventHandler | None = None,
                 on_log: LogHandler | None = None) -> None:
        self.on_event = on_event
        self.on_log = on_log

    def __repr__(self) -> str:
        return f"Callbacks({self.on_event!r}, {self.on_log!r})"

    def step_started(self, event: StepEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)

    step_ended = step_started

    def step_waiting(self, event: WaitEvent) -> None:
        if self.on_event is not None:
            self.on_event(StepEvent(event.run_id, event.step, event.kind,
                                    StepStatus.WAITING.value, event.tries,
                                    workflow=event.workflow))

    def step_log(self, event: LogEvent) -> None:
        if self.on_log is not None:
            self.on_log(event)


def callbacks(on_event: EventHandler | None, on_log: LogHandler | None) -> Callbacks | None:
    """:class:`Callbacks` for the handlers given, ``None`` when neither is."""
    return None if on_event is None and on_log is None else Callbacks(on_event, on_log)


class RunLog(RunObserver):
    """The run log lines a serving process writes (logger ``brain.runs``): each run's
    start, wait and end, and each failed try, with ``run_id``, ``workflow``, ``step`` and
    ``status`` as record attributes (the JSON log format shows them)."""

    def run_started(self, run: RunEvent) -> None:
        run_log.info("run %s of %s %s", run.run_id, run.workflow, run.how,
                     extra={"run_id": run.run_id, "workflow": run.workflow})

    def run_ended(self, run: RunEvent, result: RunResult, seconds: float) -> None:
        fields = {"run_id": run.run_id, "workflow": run.workflow, "status": str(result.status)}
        if result.status == RunStatus.WAITING:
            waits = [s.name for s in result.steps.values() if s.status == StepStatus.WAITING]
            run_log.info("run %s of %s waits (%s)", run.run_id, run.workflow, ", ".join(waits),
                         extra=fields)
        if result.status in FINISHED_RUN:
            ended = "run %s of %s %s in %.2fs"
            args: tuple[object, ...] = (run.run_id, run.workflow, result.status, seconds)
            if result.error:
                ended, args = ended + ": %s", (*args, result.error)
            run_log.log(logging.INFO if result.succeeded else logging.WARNING, ended, *args,
                        extra=fields)

    def step_ended(self, event: StepEvent) -> None:
        if event.status in ("failed", "retrying"):
            then = ", retrying" if event.status == "retrying" else ""
            run_log.warning("run %s of %s: step %r failed (try %d%s): %s", event.run_id,
                            event.workflow, event.step, event.tries, then, event.error,
                            extra={"run_id": event.run_id, "workflow": event.workflow,
                                   "step": event.step})


def announce_start(observers: RunObserver,
                   run: RunEvent) -> Callable[[RunResult | None], None]:
    """Tell ``observers`` that ``run``'s execution began; the function returned tells them
    it ended, with the run's result and the time it took (a run ``continued`` after its
    waits counts from its start). Given ``None`` (the execution raised and the run could
    not be read: see :func:`announce_raised`) it tells them the run is ``running``: whoever
    takes it next ends it, as when a lease is lost."""
    observers.run_started(run)
    t0 = time.monotonic()

    def ended(result: RunResult | None) -> None:
        took = time.monotonic() - t0
        if result is None:
            result = RunResult(run_id=run.run_id, workflow=run.workflow,
                               status=RunStatus.RUNNING)
        elif run.how == "continued" and result.started_at and result.ended_at:
            took = (result.ended_at - result.started_at).total_seconds()
        observers.run_ended(run, result, took)

    return ended


#: How long the end of an execution that raised waits to read the run before telling it
#: ``running`` (its database may be what failed).
READ_AFTER_RAISE_SECONDS = 5.0


async def announce_raised(ended: Callable[[RunResult | None], None],
                          read: Callable[[], Awaitable[RunResult]]) -> None:
    """Tell ``ended`` (from :func:`announce_start`) of an execution that raised: the run as
    ``read`` finds it (an interrupted run is recorded ``cancelled``), or left ``running``
    when it cannot be read within :data:`READ_AFTER_RAISE_SECONDS`. Never raises: the
    caller goes on raising what stopped the execution."""
    try:
        result: RunResult | None = await asyncio.wait_for(asyncio.shield(read()),
                                                          READ_AFTER_RAISE_SECONDS)
    except BaseException:
        result = None
    ended(result)
