"""A run's timeline: one labelled lane per step on one time axis (pure: run + now → rows).

Every step has a lane, started or not, so a step that has not started yet (``pending``),
one that waits (``waiting``) and one that runs (``running``, its bar reaching *now*)
read differently at a glance. The axis runs from the run's start to a round time at or
after its end (or now), in at most five equal intervals, so the stylesheet can draw
the grid (``ticks-N``) with no markup per lane. Positions are percentages, drawn by the
template as SVG attributes (the page's CSP forbids inline styles).

A retry keeps the steps that succeeded in the run it retries, with their times from
then (SPEC §13). Drawn on this run's axis they would stretch it back to the earlier run,
and squeeze this run's own work into a sliver: so a kept step's lane has no bar, only
``kept`` and how long it took back then, and the axis spans this run's own work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from brain.results import RunResult, StepResult, StepStatus, base_name

#: Tick spacings to choose from, in seconds (the smallest giving at most MAX_TICKS ticks).
_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120,
          300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)
MAX_TICKS = 5


@dataclass(frozen=True)
class Lane:
    """A step's row: its bar (``left``/``width`` in percent, ``None`` before it started)."""

    name: str
    status: str
    instance: bool
    left: float | None
    width: float | None
    note: str
    #: Kept from the run this one retries (it did not run here): drawn without a bar.
    kept: bool = False


@dataclass(frozen=True)
class Tick:
    """A mark on the time axis, ``at`` percent of the span."""

    at: float
    label: str


@dataclass(frozen=True)
class Timeline:
    """The lanes, and the axis's marks: ``len(ticks) - 1`` equal intervals."""

    lanes: list[Lane]
    ticks: list[Tick]


def took(seconds: float | None) -> str:
    """A duration as people say it: ``4 ms``, ``0.02 s``, ``1.5 s``, ``12 s``, ``2 min 5 s``,
    ``1 h 4 min``."""
    if seconds is None:
        return ""
    if seconds < 0.01:
        return f"{max(seconds, 0) * 1000:.0f} ms"
    if seconds < 1:
        return f"{seconds:.2f} s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    whole = round(seconds)
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes} min" + (f" {rest} s" if rest else "")
    hours, rest = divmod(whole // 60, 60)
    return f"{hours} h" + (f" {rest} min" if rest else "")


def _tick_label(seconds: float) -> str:
    if 0 < seconds < 0.1:
        return f"{round(seconds * 1000):g} ms"
    if seconds < 60:
        return f"{round(seconds, 3):g} s"
    return took(seconds)


def _axis(span: float) -> tuple[float, int]:
    """The axis for ``span`` seconds: a round interval and how many of them cover it."""
    step = next((s for s in _STEPS if math.ceil(span / s - 1e-9) <= MAX_TICKS), None) \
        or math.ceil(span / MAX_TICKS / 86400) * 86400
    return step, max(math.ceil(span / step - 1e-9), 1)


def ticks(span: float) -> list[Tick]:
    """Marks at round times (0, 1 s, 2 s, ... or 0, 5 min, ...), the last at or after ``span``
    seconds; at most MAX_TICKS intervals."""
    step, intervals = _axis(span)
    return [Tick(at=round(k / intervals * 100, 2), label=_tick_label(k * step))
            for k in range(intervals + 1)]


def kept_step(run: RunResult, step: StepResult) -> bool:
    """Whether ``step`` of a retry was kept from the run it retries (SPEC §13): it succeeded
    there and was copied as it ended, before this run was created, so it ended before that;
    every step this run executes itself starts after it was created."""
    return (run.retry_of is not None and run.created_at is not None
            and step.status == StepStatus.SUCCEEDED and step.ended_at is not None
            and step.ended_at <= run.created_at)


def timeline(run: RunResult, now: datetime) -> Timeline:
    """The lanes of ``run``'s steps (call order) and the axis, as of ``now``: the axis spans
    this run's own work (a retry's kept steps are drawn apart, see the module)."""
    kept = {name for name, step in run.steps.items() if kept_step(run, step)}
    start = run.started_at or run.created_at or now
    end = run.ended_at or now
    starts = [s.started_at for n, s in run.steps.items() if s.started_at and n not in kept]
    start = min([start, *starts])
    elapsed = max((end - start).total_seconds(), 0.001)
    interval, count = _axis(elapsed)
    span = interval * count  # the axis's full length: the last mark's time
    lanes = []
    for name, step in run.steps.items():
        status = str(step.status)
        instance = base_name(name) != name
        if name in kept:
            ran = step.started_at and step.ended_at and took(
                (step.ended_at - step.started_at).total_seconds())
            lanes.append(Lane(name, status, instance, None, None,
                              f"kept · {ran}" if ran else "kept", kept=True))
            continue
        if step.started_at is None:
            lanes.append(Lane(name, status, instance, None, None, status))
            continue
        stop = step.ended_at or end
        left = min(max((step.started_at - start).total_seconds() / span * 100, 0.0), 99.5)
        width = min(max((stop - step.started_at).total_seconds() / span * 100, 0.5), 100 - left)
        seconds = (stop - step.started_at).total_seconds()
        note = took(seconds) if step.ended_at else f"{status} {took(seconds)}"
        lanes.append(Lane(name, status, instance, round(left, 2), round(width, 2), note))
    return Timeline(lanes=lanes, ticks=ticks(elapsed))
