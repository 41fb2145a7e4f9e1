"""The rules of a run's life alone (``brain.runner.lifecycle``): a table of (event, stored
state, loaded definition) → decision, without a store or an event loop. The code that
executes runs acts on these decisions; tests/runner/test_resume.py and the waiting tests
show the same rules end to end."""

from __future__ import annotations

import pytest

from brain.runner import WORKFLOW_CHANGED
from brain.runner.lifecycle import (
    Action,
    Decision,
    Definition,
    Event,
    StoredRun,
    StoredStep,
    after_execution,
    cancel_ends_leftovers,
    changed_since_start,
    event_of,
    may_resume,
    on_look,
    on_stall_look,
    on_taken,
    restamp_refused,
)

HASH, OTHER = "h1", "h2"
LOADED = Definition("flow", HASH)
READS_PREVIOUS = Definition("flow", HASH, reads_previous=True)


def _run(*, hash_: str = HASH, workflow: str = "flow", cancel: bool = False,
         retry_of: str | None = None, previous: str | None = None,
         waiting: frozenset[str] = frozenset(), failed_waits: frozenset[str] = frozenset(),
         **steps: tuple[str, int]) -> StoredRun:
    return StoredRun(workflow, hash_, cancel_requested=cancel, retry_of=retry_of,
                     previous_run_id=previous,
                     steps={n: StoredStep(status, tries) for n, (status, tries) in steps.items()},
                     waiting=waiting, failed_waits=failed_waits)


FRESH = {"a": ("pending", 0), "b": ("pending", 0)}
HALFWAY = {"a": ("succeeded", 1), "b": ("running", 1), "c": ("pending", 0)}
FAILED = {"a": ("succeeded", 1), "b": ("failed", 2), "c": ("skipped", 0), "d": ("cancelled", 1)}
WAITS = {"a": ("succeeded", 1), "go": ("waiting", 1), "t": ("failed", 1), "c": ("pending", 0)}

CONTINUE = Decision(Action.CONTINUE)


@pytest.mark.parametrize(("event", "run", "loaded", "decision"), [
    # a first start: nothing to reset, the definition as loaded
    (Event.STARTED, _run(**FRESH), LOADED, CONTINUE),
    # {previous.X} is chosen at the first start, never for a retry (it keeps its original's)
    (Event.STARTED, _run(**FRESH), READS_PREVIOUS,
     Decision(Action.CONTINUE, choose_previous=True)),
    (Event.RETRIED, _run(retry_of="r0", **FRESH), READS_PREVIOUS, CONTINUE),
    (Event.STARTED, _run(previous="p0", **FRESH), READS_PREVIOUS, CONTINUE),
    # a resume ends what the dead try left here, and runs again what did not succeed
    (Event.RESUMED, _run(**HALFWAY), LOADED,
     Decision(Action.CONTINUE, steps=("b",), end_leftovers=True)),
    (Event.RESUMED, _run(**FAILED), LOADED,
     Decision(Action.CONTINUE, steps=("b", "c", "d"), end_leftovers=True)),
    # its executor died before any step started: {previous.X} is chosen now
    (Event.RESUMED, _run(**FRESH), READS_PREVIOUS,
     Decision(Action.CONTINUE, choose_previous=True, end_leftovers=True)),
    (Event.RESUMED, _run(**HALFWAY), READS_PREVIOUS,
     Decision(Action.CONTINUE, steps=("b",), end_leftovers=True)),
    # woken from its waits: a waiting step and one whose wait ended failed keep their state
    (Event.WOKEN, _run(waiting=frozenset({"go"}), failed_waits=frozenset({"t"}), **WAITS),
     LOADED, CONTINUE),
    (Event.RESUMED, _run(waiting=frozenset({"go"}), **WAITS), LOADED,
     Decision(Action.CONTINUE, steps=("t",), end_leftovers=True)),
    # a cancel asked for while nobody executed it ends it, whatever else holds
    (Event.RESUMED, _run(cancel=True, **HALFWAY), LOADED,
     Decision(Action.CANCEL, "cancelled", end_leftovers=True)),
    (Event.WOKEN, _run(cancel=True, hash_=OTHER, **WAITS), LOADED,
     Decision(Action.CANCEL, "cancelled")),
    (Event.STARTED, _run(cancel=True, **FRESH), None, Decision(Action.CANCEL, "cancelled")),
    # a changed definition: a queued run takes the loaded one; a run that started fails
    (Event.STARTED, _run(hash_=OTHER, **FRESH), LOADED, Decision(Action.RESTAMP)),
    (Event.RETRIED, _run(hash_=OTHER, retry_of="r0", **FAILED), LOADED,
     Decision(Action.FAIL, WORKFLOW_CHANGED, steps=("b", "c", "d"))),
    (Event.RESUMED, _run(hash_=OTHER, **HALFWAY), LOADED,
     Decision(Action.FAIL, WORKFLOW_CHANGED, steps=("b", "c"), end_leftovers=True)),
    (Event.WOKEN, _run(hash_=OTHER, waiting=frozenset({"go"}), **WAITS), LOADED,
     Decision(Action.FAIL, WORKFLOW_CHANGED, steps=("go", "t", "c"))),
    # another workflow of that name is never the run's: it fails, even queued
    (Event.STARTED, _run(workflow="other", **FRESH), LOADED,
     Decision(Action.FAIL, WORKFLOW_CHANGED, steps=("a", "b"))),
    # not loaded in this process: nothing to do here
    (Event.STARTED, _run(**FRESH), None,
     Decision(Action.NOTHING, "workflow 'flow' is not loaded here")),
])
def test_what_a_run_just_taken_does(event: Event, run: StoredRun, loaded: Definition | None,
                                    decision: Decision) -> None:
    assert on_taken(event, run, loaded) == decision


def test_a_queued_run_the_store_would_not_restamp_fails_as_changed() -> None:
    run = _run(hash_=OTHER, a=("succeeded", 1), b=("running", 1))
    assert restamp_refused(run) == Decision(Action.FAIL, WORKFLOW_CHANGED, steps=("b",))


def test_the_change_rule_is_one_function() -> None:
    assert changed_since_start(_run(), LOADED) is None
    assert changed_since_start(_run(hash_=OTHER), LOADED) == WORKFLOW_CHANGED
    assert changed_since_start(_run(workflow="x"), LOADED) == WORKFLOW_CHANGED


@pytest.mark.parametrize(("first_start", "woken", "retry_of", "event"), [
    (True, False, None, Event.STARTED), (True, False, "r0", Event.RETRIED),
    (False, True, None, Event.WOKEN), (False, False, None, Event.RESUMED),
    (False, False, "r0", Event.RESUMED),
])
def test_the_event_of_a_claim(first_start: bool, woken: bool, retry_of: str | None,
                              event: Event) -> None:
    assert event_of(first_start=first_start, woken=woken, retry_of=retry_of) is event


@pytest.mark.parametrize(("parked", "stalled", "action"), [
    (True, False, Action.PARK), (False, True, Action.TAKE), (False, False, Action.NOTHING),
    (True, True, Action.PARK),  # let go of with its waits: nothing of it is stalled
])
def test_after_an_execution_in_this_process(parked: bool, stalled: bool, action: Action) -> None:
    decided = after_execution(parked=parked, stalled=stalled)
    assert decided.action is action
    assert decided.event is (Event.RESUMED if action is Action.TAKE else None)


@pytest.mark.parametrize(("status", "expired", "decision"), [
    ("succeeded", False, Decision(Action.NOTHING, "ended")),
    ("cancelled", True, Decision(Action.NOTHING, "ended")),
    ("queued", False, Decision(Action.TAKE, event=Event.WOKEN)),
    ("running", True, Decision(Action.TAKE, event=Event.RESUMED)),
    ("running", False, Decision(Action.WATCH)),
    ("waiting", True, Decision(Action.PARK)),
])
def test_a_run_waited_for_in_the_foreground(status: str, expired: bool,
                                            decision: Decision) -> None:
    assert on_look(status, lease_expired=expired) == decision


@pytest.mark.parametrize(("status", "expired", "ours", "action"), [
    ("running", False, True, Action.WATCH),
    ("running", False, False, Action.NOTHING),
    ("running", True, False, Action.TAKE),
    ("running", True, True, Action.TAKE),
    ("failed", True, True, Action.NOTHING),
    ("waiting", True, True, Action.NOTHING),
])
def test_a_run_whose_database_stalled(status: str, expired: bool, ours: bool,
                                      action: Action) -> None:
    assert on_stall_look(status, lease_expired=expired, ours=ours).action is action


def test_cancel_and_resume_rules() -> None:
    assert may_resume("running") and may_resume("waiting") and may_resume("queued")
    assert not any(may_resume(s) for s in ("succeeded", "failed", "cancelled"))
    assert cancel_ends_leftovers("running", active=True, after="cancelled")
    assert not cancel_ends_leftovers("running", active=True, after="running")  # it was executed
    assert not cancel_ends_leftovers("waiting", active=True, after="cancelled")  # no process
    assert not cancel_ends_leftovers(None, active=False, after="cancelled")
