"""Knowing at once that a run of this process changed: :class:`RunChanges`, an observer.

Whoever follows a run as it goes (an MCP ``tools/call`` reporting progress, SPEC §23) reads
the run from the store — which sees every process's runs — and waits between reads. With a
service, the executions of this very process say when something happened, so the next
read comes at once instead of at the next look.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from brain.runner.observe import RunObserver

if TYPE_CHECKING:
    from brain.results import RunResult
    from brain.runner.events import RunEvent, StepEvent, WaitEvent


class RunChanges(RunObserver):
    """A future that is done at the next change of any run this process executes: a step
    ended (or retried) or began to wait, or an execution ended. A step's start is not one:
    followers count what ended, and each wake costs a read."""

    def __init__(self) -> None:
        self._next: asyncio.Future[None] | None = None

    def next_change(self) -> asyncio.Future[None]:
        """Done at the next change (a shield: cancelling it cancels nobody else's)."""
        if self._next is None or self._next.done():
            self._next = asyncio.get_running_loop().create_future()
        return asyncio.shield(self._next)

    def _changed(self) -> None:
        if self._next is not None and not self._next.done():
            self._next.set_result(None)

    def step_ended(self, event: StepEvent) -> None:
        self._changed()

    def step_waiting(self, event: WaitEvent) -> None:
        self._changed()

    def run_ended(self, run: RunEvent, result: RunResult, seconds: float) -> None:
        self._changed()
