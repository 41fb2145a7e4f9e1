"""The waits of one execution (SPEC §16): which steps wait, when the run may be let go of,
and noticing the waits that ended while the run still executes.

A step that waits is recorded ``waiting`` and then awaits its end here. The
execution lets go of the run (``waiting``, no lease) once nothing but waits is
left: every unit of work is either done or awaiting a wait. Work is counted in
:attr:`WaitRoom.busy`: a unit counts while it runs (:meth:`WaitRoom.working`),
and not while it awaits a wait or its own instances (:meth:`WaitRoom.aside`).

A wait ends in the store (a timer, a decision, a signal), never here: the
store counts the run's ended waits (``wakes``). While the run executes, the
room looks at that count twice a second and hands the steps that ended to the
steps awaiting them. The run is let go of only while the count is what the room
last read, so no ending is missed between the look and the letting go.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from brain._clock import utcnow

if TYPE_CHECKING:
    from brain.store.interfaces import WaitStore

#: How often an executing run looks for waits that ended (its wake count).
LOOK_SECONDS = 0.5

#: ``(status, output, error)`` of a step that waited, as the store has it.
WaitState = tuple[str, str | None, str | None]


@dataclass(frozen=True)
class WaitsFound:
    """What a run that is taken again has of waits: its wake count (read before its
    steps), the steps still ``waiting``, and those whose wait ended failed (by name, with
    the error: the run fails with the first)."""

    wakes: int = 0
    waiting: frozenset[str] = frozenset()
    failed: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    async def read(cls, store: WaitStore, run_id: str) -> WaitsFound:
        """Read them (the wake count first)."""
        wakes = await store.run_wakes(run_id)
        states = await store.waited_steps(run_id)
        return cls(wakes, frozenset(n for n, (status, _, _) in states.items()
                                    if status == "waiting"),
                   {n: error or status for n, (status, _, error) in states.items()
                    if status == "failed"})


async def fire_when_due(store: WaitStore, *, run_id: str | None = None,
                        slack: timedelta = timedelta(0),
                        limit: int = 500) -> tuple[list[tuple[str, str]], float | None]:
    """Fire the due timers (of ``run_id`` alone, when given), looking from ``slack`` before
    the next one's due time by this machine's clock (whether it is due is the database's
    clock's say on PostgreSQL). Returns the ``(run id, step)`` of the steps it ended, and
    the seconds until the next timer is due by this clock (at least 0.05 s, so that
    another clock's "not yet" is not asked again at once; ``None``: no timer)."""
    due = await store.next_timer(run_id)
    if due is None:
        return [], None
    fired: list[tuple[str, str]] = []
    if due <= utcnow() + slack:
        fired = await store.fire_due_timers(run_id=run_id, limit=limit)
    return fired, max((due - utcnow()).total_seconds(), 0.05)


class WaitRoom:
    """See the module. ``seen``: the run's wake count as last read, before its steps."""

    def __init__(self, store: WaitStore, run_id: str, seen: int = 0) -> None:
        self.store = store
        self.run_id = run_id
        self.seen = seen
        self.busy = 0
        #: The steps awaiting their end now, by name.
        self.waiting: dict[str, asyncio.Future[WaitState]] = {}
        #: The steps that waited and have ended, as last read.
        self.ended: dict[str, WaitState] = {}
        #: Set while nothing but waits is left.
        self.idle = asyncio.Event()

    def _check(self) -> None:
        # A wait that ended but whose step has not resumed yet is work about to happen.
        futures = self.waiting.values()
        if self.busy == 0 and futures and all(not f.done() for f in futures):
            self.idle.set()
        else:
            self.idle.clear()

    @property
    def is_idle(self) -> bool:
        """Whether nothing but waits is left."""
        self._check()
        return self.idle.is_set()

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """Count a unit of work (a step, a block, a block's instance) while it runs."""
        self.busy += 1
        self._check()
        try:
            yield
        finally:
            self.busy -= 1
            self._check()

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """Stop counting the current unit while it awaits something that is counted on its
        own (a wait, or its instances)."""
        self.busy -= 1
        self._check()
        try:
            yield
        finally:
            self.busy += 1
            self._check()

    async def wait(self, name: str) -> WaitState:
        """Await the end of step ``name``, which the store has ``waiting``."""
        ended = self.ended.get(name)  # (only steps whose wait ended are kept there)
        if ended is not None:
            return ended
        future = self.waiting.get(name)
        if future is None or future.done():
            future = self.waiting[name] = asyncio.get_running_loop().create_future()
        try:
            with self.aside():
                return await future
        finally:
            self.waiting.pop(name, None)
            self._check()

    def hand_over(self, name: str, state: WaitState) -> None:
        """The end of step ``name`` as just read (a child run that ended in this process,
        SPEC §22): handed to the step if it awaits it. The wake count is left as last read,
        so letting go of the run still looks first."""
        future = self.waiting.get(name)
        if state[0] not in ("", "waiting") and future is not None and not future.done():
            future.set_result(state)
            self._check()

    async def look(self) -> bool:
        """Read the wake count and, when it moved, the waited steps; hand those that ended
        to the steps awaiting them. ``True`` when it moved."""
        wakes = await self.store.run_wakes(self.run_id)
        if wakes == self.seen:
            return False
        states = await self.store.waited_steps(self.run_id)
        self.seen = wakes
        self.ended = {name: state for name, state in states.items() if state[0] != "waiting"}
        for name, future in list(self.waiting.items()):
            state = self.ended.get(name)
            if state is not None and not future.done():
                future.set_result(state)
        self._check()
        return True

    async def watch(self) -> None:
        """While steps wait, fire the run's own due timers (a sleep in parallel with steps
        that still run ends on time, with or without a serving process; whoever fires a
        timer first ends its step, once) and look for waits that ended. The execution
        cancels this when it ends."""
        delay = LOOK_SECONDS
        while True:
            await asyncio.sleep(delay)
            delay = LOOK_SECONDS
            if not self.waiting:
                continue
            with contextlib.suppress(Exception):  # a busy database: the next look
                _, wait = await fire_when_due(self.store, run_id=self.run_id)
                delay = min(delay, wait or delay)
                await self.look()
