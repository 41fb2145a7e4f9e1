"""Rate limits at work (SPEC §26): a step with ``limit=NAME`` waits for room before each
request, holding its executor slot and saying so in its log, and gives back what its
request really spent when it is answered.

Where a limit's uses are kept depends on the store: on PostgreSQL in the database, so every
process sharing it counts against one window (:class:`StoreLimits`, over
:mod:`brain.store.limits`); on SQLite in this process (:data:`PROCESS_LIMITS`). The window's
rule is :meth:`brain.dsl.model.Limit.wait_for_room` either way. Nothing here runs for a
workflow without limits.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from brain.runner.texts import internal_error

if TYPE_CHECKING:
    from brain.dsl.cost import Limit
    from brain.dsl.model import StepSpec
    from brain.executors.steplog import StepLog
    from brain.store.interfaces import CostStore

log = logging.getLogger("brain.runner")

#: The longest a waiting step sleeps before it looks again (a use settled early, by this
#: process or another, may have made room sooner than the window said).
LOOK_AGAIN_SECONDS = {"process": 0.1, "store": 0.5}
#: How long a request counts at most before it is answered, for a step without a timeout.
DEFAULT_HOLD_SECONDS = 600.0


class LimitBook(Protocol):
    """Where the uses of limits are kept: :meth:`take` room, :meth:`settle` a use once its
    request is answered, :meth:`pause` a limit after a provider's 429."""

    kind: str

    async def take(self, name: str, limit: Limit, tokens: int, hold: float
                   ) -> tuple[str | None, float]:
        """``(use id, 0)`` when one more request fits now, else ``(None, seconds to wait)``."""
        ...

    async def settle(self, uses: Sequence[str], per: float, tokens: Sequence[int | None]) -> None:
        """The requests of ``uses`` were answered: each counts ``per`` seconds more."""
        ...

    async def pause(self, name: str, seconds: float) -> None:
        """No request of limit ``name`` for ``seconds``."""
        ...

    async def hold(self, uses: Sequence[str], most: float) -> None:
        """The requests of ``uses`` may still be sent by work that outlived its try (a sync
        function's thread): they count until :meth:`release`, for ``most`` seconds more at
        most where the uses outlive this process (in the database)."""
        ...

    def release(self, uses: Sequence[str], per: float, loop: asyncio.AbstractEventLoop) -> None:
        """From any thread: the work holding ``uses`` ended; they count ``per`` seconds
        more (settled on ``loop`` when the book needs one, if it still runs)."""
        ...


class ProcessLimits:
    """The limits' windows of this process (SQLite): uses in memory, under a lock (runs
    of one process may execute on several event loops)."""

    kind = "process"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: limit name → use id → ``[until, requests, tokens]``; and each limit's pause.
        self._uses: dict[str, dict[str, list[float]]] = {}
        self._paused: dict[str, float] = {}

    async def take(self, name: str, limit: Limit, tokens: int, hold: float
                   ) -> tuple[str | None, float]:
        """See :meth:`LimitBook.take`."""
        now = time.monotonic()
        with self._lock:
            uses = self._uses.setdefault(name, {})
            for use in [u for u, (until, _, _) in uses.items() if until <= now]:
                del uses[use]
            wait = limit.wait_for_room([(u[0], int(u[1]), int(u[2])) for u in uses.values()],
                                       tokens, now, self._paused.get(name, 0.0))
            if wait > 0:
                return None, wait
            use = uuid.uuid4().hex
            uses[use] = [now + limit.per + hold, 1, max(tokens, 0)]
            return use, 0.0

    async def settle(self, uses: Sequence[str], per: float, tokens: Sequence[int | None]) -> None:
        """See :meth:`LimitBook.settle`."""
        self._settle(uses, per, tokens)

    def _settle(self, uses: Sequence[str], per: float, tokens: Sequence[int | None]) -> None:
        now = time.monotonic()
        with self._lock:
            for window in self._uses.values():
                for use, spent in zip(uses, tokens, strict=True):
                    found = window.get(use)
                    if found is not None:
                        found[0] = now + per
                        if spent is not None:
                            found[2] = spent

    async def pause(self, name: str, seconds: float) -> None:
        """See :meth:`LimitBook.pause`."""
        with self._lock:
            until = time.monotonic() + seconds
            self._paused[name] = max(self._paused.get(name, 0.0), until)

    async def hold(self, uses: Sequence[str], most: float) -> None:
        """See :meth:`LimitBook.hold`: here until released, however long (the uses and the
        threads holding them end with this process)."""
        with self._lock:
            for window in self._uses.values():
                for use in uses:
                    found = window.get(use)
                    if found is not None:
                        found[0] = math.inf

    def release(self, uses: Sequence[str], per: float, loop: asyncio.AbstractEventLoop) -> None:
        """See :meth:`LimitBook.release` (no loop needed: the windows are under a lock)."""
        self._settle(uses, per, [None] * len(uses))


#: This process's windows, shared by every run it executes on SQLite.
PROCESS_LIMITS = ProcessLimits()


class StoreLimits:
    """The limits' windows in the database (PostgreSQL): shared by every process on it."""

    kind = "store"

    def __init__(self, store: CostStore) -> None:
        self.store = store

    async def take(self, name: str, limit: Limit, tokens: int, hold: float
                   ) -> tuple[str | None, float]:
        """See :meth:`LimitBook.take`."""
        return await self.store.limit_take(name, limit, tokens, hold)

    async def settle(self, uses: Sequence[str], per: float, tokens: Sequence[int | None]) -> None:
        """See :meth:`LimitBook.settle`."""
        await self.store.limit_settle(uses, per, tokens)

    async def pause(self, name: str, seconds: float) -> None:
        """See :meth:`LimitBook.pause`."""
        await self.store.limit_pause(name, seconds)

    async def hold(self, uses: Sequence[str], most: float) -> None:
        """See :meth:`LimitBook.hold`."""
        await self.store.limit_settle(uses, most, [None] * len(uses))

    def release(self, uses: Sequence[str], per: float, loop: asyncio.AbstractEventLoop) -> None:
        """See :meth:`LimitBook.release`: settled on ``loop``; a loop (or a store) gone by
        then leaves the uses to the bound :meth:`hold` gave them."""
        try:
            done = asyncio.run_coroutine_threadsafe(
                self.store.limit_settle(uses, per, [None] * len(uses)), loop)
        except RuntimeError:  # the loop is closed
            return
        done.add_done_callback(lambda f: f.cancelled() or f.exception())


def book_for(store: object) -> LimitBook:
    """Where a run on ``store`` keeps its limits' uses: the database on PostgreSQL, this
    process on SQLite."""
    if getattr(store, "dialect", None) == "postgresql":
        return StoreLimits(store)  # type: ignore[arg-type]
    return PROCESS_LIMITS


class RunLimits:
    """The limits of one run's workflow, and the book their uses go to."""

    def __init__(self, book: LimitBook, limits: Mapping[str, Limit]) -> None:
        self.book = book
        self.limits = limits

    def gate(self, spec: StepSpec, log: StepLog) -> StepGate | None:
        """The gate of a step with ``limit=`` (``None`` for one without)."""
        if spec.limit is None:
            return None
        limit = self.limits.get(spec.limit)
        if limit is None:  # traced with it, so only a spec made by hand lacks it
            return None
        hold = spec.timeout_seconds or DEFAULT_HOLD_SECONDS
        return StepGate(self.book, spec.limit, limit, hold, log)


class StepGate:
    """One step's passage through its limit (an :class:`~brain.executors.base.RequestGate`):
    :meth:`enter` before each request; each request is settled as soon as it is answered
    (:meth:`answered`, by an executor that makes several) or when its try ends
    (:meth:`leave`), cut off (:meth:`cut_off`), or, when the try's work outlives it
    (:meth:`outlived`), when that work ends."""

    def __init__(self, book: LimitBook, name: str, limit: Limit, hold: float,
                 log: StepLog) -> None:
        self.book = book
        self.name = name
        self.limit = limit
        self.hold = hold
        self.log = log
        self._open: list[str] = []
        #: The step's tokens already given back to the limit (its log counts them all).
        self._counted = spent_tokens(log.usage)
        self._outlives: Callable[[Callable[[], None]], None] | None = None

    async def enter(self, tokens: int = 0) -> None:
        """Wait for room for one request reserving ``tokens`` (saying so in the step's log
        when it must wait), and take it."""
        said = False
        while True:
            use, wait = await self.book.take(self.name, self.limit, tokens, self.hold)
            if use is not None:
                self._open.append(use)
                return
            if not said:
                self.log.say(f"waiting for limit {self.name} ({_seconds(wait)})")
                said = True
            look = LOOK_AGAIN_SECONDS[self.book.kind]
            # A little jitter: processes that wait for one window do not all look at once.
            await asyncio.sleep(min(wait, look) + random.uniform(0, look / 10))

    async def answered(self) -> None:
        """The requests let through so far were answered: they count ``per`` seconds from
        now, with the tokens the step's log counted since (unknown: the reservations
        stand)."""
        uses, self._open = self._open, []
        if not uses:
            return
        usage = self.log.usage
        tokens = None
        if usage is not None:
            spent = spent_tokens(usage)
            tokens, self._counted = spent - self._counted, spent
        share = None if tokens is None else [tokens // len(uses)] * len(uses)
        if share is not None and tokens is not None:
            share[-1] += tokens - sum(share)
        await self.book.settle(uses, self.limit.per, share or [None] * len(uses))

    def outlived(self, on_end: Callable[[Callable[[], None]], None]) -> None:
        """The try ends but its work goes on (a sync function's thread, which may still
        send its request): its requests count until that work ends, which ``on_end(callback)``
        reports by calling ``callback`` (from any thread)."""
        self._outlives = on_end

    async def leave(self) -> None:
        """The try ended: its requests not settled yet count ``per`` seconds from now
        (from the end of its work, if it outlived the try)."""
        if self._outlives is not None:
            await self._hold()
        else:
            await self.answered()

    async def cut_off(self) -> None:
        """The try was cancelled: its requests may have reached the server, so they count
        ``per`` seconds from now (not ``per`` plus the step's timeout), their reservations
        standing; from the end of its work, if it outlived the try.

        Shielded (the task is being cancelled); a failure to settle leaves them to their
        bound, per plus the step's timeout, and is no failure of the step."""
        try:
            await asyncio.shield(self._cut_off())
        except Exception as exc:
            log.warning("limit %s: a cancelled request was not settled: %s", self.name,
                        internal_error(exc))

    async def _cut_off(self) -> None:
        if self._outlives is not None:
            await self._hold()
            return
        uses, self._open = self._open, []
        if uses:
            await self.book.settle(uses, self.limit.per, [None] * len(uses))

    async def _hold(self) -> None:
        uses, self._open = self._open, []
        on_end, self._outlives = self._outlives, None
        if not uses or on_end is None:
            return
        await self.book.hold(uses, self.limit.per + DEFAULT_HOLD_SECONDS)
        book, per, loop = self.book, self.limit.per, asyncio.get_running_loop()
        on_end(lambda: book.release(uses, per, loop))

    async def pause(self, seconds: float) -> None:
        """A provider said too many requests: no request of this limit for ``seconds``."""
        self.log.say(f"limit {self.name} paused for {_seconds(seconds)} (the provider's "
                     f"Retry-After)")
        await self.book.pause(self.name, seconds)


def _seconds(value: float) -> str:
    if math.isinf(value):  # a request held by work that outlived its try
        return "until a request still in flight ends"
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def spent_tokens(usage: Mapping[str, int] | None) -> int:
    """All the tokens a step's usage counts."""
    if not usage:
        return 0
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
