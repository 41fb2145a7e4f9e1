"""Tracing the steps that wait (SPEC §16): ``sleep``, ``approval`` and ``wait_for``.

Their mistakes are ``WorkflowDefinitionError`` naming the workflow, the step and the
problem, when the function is decorated; they take part in the graph like any step
(``when=``, ``parallel()``, ``for_each``); and durations, as people write them, parse
(``parse_duration``) and print (``duration_text``) consistently.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support import definition_error

import brain
from brain import (
    WorkflowDefinitionError,
    approval,
    for_each,
    parallel,
    shell,
    sleep,
    step,
    trigger,
    wait_for,
    when,
    workflow,
)
from brain._clock import MAX_DURATION_SECONDS, duration_text, parse_duration
from brain.dsl.model import ApprovalStepSpec, SleepStepSpec, WaitForStepSpec


def edges(wf: brain.Workflow) -> set[tuple[str, str]]:
    """The graph's edges as a set, after checking the tuple holds no duplicates."""
    listed = list(wf.graph.edges)
    assert len(listed) == len(set(listed)), f"duplicate edges in {listed}"
    return set(listed)


def spec_of(wf: brain.Workflow, name: str) -> Any:
    return next(s for s in wf.spec.steps if s.name == name)


@step
def flag() -> bool:
    return True


# --- definition errors ---------------------------------------------------------------------

BAD_DEFINITIONS: dict[str, tuple[Any, str, str]] = {
    # id: (the body of workflow "broken", the step named, what the message says)
    "duration-not-a-duration": (lambda: sleep("nap", "10 parsecs"), "nap", "bad duration"),
    "duration-unknown-unit": (lambda: sleep("nap", "5y"), "nap", "bad duration"),
    "duration-negative": (lambda: sleep("nap", -1), "nap", ">= 0"),
    "duration-infinite": (lambda: sleep("nap", math.inf), "nap", "finite"),
    "duration-bool": (lambda: sleep("nap", True), "nap", "not True"),
    "duration-empty": (lambda: sleep("nap", ""), "nap", "bad duration"),
    "duration-and-until": (lambda: sleep("nap", "10m", until="2030-01-01T00:00:00+00:00"),
                           "nap", "exactly one of a duration"),
    "neither-duration-nor-until": (lambda: sleep("nap"), "nap", "exactly one of a duration"),
    "until-without-offset": (lambda: sleep("nap", until="2030-01-01T09:00:00"), "nap",
                             "has no offset"),
    "until-not-a-time": (lambda: sleep("nap", until="next tuesday"), "nap", "not an ISO 8601 time"),
    "duration-is-a-trigger-field": (lambda: sleep("nap", trigger.body), "nap",
                                    "duration is never substituted"),
    "duration-is-a-placeholder": (lambda: sleep("nap", "{trigger.body}"), "nap", "bad duration"),
    "duration-is-a-step-output": (lambda: sleep("nap", shell("src", command="echo 5")), "nap",
                                  "duration is never substituted"),
    "approval-timeout-zero": (lambda: approval("go", "ok?", timeout=0), "go",
                              "timeout must be longer than zero"),
    "approval-timeout-zero-text": (lambda: approval("go", "ok?", timeout="0s"), "go",
                                   "timeout must be longer than zero"),
    "approval-timeout-negative": (lambda: approval("go", "ok?", timeout=-5), "go", "timeout"),
    "approval-timeout-bad-text": (lambda: approval("go", "ok?", timeout="soon"), "go",
                                  "bad duration"),
    "approval-timeout-placeholder": (lambda: approval("go", "ok?", timeout=trigger.body), "go",
                                     "timeout is never substituted"),
    "approval-default-without-timeout": (lambda: approval("go", "ok?", default=False), "go",
                                         "give a timeout too"),
    "approval-default-text": (lambda: approval("go", "ok?", timeout="1h", default="yes"), "go",
                              "default must be True, False or None"),
    "approval-default-int": (lambda: approval("go", "ok?", timeout="1h", default=1), "go",
                             "default must be True, False or None"),
    "signal-with-space": (lambda: wait_for("ci", signal="ci finished"), "ci", "bad signal name"),
    "signal-empty": (lambda: wait_for("ci", signal=""), "ci", "bad signal name"),
    "signal-slash": (lambda: wait_for("ci", signal="ci/done"), "ci", "bad signal name"),
    "signal-placeholder": (lambda: wait_for("ci", signal="{trigger.body}"), "ci",
                           "bad signal name"),
    "signal-too-long": (lambda: wait_for("ci", signal="s" * 201), "ci", "bad signal name"),
    "wait-default-not-json": (lambda: wait_for("ci", signal="ci", timeout="1h", default={1, 2}),
                              "ci", "default must be text or JSON data"),
    "wait-default-nan": (lambda: wait_for("ci", signal="ci", timeout="1h", default=math.nan),
                         "ci", "default must be text or JSON data"),
    "wait-default-object": (lambda: wait_for("ci", signal="ci", timeout="1h", default=object()),
                            "ci", "default must be text or JSON data"),
    "wait-default-without-timeout": (lambda: wait_for("ci", signal="ci", default="none"), "ci",
                                     "give a timeout too"),
    "wait-default-is-a-trigger-field": (
        lambda: wait_for("ci", signal="ci", timeout="1h", default=trigger.body), "ci",
        "default is never substituted"),
    "wait-timeout-zero": (lambda: wait_for("ci", signal="ci", timeout=0.0), "ci",
                          "timeout must be longer than zero"),
    "wait-key-unknown-step": (lambda: wait_for("ci", signal="ci", key="{nowhere}"), "ci",
                              "nowhere"),
    "approval-prompt-later-step": (lambda: approval("go", "ok {later}?"), "go", "later"),
    "until-unknown-step": (lambda: sleep("nap", until="{nowhere}"), "nap", "nowhere"),
    "bad-step-name": (lambda: approval("go now", "ok?"), "go now", "go now"),
}


@pytest.mark.parametrize(("body", "name", "says"), list(BAD_DEFINITIONS.values()),
                         ids=list(BAD_DEFINITIONS))
def test_mistakes_are_definition_errors_naming_workflow_step_and_problem(
        body: Any, name: str, says: str) -> None:
    message = definition_error(body)
    assert "broken" in message
    assert repr(name) in message or name in message
    assert says in message


def test_a_duplicate_name_among_waits_is_refused() -> None:
    def dup() -> None:
        sleep("w", 1)
        approval("w", "ok?")

    assert "duplicate step name" in definition_error(dup)


def test_the_errors_say_how_to_write_it_right() -> None:
    assert "'90s', '10m', '2h', '1d', '1h30m'" in definition_error(lambda: sleep("nap", "soon"))
    assert "like +00:00 or Z" in definition_error(
        lambda: sleep("nap", until="2030-01-01T09:00:00"))
    assert "letters, digits and . _ : -" in definition_error(
        lambda: wait_for("ci", signal="no spaces"))


def test_a_node_as_signal_name_is_an_error_naming_the_step() -> None:
    message = definition_error(lambda: wait_for("ci", signal=trigger.body))
    assert "'ci'" in message
    assert "signal" in message


def test_every_step_option_is_accepted_by_the_waits() -> None:
    @workflow(name="opts")
    def opts():
        approval("go", "ok?", timeout="1m", retries=2)
        sleep("nap", "1s", retries=1)
        wait_for("ci", signal="ci", timeout="1m", retries=1)

    assert opts.graph.nodes == ("go", "nap", "ci")


# --- what is recorded ----------------------------------------------------------------------


def test_durations_and_defaults_are_recorded_as_given() -> None:
    @workflow(name="recorded")
    def recorded():
        sleep("short", 90)
        sleep("text", "1h30m")
        sleep("fraction", 0.5)
        sleep("zero", 0)
        sleep("at", until="2030-01-02T03:04:05+02:00")
        sleep("at_z", until="2030-01-02T03:04:05Z")
        sleep("at_body", until=trigger.body)
        approval("go", "ok?", timeout="4h", default=False)
        approval("forever", "ok?")
        wait_for("ci", signal="ci-finished", key=trigger.headers["X-Commit"], timeout="1h",
                 default={"ok": False, "tests": [1, 2]})
        wait_for("textual", signal="a.b:c_d-e", timeout=30, default="plain {textual}")
        wait_for("nokey", signal="x")

    short, text, fraction, zero = (spec_of(recorded, n) for n in ("short", "text", "fraction",
                                                                  "zero"))
    assert isinstance(short, SleepStepSpec) and short.seconds == 90 and short.until is None
    assert text.seconds == 5400
    assert fraction.seconds == 0.5
    assert zero.seconds == 0
    assert spec_of(recorded, "at").until == "2030-01-02T03:04:05+02:00"
    assert spec_of(recorded, "at").seconds is None
    assert spec_of(recorded, "at_z").until == "2030-01-02T03:04:05Z"
    assert spec_of(recorded, "at_body").until == "{trigger.body}"
    go = spec_of(recorded, "go")
    assert isinstance(go, ApprovalStepSpec)
    assert (go.prompt, go.timeout_seconds, go.default) == ("ok?", 4 * 3600, False)
    forever = spec_of(recorded, "forever")
    assert (forever.timeout_seconds, forever.default) == (None, None)
    ci = spec_of(recorded, "ci")
    assert isinstance(ci, WaitForStepSpec)
    assert (ci.signal, ci.key, ci.timeout_seconds) == ("ci-finished",
                                                        "{trigger.headers.x-commit}", 3600)
    assert ci.default == '{"ok":false,"tests":[1,2]}'  # compact JSON
    # Text stays text, placeholders and all: a default is never substituted.
    assert spec_of(recorded, "textual").default == "plain {textual}"
    assert spec_of(recorded, "nokey").key is None
    assert [s.kind for s in recorded.spec.steps] == ["sleep"] * 7 + ["approval"] * 2 + \
        ["wait_for"] * 3


def test_options_change_the_definition_hash() -> None:
    def make(timeout: str) -> str:
        @workflow(name="hashed")
        def hashed():
            approval("go", "ok?", timeout=timeout, default=True)

        return hashed.definition_hash

    assert make("1h") == make("60m")  # the same duration written two ways
    assert make("1h") != make("2h")


# --- the graph -----------------------------------------------------------------------------


def test_waits_are_ordered_like_any_step_and_references_add_edges() -> None:
    @workflow(name="chained")
    def chained():
        plan = shell("plan", command="echo plan")
        shell("other", command="true")
        ok = approval("go", prompt=f"Apply?\n\n{plan}")
        nap = sleep("settle", "10m")
        ci = wait_for("ci", signal="ci", key=f"{plan}")
        shell("report", argv=["echo", f"{ok} {nap} {ci}"])

    assert chained.graph.nodes == ("plan", "other", "go", "settle", "ci", "report")
    assert edges(chained) == {
        ("plan", "other"), ("other", "go"), ("plan", "go"), ("go", "settle"), ("settle", "ci"),
        ("plan", "ci"), ("ci", "report"), ("go", "report"), ("settle", "report")}
    assert spec_of(chained, "go").prompt == "Apply?\n\n{plan}"
    assert spec_of(chained, "ci").key == "{plan}"


def test_when_on_waits_and_an_approval_as_a_condition() -> None:
    @workflow(name="conditioned")
    def conditioned():
        f = flag()
        ok = approval("go", "Ship it?", when=f)
        with when(ok):
            shell("apply", command="echo apply")
            sleep("settle", "10m")
            wait_for("ci", signal="ci", when=~f)
        shell("rollback", command="echo no", when=~ok)
        shell("log", command="echo done")

    assert conditioned.graph.conditions == {
        "go": ("{flag}",), "apply": ("{go}",), "settle": ("{go}",),
        "ci": ("{go}", "not {flag}"), "rollback": ("not {go}",)}
    graph = edges(conditioned)
    assert {("flag", "go"), ("go", "apply"), ("apply", "settle"), ("settle", "ci"),
            ("ci", "rollback"), ("rollback", "log")} <= graph


def test_waits_inside_parallel_are_siblings() -> None:
    @workflow(name="fanned")
    def fanned():
        shell("before", command="true")
        with parallel():
            approval("a", "first?")
            wait_for("b", signal="sig")
            sleep("c", 1)
            shell("d", command="true")
        shell("after", command="true")

    assert edges(fanned) == {("before", x) for x in "abcd"} | {(x, "after") for x in "abcd"}


def test_waits_inside_for_each_are_in_the_block() -> None:
    @workflow(name="each_wait")
    def each_wait():
        targets = shell("targets", command="echo '[\"eu\", \"us\"]'")
        with for_each(targets, max_parallel=2, name="region") as region:
            ok = approval("ok", prompt=f"Deploy to {region}?", timeout="1h", default=False)
            shell("deploy", argv=["echo", f"{region}"], when=ok)
            sleep("pause", "1m")
        shell("summary", argv=["echo", f"{ok}"])

    graph = each_wait.graph
    assert [(g.label, g.steps, g.max_parallel) for g in graph.groups] == [
        ("for_each {targets}", ("ok", "deploy", "pause"), 2)]
    assert graph.conditions == {"deploy": ("{ok}",)}
    assert {("targets", "ok"), ("ok", "deploy"), ("deploy", "pause"),
            ("ok", "summary")} <= edges(each_wait)
    assert spec_of(each_wait, "ok").prompt == "Deploy to {each.region}?"


def test_a_later_step_reads_a_wait_through_previous_without_an_edge() -> None:
    @workflow(name="prev_wait")
    def prev_wait():
        shell("read", argv=["echo", "{previous.go}"])
        approval("go", "ok?")

    assert edges(prev_wait) == {("read", "go")}


def test_wait_helpers_outside_a_workflow_are_refused() -> None:
    for call in (lambda: sleep("nap", 1), lambda: approval("go", "ok?"),
                 lambda: wait_for("ci", signal="ci")):
        with pytest.raises(WorkflowDefinitionError):
            call()


# --- parse_duration / duration_text ---------------------------------------------------------

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("10m", 600), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("1w", 604800),
    ("45", 45), (45, 45), (2.5, 2.5), ("0.5s", 0.5), ("1.5h", 5400), ("1H 30M", 5400),
    ("0", 0), (0, 0)])
def test_parse_duration_reads_durations_as_people_write_them(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (0.5, "0.5s"), (1, "1s"), (90, "1m30s"), (600, "10m"), (3600, "1h"),
    (4 * 3600, "4h"), (5400, "1h30m"), (86400, "1d"), (90061, "1d1h1m1s")])
def test_duration_text_writes_them_back(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


@given(st.integers(min_value=0, max_value=10**9))
def test_whole_seconds_round_trip_exactly(seconds: int) -> None:
    text = duration_text(seconds)
    assert parse_duration(text) == seconds
    assert duration_text(parse_duration(text)) == text


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=10**6),
                          st.sampled_from(sorted(UNITS))), min_size=1, max_size=6))
def test_generated_duration_text_parses_to_its_sum(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{unit}" for n, unit in parts)
    seconds = sum(n * UNITS[unit] for n, unit in parts)
    if seconds > MAX_DURATION_SECONDS:  # too long to be a time anyone waits for
        with pytest.raises(ValueError, match="longer than 100 years"):
            parse_duration(text)
        return
    assert parse_duration(text) == seconds
    assert parse_duration(text.upper()) == seconds
    # Normalised text means the same duration.
    assert parse_duration(duration_text(parse_duration(text))) == seconds


@given(st.floats(min_value=0.001, max_value=1e9, allow_nan=False, allow_infinity=False))
@example(0.001)
@example(59.99999)
@example(60.5)
def test_fractional_seconds_round_trip_closely(seconds: float) -> None:
    back = parse_duration(duration_text(seconds))
    # Under a minute: six decimal places (never exponent form); from a minute on, whole
    # seconds.
    assert math.isclose(back, seconds, rel_tol=1e-9, abs_tol=0.5 if seconds >= 59.5 else 5e-7)


def test_duration_text_of_a_tiny_duration_parses_back() -> None:
    assert parse_duration(duration_text(0.00001)) == pytest.approx(0.00001)


@given(st.text())
@example("")
@example("1e400")
@example("nan")
@example("-inf")
@example("9" * 5000 + "w")
@example("1.5.5s")
@example("1h-30m")
@example("\x00")
@example("\ud800")
@example("٣s")
def test_any_text_is_a_duration_or_a_value_error(text: str) -> None:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        assert str(exc)
        return
    assert isinstance(seconds, float)
    assert math.isfinite(seconds) and seconds >= 0


@given(st.one_of(st.none(), st.booleans(), st.lists(st.integers()),
                 st.dictionaries(st.text(), st.integers()), st.binary(),
                 st.floats(max_value=-1e-9), st.just(math.nan), st.just(math.inf)))
def test_values_that_are_no_duration_raise_value_error(value: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)
