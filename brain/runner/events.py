"""Progress events the runner emits while a run executes (for live output): a step's
change of status, and new lines of its log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from brain.results import LogLine


@dataclass(frozen=True)
class StepEvent:
    """A step changed status: ``running``, ``retrying``, or its final status."""

    run_id: str
    step: str
    kind: str
    status: str
    tries: int = 0
    error: str | None = None
    seconds: float | None = None
    #: At a step's end: the tokens it spent (an LLM step, SPEC §18) and the model it asked.
    usage: dict[str, int] | None = None
    model: str | None = None


EventHandler = Callable[[StepEvent], None]


@dataclass(frozen=True)
class LogEvent:
    """New lines of a step's log, as they are stored (at least once a second while the
    step runs, and when it ends)."""

    run_id: str
    step: str
    lines: tuple[LogLine, ...]


LogHandler = Callable[[LogEvent], None]
