"""Attack (SPEC §16, §4): durations and times at the edges of what a clock can hold.

``sleep("s", 1e15)`` (or ``timeout=1e15``) is accepted by the definition (``brain check``
says nothing), and then fails the step at run time with ``internal error: OverflowError:
Python int too large to convert to C int``. A literal ``until="9999-12-31T23:59:59-01:00"``
(a valid ISO time whose UTC is past year 9999) is accepted too, then fails with ``internal
error: OverflowError: date value out of range``; so does a resolved ``until`` of
``0001-01-01T00:00:00+01:00``.

Promised: "A bad duration is a definition error; a bad resolved until fails the step";
bad input gets a clear error, never an internal one.

Run: ``.venv/bin/pytest tests/attack/test_attack_waits_time_edges.py -n 0``
"""

from __future__ import annotations

from typing import Any

import pytest

from brain import approval, sleep, trigger, workflow
from brain import wait_for as wait_for_signal
from brain._errors import BrainError


def _sleep_huge() -> None:
    sleep("s", 1e15)


def _approval_huge_timeout() -> None:
    approval("go", prompt="p", timeout=1e15, default=True)


def _signal_huge_timeout() -> None:
    wait_for_signal("w", signal="x", timeout="100000000000d", default="d")


def _until_past_year_9999() -> None:
    sleep("s", until="9999-12-31T23:59:59-01:00")


DEFINITIONS = {
    "sleep 1e15 s": _sleep_huge,
    "approval timeout 1e15 s": _approval_huge_timeout,
    "wait_for timeout 1e11 days": _signal_huge_timeout,
    "until 9999-12-31T23:59:59-01:00": _until_past_year_9999,
}


@pytest.mark.parametrize("label", list(DEFINITIONS))
async def test_an_unrepresentable_time_is_refused_clearly(label: str, db_url: str) -> None:
    body = DEFINITIONS[label]
    try:
        wf: Any = workflow(name="edge")(body)
    except (BrainError, ValueError) as exc:  # a definition error: what is promised
        assert "internal error" not in str(exc)
        return
    result = await wf.arun(None, store=db_url)
    errors = {name: s.error for name, s in result.steps.items() if s.error}
    assert not any("internal error" in (e or "") for e in errors.values()), (
        f"{label}: accepted as a definition, then {result.status}: {errors}")


@pytest.mark.parametrize("until", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-23:59"])
async def test_a_resolved_until_out_of_range_fails_the_step_with_a_clear_error(
        until: str, db_url: str) -> None:
    @workflow(name="edge_until")
    def edge_until() -> None:
        sleep("s", until=trigger.body)

    result = await edge_until.arun(until, store=db_url)
    error = result.steps["s"].error or ""
    assert result.status == "failed"
    assert "internal error" not in error and "OverflowError" not in error, error
