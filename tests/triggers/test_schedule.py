"""Schedule fire times (cron in a time zone across DST, every N seconds), catch-up, and the fire loop.

Clocks are injected: nothing here sleeps for real except one short live test.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.interval import IntervalTrigger
from hypothesis import given, settings
from hypothesis import strategies as st

from brain import cron, every, watch, webhook
from brain.triggers.schedule import (
    EPOCH,
    MAX_CATCHUP,
    Scheduler,
    due_fires,
    fires_between,
    latest_fires,
    next_fire,
    parse_cron,
    trigger_key,
)

BUCHAREST = ZoneInfo("Europe/Bucharest")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0,
        micro: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def local_dates(fires: list[datetime], zone: ZoneInfo) -> list[str]:
    return [f.astimezone(zone).date().isoformat() for f in fires]


# --- keys -----------------------------------------------------------------------------------------


def test_trigger_key_is_the_content_never_the_position() -> None:
    """SPEC §5: the expression and zone, the interval, the path; short and readable."""
    assert trigger_key(cron("0 9 * * *")) == "cron:0 9 * * *@UTC"
    assert trigger_key(cron("0  9 * * *", timezone="Europe/Bucharest")) == "cron:0 9 * * *@Europe/Bucharest"
    assert trigger_key(every(seconds=300)) == trigger_key(every(seconds=300.0)) == "every:300"
    assert trigger_key(every(seconds=0.5)) == "every:0.5"
    assert trigger_key(webhook(secret_env="X")) == "webhook"
    assert trigger_key(webhook(secret_env="X", path="/github/push/")) == "webhook:github/push"
    assert trigger_key(watch("data")) == "watch:data * created,modified"
    assert trigger_key(watch("data", patterns=["*.csv"], events=["modified", "created"])) == \
        trigger_key(watch("data", patterns=["*.csv"], events=["created", "modified"]))


def test_options_that_do_not_say_when_it_fires_are_not_its_identity() -> None:
    assert trigger_key(cron("0 9 * * *", catchup="all", overlap="queue")) == trigger_key(cron("0 9 * * *"))
    assert trigger_key(every(seconds=5, overlap="queue")) == trigger_key(every(seconds=5))
    assert trigger_key(webhook(secret_env="A", wait_seconds=3)) == trigger_key(webhook(secret_env="B"))
    assert trigger_key(cron("0 9 * * *")) != trigger_key(cron("0 9 * * *", timezone="Europe/Bucharest"))
    assert trigger_key(watch("data")) != trigger_key(watch("data", recursive=True))


def test_a_name_is_the_identity_whatever_the_content() -> None:
    assert trigger_key(cron("0 9 * * *", name="nightly")) == "name:nightly"
    assert trigger_key(cron("0 10 * * *", name="nightly")) == "name:nightly"
    assert trigger_key(every(seconds=5, name="tick")) == trigger_key(every(seconds=9, name="tick"))
    assert trigger_key(webhook(secret_env="S", name="gh")) == "name:gh"
    assert trigger_key(watch("in", name="inbox")) == "name:inbox"


def test_reordering_or_inserting_triggers_keeps_every_key() -> None:
    from brain import shell, workflow

    def body() -> None:
        shell("only", argv=["true"])

    before: list[Any] = [cron("0 9 * * *"), every(seconds=60), watch("in")]
    after: list[Any] = [webhook(secret_env="S"), watch("in"), every(seconds=300), every(seconds=60),
             cron("0 9 * * *")]
    old = workflow(name="keyed", triggers=before)(body)
    new = workflow(name="keyed", triggers=after)(body)
    old_keys = [trigger_key(t) for t in old.triggers]
    new_keys = {trigger_key(t) for t in new.triggers}
    assert set(old_keys) <= new_keys
    assert len(new_keys) == len(after)


_cron_field = st.sampled_from(["*", "0", "5", "*/5", "1-5", "0,15,30,45", "1,2,3,4,5,6,7,8,9,10,11"])


@settings(max_examples=200, deadline=None)
@given(minute=_cron_field, hour=_cron_field, zone=st.sampled_from(["UTC", "America/Argentina/Buenos_Aires"]),
       path=st.text(min_size=1, max_size=120),
       patterns=st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=5),
       seconds=st.floats(min_value=1e-6, max_value=1e12, allow_nan=False))
def test_every_key_fits_the_store_column_and_is_stable(minute: str, hour: str, zone: str, path: str,
                                                         patterns: list[str], seconds: float) -> None:
    """Keys are stored in 100-character columns: long content becomes a short digest."""
    for trig in (cron(f"{minute} {hour} * * *", timezone=zone), every(seconds=seconds),
                 watch(path, patterns=patterns, recursive=True), webhook(secret_env="S", path=path)):
        key = trigger_key(trig)
        assert len(key) <= 64 and key.isprintable() and key.startswith(f"{trig.type}:")
        assert key == trigger_key(trig.model_copy())


@pytest.mark.parametrize(("triggers", "message"), [
    ([cron("0 9 * * *"), cron("0 9 * * *", overlap="queue")], "two cron triggers are the same"),
    ([every(seconds=5), every(seconds=5.0)], "two every triggers are the same"),
    ([webhook(secret_env="A"), webhook(secret_env="B")], "two webhook triggers are the same"),
    ([cron("0 9 * * *", name="n"), every(seconds=5, name="n")], "two triggers are named 'n'"),
    ([cron("0 9 * * *", name="has space")], "bad trigger name 'has space'"),
    ([every(seconds=5, name="")], "bad trigger name ''"),
])
def test_two_triggers_with_one_identity_are_a_definition_error(triggers: list[Any], message: str) -> None:
    from support import definition_error

    from brain import shell

    def body() -> None:
        shell("only", argv=["true"])

    text = definition_error(body, name="twice", triggers=triggers)
    assert message in text and text.startswith("workflow 'twice'")


def test_the_same_content_under_two_names_is_two_triggers() -> None:
    from brain import shell, workflow

    def body() -> None:
        shell("only", argv=["true"])

    wf = workflow(name="twice", triggers=[cron("0 9 * * *", name="a"), cron("0 9 * * *", name="b")])(body)
    assert [trigger_key(t) for t in wf.triggers] == ["name:a", "name:b"]


async def test_catch_up_keeps_its_history_when_a_webhook_is_inserted_before_the_cron(db_url: str) -> None:
    """The issue's case, on a real SQLite file: upgrading the file must not lose missed fires."""
    from brain import shell, workflow
    from brain.service import BrainService
    from brain.store import Store

    def body() -> None:
        shell("only", argv=["true"])

    def schedules(triggers: list[Any]) -> list[tuple[str, str, Any]]:
        wf = workflow(name="digest", triggers=triggers)(body)
        return BrainService({wf.name: wf}, store=Store(db_url), triggers=True).firing.schedules()

    minutely = cron("* * * * *", catchup="all")
    before = schedules([minutely])
    after = schedules([webhook(secret_env="HOOK_SECRET"), minutely])
    assert [key for _, key, _ in after] == [key for _, key, _ in before]

    now = utc(2026, 1, 1, 0, 3, 0, 500_000)
    async with Store(db_url) as store:
        assert await store.claim_fire("digest", before[0][1], utc(2026, 1, 1, 0, 0))  # the old version ran

        fired: list[datetime] = []

        async def fire(workflow: str, key: str, trig: Any, fire_time: datetime) -> None:
            if await store.claim_fire(workflow, key, fire_time):
                fired.append(fire_time)

        scheduler = Scheduler(fire, clock=lambda: now)
        scheduler.set_schedules(after)
        await scheduler.catch_up(store.last_fire)
        assert await store.last_fire("digest", after[0][1]) == utc(2026, 1, 1, 0, 3)
    # Counted from the fire the old version claimed: each missed minute, not only the current one.
    assert fired == [utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 2), utc(2026, 1, 1, 0, 3)]


# --- cron across DST ------------------------------------------------------------------------------


def test_daily_0330_fires_once_on_spring_forward_day_just_after_the_gap() -> None:
    # Bucharest 2026-03-29: 03:00 EET (+02) jumps to 04:00 EEST (+03); 03:30 does not exist.
    job = cron("30 3 * * *", timezone="Europe/Bucharest")
    fires = fires_between(job, utc(2026, 3, 27, 12), utc(2026, 3, 31, 12), limit=10)
    assert fires == [utc(2026, 3, 28, 1, 30),   # 03:30 EET
                     utc(2026, 3, 29, 1, 0),    # the gap's end: 04:00 EEST
                     utc(2026, 3, 30, 0, 30),   # 03:30 EEST
                     utc(2026, 3, 31, 0, 30)]
    assert local_dates(fires, BUCHAREST) == ["2026-03-28", "2026-03-29", "2026-03-30", "2026-03-31"]
    assert all(f.tzinfo is UTC for f in fires)


def test_daily_0330_fires_once_on_fall_back_day_at_the_first_occurrence() -> None:
    # Bucharest 2026-10-25: 04:00 EEST (+03) goes back to 03:00 EET (+02); 03:30 happens twice.
    job = cron("30 3 * * *", timezone="Europe/Bucharest")
    fires = fires_between(job, utc(2026, 10, 23, 12), utc(2026, 10, 27, 12), limit=10)
    assert fires == [utc(2026, 10, 24, 0, 30),  # 03:30 EEST
                     utc(2026, 10, 25, 0, 30),  # the first 03:30 (EEST); not again at 01:30 UTC
                     utc(2026, 10, 26, 1, 30),  # 03:30 EET
                     utc(2026, 10, 27, 1, 30)]
    assert local_dates(fires, BUCHAREST) == ["2026-10-24", "2026-10-25", "2026-10-26", "2026-10-27"]


def test_next_fire_is_strictly_after_and_steps_out_of_the_repeated_hour() -> None:
    job = cron("30 3 * * *", timezone="Europe/Bucharest")
    assert next_fire(job, utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 26, 1, 30)
    # Inside the second pass of the hour (03:10 EET): the 03:30 of this day already fired.
    assert next_fire(job, utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 26, 1, 30)
    assert next_fire(job, utc(2026, 10, 25, 0, 29, 59)) == utc(2026, 10, 25, 0, 30)
    assert next_fire(job, utc(2026, 3, 29, 0, 59, 59)) == utc(2026, 3, 29, 1, 0)
    assert next_fire(job, utc(2026, 3, 29, 1, 0)) == utc(2026, 3, 30, 0, 30)


def test_times_inside_the_gap_collapse_into_one_fire_and_the_fold_hour_fires_once() -> None:
    quarter = cron("*/15 3 * * *", timezone="Europe/Bucharest")
    spring = fires_between(quarter, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12), limit=20)
    assert spring == [utc(2026, 3, 29, 1, 0)]
    autumn = fires_between(quarter, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12), limit=20)
    assert autumn == [utc(2026, 10, 25, 0, m) for m in (0, 15, 30, 45)]


def test_next_fire_accepts_any_aware_time_and_refuses_naive() -> None:
    job = cron("0 9 * * *", timezone="Europe/Bucharest")
    assert next_fire(job, datetime(2026, 6, 1, 8, 0, tzinfo=BUCHAREST)) == utc(2026, 6, 1, 6, 0)
    with pytest.raises(ValueError, match="aware"):
        next_fire(job, datetime(2026, 6, 1, 8, 0))


def _field_matches(field: str, value: int) -> bool:
    for part in field.split(","):
        body, _, step = part.partition("/")
        low, high = (0, 59) if body == "*" else (int(body.split("-")[0]), int(body.split("-")[-1]))
        if low <= value <= high and (value - low) % int(step or 1) == 0:
            return True
    return False


def _reference_fires(expr: str, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """Minute by minute: a UTC minute fires when its wall time matches for the first time, or
    when it ends a gap in which a skipped wall time matched (minute and hour fields only)."""
    minute_field, hour_field = expr.split()[:2]

    def matches(wall: datetime) -> bool:
        return _field_matches(minute_field, wall.minute) and _field_matches(hour_field, wall.hour)

    fires = []
    instant = start
    previous_wall = start.astimezone(zone).replace(tzinfo=None) - timedelta(minutes=1)
    while instant <= end:
        local = instant.astimezone(zone)
        wall = local.replace(tzinfo=None)
        skipped = previous_wall + timedelta(minutes=1)
        fired = local.fold == 0 and matches(wall)
        while skipped < wall and not fired:  # wall times the clock jumped over
            fired = matches(skipped)
            skipped += timedelta(minutes=1)
        if fired:
            fires.append(instant)
        previous_wall = max(previous_wall, wall)
        instant += timedelta(minutes=1)
    return fires


@pytest.mark.parametrize("zone", ["Europe/Bucharest", "America/New_York", "Australia/Lord_Howe"])
@pytest.mark.parametrize("expr", ["30 3 * * *", "*/15 3 * * *", "0 * * * *", "30 * * * *",
                                  "*/20 1-4 * * *", "59 2 * * *", "0 4 * * *", "15,45 2 * * *"])
def test_cron_matches_a_minute_by_minute_reference_around_both_dst_changes(zone: str, expr: str) -> None:
    tz = ZoneInfo(zone)
    transitions = {"Europe/Bucharest": [utc(2026, 3, 28, 18), utc(2026, 10, 24, 18)],
                   "America/New_York": [utc(2026, 3, 8, 0), utc(2026, 10, 31, 18)],
                   "Australia/Lord_Howe": [utc(2026, 4, 4, 6), utc(2026, 10, 3, 6)]}[zone]
    job = cron(expr, timezone=zone)
    for start in transitions:
        end = start + timedelta(hours=36)
        expected = _reference_fires(expr, tz, start + timedelta(minutes=1), end)
        assert fires_between(job, start, end, limit=1000) == expected, (zone, expr, start)


def test_weekday_numbers_are_crontabs_sunday_is_0_and_7() -> None:
    monday = utc(2026, 3, 2)  # a Monday

    def weekdays(expr: str) -> list[str]:
        fires = fires_between(cron(expr), monday - timedelta(seconds=1), monday + timedelta(days=7), 10)
        return [f.strftime("%a") for f in fires]

    assert weekdays("0 9 * * 1-5") == ["Mon", "Tue", "Wed", "Thu", "Fri"]
    assert weekdays("0 9 * * mon-fri") == ["Mon", "Tue", "Wed", "Thu", "Fri"]
    assert weekdays("0 9 * * 0") == ["Sun"]
    assert weekdays("0 9 * * 7") == ["Sun"]
    assert weekdays("0 9 * * fri-sun") == ["Fri", "Sat", "Sun"]
    assert weekdays("0 9 * * 5-7") == ["Fri", "Sat", "Sun"]
    assert weekdays("0 9 * * */2") == ["Tue", "Thu", "Sat", "Sun"]
    assert weekdays("0 9 * * 1,3/2") == ["Mon", "Wed", "Fri", "Sun"]
    with pytest.raises(ValueError, match="day of week"):
        parse_cron("0 9 * * 8")


def test_day_of_month_and_day_of_week_both_given_match_either() -> None:
    fires = fires_between(cron("0 0 1 * mon"), utc(2026, 3, 27), utc(2026, 4, 14), 10)
    assert [f.date().isoformat() for f in fires] == ["2026-03-30", "2026-04-01", "2026-04-06",
                                                     "2026-04-13"]
    # One of them a wildcard (even with a step): both must match, as in cron.
    fires = fires_between(cron("0 0 */1 * mon"), utc(2026, 3, 27), utc(2026, 4, 14), 10)
    assert [f.date().isoformat() for f in fires] == ["2026-03-30", "2026-04-06", "2026-04-13"]


def test_a_cron_that_never_matches_has_no_fire() -> None:
    never = cron("0 0 30 2 *")
    assert fires_between(never, utc(2026, 1, 1), utc(2027, 1, 1), 5) == []
    assert due_fires(never, utc(2026, 1, 1), utc(2026, 6, 1)) == []


# --- every(seconds=N) -----------------------------------------------------------------------------


@pytest.mark.parametrize("seconds", [1, 7, 60, 300, 3600, 86_400, 0.25, 2.5])
def test_every_fires_at_multiples_of_n_since_the_epoch(seconds: float) -> None:
    job = every(seconds=seconds)
    start = utc(2026, 5, 17, 13, 44, 21) + timedelta(microseconds=123_456)
    fires = fires_between(job, start, start + timedelta(seconds=seconds * 50), limit=1000)
    assert len(fires) == 50
    period = timedelta(seconds=seconds)
    for fire in fires:
        assert (fire - EPOCH) % period == timedelta(0)
        assert fire.tzinfo is UTC
    assert fires[0] - start <= period
    assert all(b - a == period for a, b in itertools.pairwise(fires))


def test_every_fire_times_are_the_same_for_two_independent_computations() -> None:
    job = every(seconds=7)
    # "Server A" starts at one moment and steps with next_fire ...
    a_fires: list[datetime] = []
    current: datetime | None = utc(2026, 1, 1, 10, 0, 3)
    for _ in range(40):
        assert current is not None
        current = next_fire(job, current)
        assert current is not None
        a_fires.append(current)
    # ... "server B" starts 45.6 s later and lists a window; APScheduler anchored at the epoch agrees.
    b_start = utc(2026, 1, 1, 10, 0, 48, 600_000)
    b_fires = fires_between(job, b_start, a_fires[-1], limit=1000)
    assert b_fires == [f for f in a_fires if f > b_start]
    interval = IntervalTrigger(seconds=7, start_date=EPOCH, timezone=UTC)
    assert interval.get_next_fire_time(None, b_start + timedelta(microseconds=1)) == b_fires[0]
    assert latest_fires(job, b_start, a_fires[-1], 3) == a_fires[-3:]


@settings(max_examples=200, deadline=None)
@given(seconds=st.integers(min_value=1, max_value=10**6),
       offset=st.integers(min_value=0, max_value=10**15))
def test_every_next_fire_property(seconds: int, offset: int) -> None:
    after = utc(2000, 1, 1) + timedelta(microseconds=offset)
    fire = next_fire(every(seconds=seconds), after)
    assert fire is not None
    assert after < fire <= after + timedelta(seconds=seconds)
    assert (fire - EPOCH) % timedelta(seconds=seconds) == timedelta(0)


_LISTINGS: dict[str, list[datetime]] = {}


@settings(max_examples=200, deadline=None)
@given(minutes=st.integers(min_value=0, max_value=60 * 24 * 5),
       expr=st.sampled_from(["30 3 * * *", "*/10 * * * *", "0 2-4 * * *", "45 3 * * 0"]))
def test_cron_next_fire_agrees_with_the_listing(minutes: int, expr: str) -> None:
    job = cron(expr, timezone="Europe/Bucharest")
    base = utc(2026, 10, 23)
    after = base + timedelta(minutes=minutes, seconds=17)
    if expr not in _LISTINGS:
        _LISTINGS[expr] = fires_between(job, base, base + timedelta(days=15), limit=5000)
    listing = _LISTINGS[expr]
    expected = next(f for f in listing if f > after)
    assert next_fire(job, after) == expected
    assert latest_fires(job, base, after, 1) == [f for f in listing if f <= after][-1:]


# --- catch-up -------------------------------------------------------------------------------------


HOURLY_AT = utc(2026, 4, 1, 12, 0)  # last claimed fire of an hourly job


@pytest.mark.parametrize(("catchup", "expected"), [
    ("none", []),
    ("latest", [utc(2026, 4, 1, 15, 0)]),
    ("all", [utc(2026, 4, 1, 13, 0), utc(2026, 4, 1, 14, 0), utc(2026, 4, 1, 15, 0)]),
])
def test_catchup_after_downtime(catchup: str, expected: list[datetime]) -> None:
    job = cron("0 * * * *", catchup=catchup)
    now = utc(2026, 4, 1, 15, 20)  # down since 12:05: 13:00, 14:00 and 15:00 were missed
    assert due_fires(job, HOURLY_AT, now) == expected


@pytest.mark.parametrize("catchup", ["none", "latest", "all"])
def test_the_current_fire_runs_under_every_policy(catchup: str) -> None:
    job = cron("0 * * * *", catchup=catchup)
    now = utc(2026, 4, 1, 15, 0, 2)  # the 15:00 fire is 2 s old: it is now's fire, not a missed one
    assert due_fires(job, utc(2026, 4, 1, 14, 0), now) == [utc(2026, 4, 1, 15, 0)]
    # ... and once claimed, nothing is due.
    assert due_fires(job, utc(2026, 4, 1, 15, 0), now) == []
    expected_none = [utc(2026, 4, 1, 15, 0)] if catchup != "none" else []
    assert due_fires(job, utc(2026, 4, 1, 14, 0), now + timedelta(seconds=10)) == expected_none


def test_a_schedule_never_claimed_has_missed_nothing() -> None:
    job = cron("0 * * * *", catchup="all")
    assert due_fires(job, None, utc(2026, 4, 1, 15, 20)) == []
    assert due_fires(job, None, utc(2026, 4, 1, 15, 0, 1)) == [utc(2026, 4, 1, 15, 0)]
    assert due_fires(every(seconds=60), None, utc(2026, 4, 1, 15, 20, 30)) == []


def test_catchup_all_runs_at_most_100_the_newest() -> None:
    job = cron("* * * * *", catchup="all")
    last = utc(2026, 4, 1, 0, 0)
    now = utc(2026, 4, 3, 0, 0, 30)  # two days down: 2880 missed minutes
    due = due_fires(job, last, now)
    assert len(due) == MAX_CATCHUP == 100
    assert due[-1] == utc(2026, 4, 3, 0, 0)
    assert due[0] == utc(2026, 4, 3, 0, 0) - timedelta(minutes=99)
    assert due == sorted(due)
    few = due_fires(job, utc(2026, 4, 2, 23, 57), now)
    assert few == [utc(2026, 4, 2, 23, 58), utc(2026, 4, 2, 23, 59), utc(2026, 4, 3, 0, 0)]


def test_every_catches_up_like_latest() -> None:
    job = every(seconds=60)
    assert due_fires(job, utc(2026, 4, 1, 0, 0), utc(2026, 4, 1, 5, 0, 30)) == [utc(2026, 4, 1, 5, 0)]
    assert due_fires(job, utc(2026, 4, 1, 5, 0), utc(2026, 4, 1, 5, 0, 30)) == []


def test_a_claim_from_a_server_whose_clock_runs_ahead_leaves_nothing_due() -> None:
    assert due_fires(every(seconds=1), utc(2026, 4, 1, 0, 0, 10), utc(2026, 4, 1, 0, 0, 9, 500)) == []


def test_catchup_across_years_is_quick() -> None:
    due = due_fires(cron("*/5 * * * *", catchup="all"), utc(2016, 1, 1), utc(2026, 1, 1, 0, 1))
    assert len(due) == 100 and due[-1] == utc(2026, 1, 1)
    assert due_fires(cron("0 0 1 1 *", catchup="latest"), utc(1990, 1, 1), utc(2026, 3, 1)) == [
        utc(2026, 1, 1)]


# --- the Scheduler loop with a fake clock ---------------------------------------------------------


class FakeTime:
    """A clock that moves only when the scheduler sleeps (by exactly the time it asked for)."""

    def __init__(self, start: datetime) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self.oversleep: dict[int, float] = {}  # sleep number -> extra seconds (a suspended machine)

    def clock(self) -> datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        extra = self.oversleep.get(len(self.sleeps), 0.0)
        self.sleeps.append(seconds)
        self.now += timedelta(seconds=seconds + extra)
        await asyncio.sleep(0)


Fired = list[tuple[str, str, datetime]]


def recorder(fired: Fired, stop_after: int, done: asyncio.Event,
             hook: Callable[[int], None] | None = None) -> Callable[..., Awaitable[None]]:
    async def fire(workflow: str, key: str, trig: Any, fire_time: datetime) -> None:
        fired.append((workflow, key, fire_time))
        if hook is not None:
            hook(len(fired))
        if len(fired) >= stop_after:
            done.set()
            await asyncio.Event().wait()  # hold the loop here until the test cancels it
    return fire


async def run_until(scheduler: Scheduler, done: asyncio.Event) -> None:
    task = asyncio.create_task(scheduler.run())
    try:
        await asyncio.wait_for(done.wait(), timeout=10)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_run_fires_each_schedule_in_time_order_sleeping_exactly_until_each_fire() -> None:
    time = FakeTime(utc(2026, 1, 1, 0, 0, 3))
    fired: Fired = []
    done = asyncio.Event()
    scheduler = Scheduler(recorder(fired, 9, done), clock=time.clock, sleep=time.sleep)
    scheduler.set_schedules([("ten", "every:0", every(seconds=10)),
                             ("minutely", "cron:0", cron("* * * * *")),
                             ("hooked", "webhook:0", webhook(secret_env="S"))])  # no fire times: ignored
    await run_until(scheduler, done)
    assert fired == [("ten", "every:0", utc(2026, 1, 1, 0, 0, 10)),
                     ("ten", "every:0", utc(2026, 1, 1, 0, 0, 20)),
                     ("ten", "every:0", utc(2026, 1, 1, 0, 0, 30)),
                     ("ten", "every:0", utc(2026, 1, 1, 0, 0, 40)),
                     ("ten", "every:0", utc(2026, 1, 1, 0, 0, 50)),
                     ("ten", "every:0", utc(2026, 1, 1, 0, 1)),
                     ("minutely", "cron:0", utc(2026, 1, 1, 0, 1)),  # same instant: in schedule order
                     ("ten", "every:0", utc(2026, 1, 1, 0, 1, 10)),
                     ("ten", "every:0", utc(2026, 1, 1, 0, 1, 20))]
    assert time.sleeps == [7, 10, 10, 10, 10, 10, 10, 10]
    assert [s[:2] for s in scheduler.schedules] == [("ten", "every:0"), ("minutely", "cron:0")]


async def test_run_picks_up_set_schedules_and_keeps_the_place_of_known_ones() -> None:
    time = FakeTime(utc(2026, 1, 1, 0, 0, 0, 500_000))
    fired: Fired = []
    done = asyncio.Event()
    scheduler: Scheduler

    def reload(count: int) -> None:
        if count == 2:  # a --reload at 00:00:02: "a" stays, "b" is new, "c" is gone
            scheduler.set_schedules([("a", "every:0", every(seconds=1)),
                                     ("b", "every:0", every(seconds=3))])

    scheduler = Scheduler(recorder(fired, 8, done, reload), clock=time.clock, sleep=time.sleep)
    scheduler.set_schedules([("a", "every:0", every(seconds=1)), ("c", "every:0", every(seconds=5))])
    await run_until(scheduler, done)
    assert fired == [("a", "every:0", utc(2026, 1, 1, 0, 0, 1)),
                     ("a", "every:0", utc(2026, 1, 1, 0, 0, 2)),
                     ("a", "every:0", utc(2026, 1, 1, 0, 0, 3)),
                     ("b", "every:0", utc(2026, 1, 1, 0, 0, 3)),
                     ("a", "every:0", utc(2026, 1, 1, 0, 0, 4)),
                     ("a", "every:0", utc(2026, 1, 1, 0, 0, 5)),  # no "c" at :05
                     ("a", "every:0", utc(2026, 1, 1, 0, 0, 6)),
                     ("b", "every:0", utc(2026, 1, 1, 0, 0, 6))]


async def test_set_schedules_wakes_a_long_sleep() -> None:
    now = utc(2026, 1, 1, 0, 0, 0, 500_000)
    asked: list[float] = []
    woken = asyncio.Event()

    async def slow_sleep(seconds: float) -> None:
        asked.append(seconds)
        woken.set()
        await asyncio.Event().wait()  # never returns by itself

    async def fire(workflow: str, key: str, trig: Any, fire_time: datetime) -> None:
        raise AssertionError("nothing is due")

    scheduler = Scheduler(fire, clock=lambda: now, sleep=slow_sleep, max_sleep=10**9)
    scheduler.set_schedules([("hourly", "every:0", every(seconds=3600))])
    task = asyncio.create_task(scheduler.run())
    try:
        await asyncio.wait_for(woken.wait(), 5)
        woken.clear()
        scheduler.set_schedules([("hourly", "every:0", every(seconds=3600)),
                                 ("often", "every:1", every(seconds=2))])
        await asyncio.wait_for(woken.wait(), 5)
        scheduler.set_schedules([])
        await asyncio.sleep(0.05)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert asked == [3599.5, 1.5]  # with no schedules it waits for a change, not for a sleep


async def test_a_long_sleep_is_cut_into_bounded_naps() -> None:
    time = FakeTime(utc(2026, 1, 1, 0, 0))
    fired: Fired = []
    done = asyncio.Event()
    scheduler = Scheduler(recorder(fired, 1, done), clock=time.clock, sleep=time.sleep, max_sleep=30)
    scheduler.set_schedules([("daily", "cron:0", cron("0 0 * * *"))])
    await run_until(scheduler, done)
    assert fired == [("daily", "cron:0", utc(2026, 1, 2))]
    assert time.sleeps == [30.0] * 2880


@pytest.mark.parametrize(("catchup", "expected"), [
    ("none", [utc(2026, 1, 1, 4)]),
    ("latest", [utc(2026, 1, 1, 3), utc(2026, 1, 1, 4)]),
    ("all", [utc(2026, 1, 1, 1), utc(2026, 1, 1, 2), utc(2026, 1, 1, 3), utc(2026, 1, 1, 4)]),
])
async def test_run_applies_the_catchup_policy_when_the_machine_was_suspended(
        catchup: str, expected: list[datetime]) -> None:
    time = FakeTime(utc(2026, 1, 1, 0, 30))
    time.oversleep = {0: 2 * 3600 + 600}  # the sleep until 01:00 ends at 03:10
    fired: Fired = []
    done = asyncio.Event()
    scheduler = Scheduler(recorder(fired, len(expected), done), clock=time.clock, sleep=time.sleep,
                          max_sleep=10**9)
    scheduler.set_schedules([("job", "cron:0", cron("0 * * * *", catchup=catchup))])
    await run_until(scheduler, done)
    assert [f[2] for f in fired] == expected


async def test_catch_up_fires_what_each_schedule_missed_then_run_goes_on_from_there() -> None:
    time = FakeTime(utc(2026, 4, 1, 15, 20))
    claimed = {("none", "cron:0"): utc(2026, 4, 1, 12), ("latest", "cron:0"): utc(2026, 4, 1, 12),
               ("all", "cron:0"): utc(2026, 4, 1, 12), ("tick", "every:0"): utc(2026, 4, 1, 15, 19)}
    looked_up: list[tuple[str, str]] = []

    async def last_fire(workflow: str, key: str) -> datetime | None:
        looked_up.append((workflow, key))
        return claimed.get((workflow, key))

    fired: Fired = []
    done = asyncio.Event()
    scheduler = Scheduler(recorder(fired, 8, done), clock=time.clock, sleep=time.sleep)
    scheduler.set_schedules([(policy, "cron:0", cron("0 * * * *", catchup=policy))
                             for policy in ("none", "latest", "all")]
                            + [("tick", "every:0", every(seconds=60)),
                               ("fresh", "every:0", every(seconds=60))])
    assert await scheduler.catch_up(last_fire) == 6
    assert sorted(looked_up) == sorted([*claimed, ("fresh", "every:0")])
    assert fired == [("all", "cron:0", utc(2026, 4, 1, 13)),
                     ("all", "cron:0", utc(2026, 4, 1, 14)),
                     ("latest", "cron:0", utc(2026, 4, 1, 15)),
                     ("all", "cron:0", utc(2026, 4, 1, 15)),
                     ("tick", "every:0", utc(2026, 4, 1, 15, 20)),
                     ("fresh", "every:0", utc(2026, 4, 1, 15, 20))]  # a fire of "now" is current
    await run_until(scheduler, done)
    # run() went on from the catch-up instant: the next fires, nothing fired twice.
    assert fired[6:] == [("tick", "every:0", utc(2026, 4, 1, 15, 21)),
                         ("fresh", "every:0", utc(2026, 4, 1, 15, 21))]


async def test_a_failing_fire_or_a_broken_schedule_does_not_stop_the_loop(
        caplog: pytest.LogCaptureFixture) -> None:
    time = FakeTime(utc(2026, 1, 1))
    fired: Fired = []
    done = asyncio.Event()
    inner = recorder(fired, 3, done)

    async def flaky(workflow: str, key: str, trig: Any, fire_time: datetime) -> None:
        if fire_time == utc(2026, 1, 1, 0, 0, 1):
            raise RuntimeError("database is down")
        await inner(workflow, key, trig, fire_time)

    scheduler = Scheduler(flaky, clock=time.clock, sleep=time.sleep)
    broken = cron("* * * * *", timezone="Nowhere/Atlantis")  # not validated: the DSL would refuse it
    scheduler.set_schedules([("bad", "cron:0", broken), ("ok", "every:0", every(seconds=1))])
    await run_until(scheduler, done)
    assert [f[2] for f in fired] == [utc(2026, 1, 1, 0, 0, s) for s in (2, 3, 4)]
    assert "database is down" in caplog.text
    assert "bad: cron:0: cannot compute the next fire time" in caplog.text


# --- live -----------------------------------------------------------------------------------------


async def test_live_every_second_fires_on_whole_seconds_never_early() -> None:
    """The real clock and sleep: three fires on consecutive whole seconds (none skipped),
    none before its time. How late they come is ``bench/schedule_precision.py``'s figure."""
    lateness: list[float] = []
    fire_times: list[datetime] = []
    three = asyncio.Event()

    async def fire(workflow: str, key: str, trig: Any, fire_time: datetime) -> None:
        lateness.append((datetime.now(UTC) - fire_time).total_seconds())
        fire_times.append(fire_time)
        if len(fire_times) >= 3:
            three.set()

    scheduler = Scheduler(fire)
    scheduler.set_schedules([("tick", "every:0", every(seconds=1))])
    tasks = [asyncio.create_task(scheduler.run())]
    try:
        await asyncio.wait_for(three.wait(), 60)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with pytest.raises(asyncio.CancelledError):
                await task
    assert all(t.microsecond == 0 and t.tzinfo is UTC for t in fire_times)
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(fire_times))
    assert all(late >= 0 for late in lateness), lateness  # never early
