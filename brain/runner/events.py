"""What the runner announces while a run executes (see :mod:`brain.runner.observe`): a
run's start and end, a step's change of status, its waits, new lines of its log and its
progress. Plain frozen data, built once per announcement and shared by every observer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from brain.results import LogLine


@dataclass(frozen=True)
class RunEvent:
    """An execution of a run began: ``how`` is ``started`` (its first execution),
    ``resumed`` (its executor died) or ``continued`` (woken from its waits)."""

    run_id: str
    workflow: str
    how: str = "started"
    #: What triggered the run (``manual``, ``webhook``, ``schedule``, ``failure``...).
    trigger_event: str = ""
    retry_of: str | None = None
    #: Its trace context as stored with it (SPEC §25), if any.
    trace_context: str | None = None


@dataclass(frozen=True)
class StepEvent:
    """A step changed status: ``running``, ``retrying``, ``waiting``, or its final status."""

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
    workflow: str = ""
    #: A step with a cache (SPEC §26), at its end: ``hit`` (answered from the cache, having
    #: saved ``saved_usage``) or ``miss`` (it ran).
    cache: str | None = None
    saved_usage: dict[str, int] | None = None


EventHandler = Callable[[StepEvent], None]


@dataclass(frozen=True)
class WaitEvent:
    """A step began to wait (SPEC §16): a ``sleep`` until ``until``, an ``approval``, or a
    ``signal`` with its ``key``; ``until`` is when its timer falls due (a sleep's end or a
    wait's timeout), if it has one; ``shown`` is its ``waiting_for`` in the run's JSON."""

    run_id: str
    workflow: str
    step: str
    kind: str
    tries: int
    until: datetime | None = None
    signal: str | None = None
    key: str | None = None
    shown: dict[str, Any] | None = None


@dataclass(frozen=True)
class LogEvent:
    """New lines of a step's log, as they are stored (at least once a second while the
    step runs, and when it ends)."""

    run_id: str
    step: str
    lines: tuple[LogLine, ...]
    workflow: str = ""


LogHandler = Callable[[LogEvent], None]


@dataclass(frozen=True)
class ProgressEvent:
    """A step's latest progress report (an MCP server's, SPEC §17), as it is stored:
    ``{"progress", "total", "message"}``."""

    run_id: str
    workflow: str
    step: str
    progress: dict[str, Any]
