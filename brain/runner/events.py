"""Progress events the runner emits while a run executes (for live output)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


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


EventHandler = Callable[[StepEvent], None]
