"""A retry's timeline as the server lays it out (no browser): whenever the run it retries
ran, and however long its kept steps took then, the kept steps get no bar, and the axis
spans the retry's own work only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from brain.results import RunResult, StepResult
from brain.server.console.timeline import kept_step, ticks, timeline

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

seconds = st.floats(min_value=0.001, max_value=86400 * 3, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(kept=st.lists(st.tuples(seconds, seconds), min_size=1, max_size=4),
       gap=seconds, ran=st.lists(st.tuples(st.floats(0, 60), seconds), min_size=1, max_size=4),
       ended=st.booleans())
def test_kept_steps_are_drawn_apart_and_the_axis_is_the_retrys(
        kept: list[tuple[float, float]], gap: float, ran: list[tuple[float, float]],
        ended: bool) -> None:
    # The original ran its steps one after another, from T0; the retry was created `gap`
    # seconds after the last of them ended, and runs its own.
    steps: dict[str, StepResult] = {}
    at = T0
    for i, (wait, took) in enumerate(kept):
        started = at + timedelta(seconds=wait)
        at = started + timedelta(seconds=took)
        steps[f"k{i}"] = StepResult(name=f"k{i}", kind="shell", status="succeeded",
                                    started_at=started, ended_at=at)
    created = at + timedelta(seconds=gap)
    at = created
    for i, (wait, took) in enumerate(ran):
        started = at + timedelta(seconds=wait)
        at = started + timedelta(seconds=took)
        steps[f"r{i}"] = StepResult(name=f"r{i}", kind="shell", status="succeeded",
                                    started_at=started, ended_at=at)
    now = at + timedelta(seconds=1)
    run = RunResult(run_id="retry", workflow="w", status="succeeded" if ended else "running",
                    retry_of="original", created_at=created, started_at=created,
                    ended_at=at if ended else None, steps=steps)
    drawn = timeline(run, now)
    lanes = {lane.name: lane for lane in drawn.lanes}
    assert list(lanes) == list(steps)
    for i in range(len(kept)):
        lane = lanes[f"k{i}"]
        assert lane.kept and lane.left is None and lane.width is None
        assert lane.note.startswith("kept") and kept_step(run, steps[f"k{i}"])
    for i in range(len(ran)):
        lane = lanes[f"r{i}"]
        assert not lane.kept and lane.left is not None and lane.width is not None
        assert 0 <= lane.left and lane.left + lane.width <= 100.001
    # The axis: from the retry's start to its end (or now), not a moment of the original.
    span = ((at if ended else now) - created).total_seconds()
    assert [t.label for t in drawn.ticks] == [t.label for t in ticks(span)]


def test_a_run_that_is_no_retry_keeps_nothing() -> None:
    step = StepResult(name="a", kind="shell", status="succeeded",
                      started_at=T0 - timedelta(hours=1), ended_at=T0 - timedelta(minutes=59))
    run = RunResult(run_id="r", workflow="w", status="succeeded", created_at=T0,
                    started_at=T0, ended_at=T0 + timedelta(seconds=2), steps={"a": step})
    assert not kept_step(run, step)
    assert not timeline(run, T0).lanes[0].kept
