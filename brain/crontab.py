"""Crontab expressions, parsed on their own (no schedule loop, nothing of The Brain).

:func:`parse_cron` gives the APScheduler 3.x triggers that match a 5-field
crontab expression on a wall clock; :mod:`brain.triggers.schedule` turns their
wall-clock times into UTC instants, and :class:`brain.dsl.triggers.CronTrigger`
uses it to refuse a bad expression at definition time.
"""

from __future__ import annotations

from datetime import UTC
from functools import lru_cache
from typing import Any

from apscheduler.triggers.cron import CronTrigger as _APCron

_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _weekday(token: str) -> int:
    """A crontab day-of-week (name or 0-7, Sunday = 0 = 7) as 0-7."""
    low = token.strip().lower()
    if low in _DAY_NAMES:
        return _DAY_NAMES.index(low)
    if low.isdigit() and 0 <= int(low) <= 7:
        return int(low)
    raise ValueError(f"bad day of week {token!r}: use 0-7 (0 and 7 are Sunday) or sun..sat")


def _crontab_weekdays(field: str) -> str:
    """Translate a crontab day-of-week field to APScheduler 3.x (which counts from Monday).

    The result lists day names (``"mon,tue,wed,thu,fri"``), which APScheduler
    reads unambiguously.
    """
    if field == "*":
        return "*"
    days: set[int] = set()
    for part in field.split(","):
        body, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"bad step in day-of-week field {field!r}")
            step = int(step_text)
        if body == "*":
            low, high = 0, 6
        elif "-" in body:
            first, last = body.split("-", 1)
            low, high = _weekday(first), _weekday(last)
            if high < low and high == 0:  # "fri-sun": Sunday as 7
                high = 7
            if high < low:
                raise ValueError(f"bad range {body!r} in day-of-week field {field!r}")
        else:
            low = _weekday(body)
            high = 7 if slash else low  # "1/2" means 1-7/2, as in cronie
        days.update(day % 7 for day in range(low, high + 1, step))
    return ",".join(_DAY_NAMES[day] for day in sorted(days))


@lru_cache(maxsize=1024)
def parse_cron(expr: str) -> tuple[Any, ...]:
    """APScheduler triggers matching a 5-field crontab expression on a naive (wall) clock.

    They run in UTC so APScheduler applies no DST rule: the wall-clock times
    they yield are mapped to instants by this module. Usually one trigger;
    two when both day fields are restricted (either may match). Raises
    ``ValueError`` for a bad expression.
    """
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"bad cron expression {expr!r}: it needs 5 fields (minute hour day month weekday)")
    minute, hour, day, month, weekday = fields
    days_of_week = _crontab_weekdays(weekday)

    def build(day_field: str, weekday_field: str) -> Any:
        return _APCron.from_crontab(f"{minute} {hour} {day_field} {month} {weekday_field}", timezone=UTC)

    if day.startswith("*") or weekday.startswith("*"):
        return (build(day, days_of_week),)
    return build(day, "*"), build("*", days_of_week)
