"""Fire times of ``cron`` and ``every`` schedules, and the loop that fires them (SPEC §5).

Fire times are pure functions of the trigger, so every server sharing a
database computes the same UTC instants and the store's unique
``(workflow, trigger_key, fire_time)`` claim keeps each fire exactly-once::

    >>> from datetime import datetime, UTC
    >>> from brain import cron, every
    >>> next_fire(cron("30 3 * * *", timezone="Europe/Bucharest"),
    ...           datetime(2026, 3, 28, 12, tzinfo=UTC)).isoformat()
    '2026-03-29T01:00:00+00:00'
    >>> next_fire(every(seconds=300), datetime(2026, 1, 1, 0, 7, tzinfo=UTC)).isoformat()
    '2026-01-01T00:10:00+00:00'

Rules (where SPEC §5 is silent, these are the decisions, see also docs):

* ``every(seconds=N)`` fires at exact multiples of N seconds since the Unix
  epoch, computed in integer microseconds.
* ``cron`` uses standard crontab meaning, matched by APScheduler 3.x
  (``CronTrigger.from_crontab``) on the zone's wall clock, with three fixes
  APScheduler 3.x needs: day-of-week numbers are crontab's (0 and 7 are
  Sunday; APScheduler 3.x counts from Monday), a day-of-month and a
  day-of-week both restricted match either (``0 0 1 * mon``: the 1st and every
  Monday, as in Vixie cron), and DST is handled below.
* DST gap (clocks jump forward): a wall time that does not exist fires once,
  at the first instant after the gap (Bucharest 2026-03-29: 03:30 → 04:00
  EEST = 01:00 UTC). Several gap times collapse into that one fire.
* DST fold (clocks go back): a wall time that happens twice fires once, at
  its first occurrence (Bucharest 2026-10-25: 03:30 EEST = 00:30 UTC).
* Catch-up (:func:`due_fires`) counts from the last claimed fire. A fire is
  *current* if it is at most :data:`CURRENT_FIRE_GRACE` old; older ones are
  *missed*. ``none`` runs only a current fire; ``latest`` the newest missed
  (or current) fire; ``all`` each, at most :data:`MAX_CATCHUP` — the newest
  ones, so a long outage still ends with the most recent fire. A schedule
  never claimed before has missed nothing: only a current fire runs.
  ``every()`` has no ``catchup`` and behaves as ``latest``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from brain._clock import utcnow
from brain.crontab import parse_cron
from brain.dsl.triggers import CronTrigger, EveryTrigger, WatchTrigger, WebhookTrigger

__all__ = [
    "CURRENT_FIRE_GRACE",
    "EPOCH",
    "MAX_CATCHUP",
    "FireCallback",
    "LastFireLookup",
    "ScheduleSpec",
    "Scheduler",
    "due_fires",
    "fires_between",
    "latest_fires",
    "next_fire",
    "parse_cron",
    "trigger_key",
]

log = logging.getLogger("brain.triggers")

ScheduleSpec = CronTrigger | EveryTrigger
"""The triggers that have fire times."""

FireCallback = Callable[[str, str, Any, datetime], Awaitable[None]]
"""``fire(workflow, trigger_key, trigger, fire_time)``: claim the fire and queue its run."""

LastFireLookup = Callable[[str, str], Awaitable[datetime | None]]
"""``last_fire(workflow, trigger_key)``: the latest claimed fire time (the store's ``last_fire``)."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
CURRENT_FIRE_GRACE = timedelta(seconds=5)
"""How old a fire may be and still count as the current one (not a missed one)."""
MAX_CATCHUP = 100
"""``catchup="all"`` runs at most this many missed fires (the newest)."""
MAX_SLEEP_SECONDS = 30.0
"""The loop re-reads the clock at least this often, so wall-clock steps (NTP) are noticed."""

_MICRO = timedelta(microseconds=1)
_SCAN_LIMIT = 1_000_000  # a safety bound on one backward-search window


def trigger_key(trig: CronTrigger | EveryTrigger | WebhookTrigger | WatchTrigger) -> str:
    """The identity of a workflow's trigger, under which its fire history is stored (SPEC §5).

    Its ``name=`` when given (``"name:nightly"``), else its content, never its
    position in the list, so adding or reordering triggers keeps each one's
    catch-up history. Options that do not say *when* it fires (``catchup``,
    ``overlap``, ``wait_seconds``, ...) are not part of it::

        >>> from brain import cron, every
        >>> trigger_key(cron("0 9 * * *", timezone="Europe/Bucharest"))
        'cron:0 9 * * *@Europe/Bucharest'
        >>> trigger_key(every(seconds=300)), trigger_key(every(seconds=5, name="tick"))
        ('every:300', 'name:tick')

    A content key longer than 64 characters is replaced by a short digest of
    it (``"watch:#1f2e…"``), so keys fit the store's column. The rules live in
    :meth:`brain.dsl.triggers.CronTrigger.key` and its siblings, so that the
    DSL can refuse two triggers with one identity when the workflow is defined.
    """
    return trig.key()


# --- time helpers ------------------------------------------------------------------------------


def _utc(when: datetime) -> datetime:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"expected an aware datetime, got naive {when!r}")
    return when.astimezone(UTC)


def _micros(when: datetime) -> int:
    return (when - EPOCH) // _MICRO


def _from_micros(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def _next_wall(triggers: tuple[Any, ...], wall: datetime) -> datetime | None:
    """The first matching wall-clock time strictly after ``wall`` (naive)."""
    start = wall.replace(tzinfo=UTC) + _MICRO
    found: datetime | None = None
    for trig in triggers:
        try:
            candidate: datetime | None = trig.get_next_fire_time(None, start)
        except OverflowError:  # past year 9999
            candidate = None
        if candidate is not None and (found is None or candidate < found):
            found = candidate
    return None if found is None else found.replace(tzinfo=None)


def _wall_of(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def _wall_to_utc(wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant a wall-clock time fires: its first occurrence, or the gap's end if it has none."""
    first, second = sorted(wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1))
    if _wall_of(first, zone) == wall:
        return first  # exists (once, or twice in a fold: the first)
    # In a gap: the transition lies in (first, second]; find it to the second.
    low, high = _micros(first) // 1_000_000, -(-_micros(second) // 1_000_000)
    after_offset = second.astimezone(zone).utcoffset()
    while high - low > 1:
        mid = (low + high) // 2
        if _from_micros(mid * 1_000_000).astimezone(zone).utcoffset() == after_offset:
            high = mid
        else:
            low = mid
    return _from_micros(high * 1_000_000)


def _cron_next(trig: CronTrigger, after: datetime) -> datetime | None:
    zone = ZoneInfo(trig.timezone)
    triggers = parse_cron(trig.expr)
    # Wall times map to instants monotonically, and the wall time of `after`
    # maps to `after` or earlier, so scanning forward from it is complete.
    wall: datetime | None = _wall_of(after, zone)
    while wall is not None:
        wall = _next_wall(triggers, wall)
        if wall is None:
            return None
        instant = _wall_to_utc(wall, zone)
        if instant > after:  # not: the fold's second pass, or a gap time already fired
            return instant
    return None


# --- fire times --------------------------------------------------------------------------------


def _period_micros(trig: EveryTrigger) -> int:
    return max(1, round(trig.seconds * 1_000_000))


def next_fire(trig: ScheduleSpec, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after`` (aware), in UTC; ``None`` if there is none."""
    after = _utc(after)
    try:
        if isinstance(trig, EveryTrigger):
            period = _period_micros(trig)
            return _from_micros((_micros(after) // period + 1) * period)
        return _cron_next(trig, after)
    except OverflowError:
        return None


def fires_between(trig: ScheduleSpec, after: datetime, until: datetime, limit: int) -> list[datetime]:
    """The fire times in ``(after, until]``, oldest first, at most ``limit`` (the oldest ones)."""
    until = _utc(until)
    found: list[datetime] = []
    current: datetime | None = _utc(after)
    while len(found) < limit and current is not None:
        current = next_fire(trig, current)
        if current is None or current > until:
            break
        found.append(current)
    return found


def latest_fires(trig: ScheduleSpec, after: datetime, until: datetime, limit: int) -> list[datetime]:
    """The newest ``limit`` fire times in ``(after, until]``, oldest first."""
    after, until = _utc(after), _utc(until)
    if limit <= 0 or until <= after:
        return []
    if isinstance(trig, EveryTrigger):
        period = _period_micros(trig)
        low, last = _micros(after), _micros(until) // period * period
        newest: list[datetime] = []
        while len(newest) < limit and last > low:
            newest.append(_from_micros(last))
            last -= period
        return newest[::-1]
    first = next_fire(trig, after)
    if first is None or first > until:
        return []
    # Search back from `until` in growing windows, so a long outage costs no
    # walk over every fire since the last claim.
    span = timedelta(minutes=2)
    while True:
        start = max(after, until - span)
        window = fires_between(trig, start, until, limit=_SCAN_LIMIT)
        if len(window) >= limit or start == after:
            return window[-limit:]
        span *= 4


def due_fires(trig: ScheduleSpec, last_claimed: datetime | None, now: datetime, *,
              grace: timedelta = CURRENT_FIRE_GRACE) -> list[datetime]:
    """The fire times to run at ``now``, oldest first, by the trigger's catch-up policy.

    ``last_claimed`` is the latest fire already claimed (``None``: never).
    A fire at most ``grace`` before ``now`` is the current one and runs under
    every policy; older fires after ``last_claimed`` were missed:
    ``catchup="none"`` skips them, ``"latest"`` runs the newest one, ``"all"``
    runs each, at most :data:`MAX_CATCHUP` (the newest). With no claim yet
    nothing was missed. ``every()`` behaves as ``"latest"``.
    """
    now = _utc(now)
    policy = trig.catchup if isinstance(trig, CronTrigger) else "latest"
    if last_claimed is None or policy == "none":
        floor = now - grace
        if last_claimed is not None:
            floor = max(floor, _utc(last_claimed))
        return latest_fires(trig, floor, now, 1)
    limit = MAX_CATCHUP if policy == "all" else 1
    return latest_fires(trig, _utc(last_claimed), now, limit)


# --- the loop ----------------------------------------------------------------------------------


@dataclass
class _Schedule:
    workflow: str
    key: str
    trig: ScheduleSpec
    cursor: datetime | None = None  # fires at or before this are handled
    planned: bool = False  # next_at is computed from cursor
    next_at: datetime | None = None


class Scheduler:
    """Fires ``cron`` and ``every`` schedules on time, in one asyncio task.

    ``fire(workflow, trigger_key, trigger, fire_time)`` is the caller's: it
    claims the fire in the database and queues the run (or applies
    ``overlap``); the scheduler never touches the store. A failing ``fire``
    is logged and the loop goes on. ``clock`` and ``sleep`` are injectable
    for tests::

        scheduler = Scheduler(fire)
        scheduler.set_schedules([("digest", "cron:0", cron("0 9 * * *"))])
        await scheduler.catch_up(store.last_fire)
        await scheduler.run()  # forever; cancel the task to stop
    """

    def __init__(self, fire: FireCallback, clock: Callable[[], datetime] = utcnow,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, *,
                 grace: timedelta = CURRENT_FIRE_GRACE,
                 max_sleep: float = MAX_SLEEP_SECONDS) -> None:
        self._fire = fire
        self._clock = clock
        self._sleep = sleep
        self._grace = grace
        self._max_sleep = max_sleep
        self._schedules: dict[tuple[str, str], _Schedule] = {}
        self._changed = asyncio.Event()

    @property
    def schedules(self) -> list[tuple[str, str, ScheduleSpec]]:
        """The current ``(workflow, trigger_key, trigger)`` list."""
        return [(s.workflow, s.key, s.trig) for s in self._schedules.values()]

    def set_schedules(self, items: Iterable[tuple[str, str, object]]) -> None:
        """Replace the schedules (at start, or on ``--reload``); the loop picks them up at once.

        Triggers without fire times (``webhook``, ``watch``) are ignored. A
        schedule whose ``(workflow, key)`` was already known keeps its place in
        time; a new one starts from now (it has missed nothing).
        """
        fresh: dict[tuple[str, str], _Schedule] = {}
        for workflow, key, trig in items:
            if not isinstance(trig, (CronTrigger, EveryTrigger)):
                continue
            old = self._schedules.get((workflow, key))
            fresh[(workflow, key)] = _Schedule(workflow, key, trig, old.cursor if old else None)
        self._schedules = fresh
        self._changed.set()

    async def catch_up(self, last_fire: LastFireLookup) -> int:
        """At start-up: fire what each schedule is due by its catch-up policy; how many fires.

        Counted from ``last_fire(workflow, key)``, the latest claimed fire in
        the store (see :func:`due_fires`). :meth:`run` continues from here.
        """
        now = _utc(self._clock())
        due: list[tuple[datetime, _Schedule]] = []
        for sched in list(self._schedules.values()):
            try:
                last = await last_fire(sched.workflow, sched.key)
                due.extend((t, sched) for t in due_fires(sched.trig, last, now, grace=self._grace))
            except Exception:
                log.exception("%s: %s: catch-up failed", sched.workflow, sched.key)
            sched.cursor, sched.planned = now, False
        for fire_time, sched in sorted(due, key=lambda item: item[0]):
            await self._call(sched, fire_time)
        return len(due)

    async def run(self) -> None:
        """Fire schedules forever: sleep until the earliest next fire (or a schedule change)."""
        while True:
            self._changed.clear()
            now = _utc(self._clock())
            due: list[tuple[datetime, _Schedule]] = []
            earliest: datetime | None = None
            for sched in list(self._schedules.values()):
                if sched.cursor is None:
                    sched.cursor, sched.planned = now, False
                self._plan(sched)
                if sched.next_at is not None and sched.next_at <= now:
                    due.extend((t, sched) for t in self._due(sched, now))
                    sched.cursor, sched.planned = now, False
                    self._plan(sched)
                if sched.next_at is not None and (earliest is None or sched.next_at < earliest):
                    earliest = sched.next_at
            if due:
                for fire_time, sched in sorted(due, key=lambda item: item[0]):
                    await self._call(sched, fire_time)
                continue
            await self._wait(None if earliest is None else (earliest - now).total_seconds())

    def _plan(self, sched: _Schedule) -> None:
        if sched.planned or sched.cursor is None:
            return
        sched.planned = True
        try:
            sched.next_at = next_fire(sched.trig, sched.cursor)
        except Exception:  # a schedule that cannot be computed must not stop the others
            log.exception("%s: %s: cannot compute the next fire time", sched.workflow, sched.key)
            sched.next_at = None

    def _due(self, sched: _Schedule, now: datetime) -> list[datetime]:
        try:
            return due_fires(sched.trig, sched.cursor, now, grace=self._grace)
        except Exception:
            log.exception("%s: %s: cannot compute due fires", sched.workflow, sched.key)
            return []

    async def _call(self, sched: _Schedule, fire_time: datetime) -> None:
        try:
            await self._fire(sched.workflow, sched.key, sched.trig, fire_time)
        except Exception:
            log.exception("%s: %s: fire at %s failed", sched.workflow, sched.key, fire_time.isoformat())

    async def _wait(self, seconds: float | None) -> None:
        """Sleep ``seconds`` (``None``: until a change), waking early when the schedules change."""
        changed = asyncio.ensure_future(self._changed.wait())
        waiters: set[asyncio.Future[Any]] = {changed}
        if seconds is not None:
            waiters.add(asyncio.ensure_future(self._sleep(max(0.0, min(seconds, self._max_sleep)))))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                if not waiter.done():
                    waiter.cancel()
