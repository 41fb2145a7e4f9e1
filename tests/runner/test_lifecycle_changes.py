"""The continue rule alone (SPEC §24, ``brain.runner.lifecycle``): a run woken, resumed or
retried after its workflow changed goes on with the loaded definition when every step it
started or ended has the same fingerprint and upstream; otherwise it fails at once, naming
the first such step and what changed. A table of cases, then a property over random
definitions and edits (loaded from real files)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as event_note
from hypothesis import strategies as st
from random_flows import Flow, edits, expected_change, flows, source

from brain.dsl.fingerprint import StepPrint, WorkflowPrint
from brain.loader import load_file
from brain.runner import WORKFLOW_CHANGED
from brain.runner.claimed import definition_of
from brain.runner.lifecycle import (
    Action,
    Adoption,
    Decision,
    Definition,
    Event,
    StoredRun,
    StoredStep,
    on_taken,
)


def _prints(**steps: tuple[str, str, tuple[str, ...]]) -> WorkflowPrint:
    """Steps as ``name=(kind, command digest, upstream)``."""
    return WorkflowPrint.of({n: StepPrint(kind, {"command": cmd}, up)
                             for n, (kind, cmd, up) in steps.items()})


OLD = _prints(a=("shell", "1", ()), b=("shell", "2", ("a",)), c=("shell", "3", ("b",)))


def _loaded(prints: WorkflowPrint, version: str | None = "v2") -> Definition:
    return Definition("flow", "new-hash", prints=prints, version=version)


def _run(continued_on: tuple[str, ...] = (), retry_of: str | None = None,
         waiting: frozenset[str] = frozenset(), **steps: tuple[str, int]) -> StoredRun:
    return StoredRun("flow", "old-hash", retry_of=retry_of, step_prints=OLD.text,
                     continued_on=continued_on, waiting=waiting,
                     steps={n: StoredStep(s, t) for n, (s, t) in steps.items()})


WAITING = {"a": ("succeeded", 1), "b": ("waiting", 1), "c": ("pending", 0)}


def _fail(step: str, what: str, *skipped: str, leftovers: bool = False) -> Decision:
    return Decision(Action.FAIL, f"{WORKFLOW_CHANGED}: step {step!r} ({what})", steps=skipped,
                    end_leftovers=leftovers)


def _goes_on(new: WorkflowPrint, fresh: tuple[tuple[str, str, int], ...],
             removed: tuple[str, ...] = (), *, steps: tuple[str, ...] = (),
             versions: tuple[str, ...] = ("v2",), leftovers: bool = False) -> Decision:
    return Decision(Action.CONTINUE, steps=steps, end_leftovers=leftovers,
                    adopt=Adoption("new-hash", new.text, versions, fresh, removed))


C_CHANGED = _prints(a=("shell", "1", ()), b=("shell", "2", ("a",)), c=("shell", "9", ("b",)))
D_ADDED = _prints(a=("shell", "1", ()), b=("shell", "2", ("a",)), d=("llm", "4", ("a",)),
                  c=("shell", "3", ("b",)))
C_REMOVED = _prints(a=("shell", "1", ()), b=("shell", "2", ("a",)))
A_CHANGED = _prints(a=("shell", "0", ()), b=("shell", "2", ("a",)), c=("shell", "3", ("b",)))
B_MOVED = _prints(a=("shell", "1", ()), b=("shell", "2", ()), c=("shell", "3", ("b",)))
B_REMOVED = _prints(a=("shell", "1", ()), c=("shell", "3", ()))
B_KIND = _prints(a=("shell", "1", ()), b=("step", "2", ("a",)), c=("shell", "3", ("b",)))


@pytest.mark.parametrize(("event", "run", "loaded", "decision"), [
    # a change to a step not reached yet: woken, it goes on with the new definition
    (Event.WOKEN, _run(waiting=frozenset({"b"}), **WAITING), _loaded(C_CHANGED),
     _goes_on(C_CHANGED, (("c", "shell", 2),))),
    # an added step gets its row, a removed pending one ends skipped
    (Event.WOKEN, _run(waiting=frozenset({"b"}), **WAITING), _loaded(D_ADDED),
     _goes_on(D_ADDED, (("d", "llm", 2), ("c", "shell", 3)))),
    (Event.WOKEN, _run(waiting=frozenset({"b"}), **WAITING), _loaded(C_REMOVED),
     _goes_on(C_REMOVED, (), ("c",))),
    # the versions it continued on grow; a file without a version adds none
    (Event.WOKEN, _run(("v1",), waiting=frozenset({"b"}), **WAITING), _loaded(C_CHANGED),
     _goes_on(C_CHANGED, (("c", "shell", 2),), versions=("v1", "v2"))),
    (Event.WOKEN, _run(waiting=frozenset({"b"}), **WAITING), _loaded(C_CHANGED, None),
     _goes_on(C_CHANGED, (("c", "shell", 2),), versions=())),
    # a change to a step that ran, or waits, fails the run at once, naming it
    (Event.WOKEN, _run(waiting=frozenset({"b"}), **WAITING), _loaded(A_CHANGED),
     _fail("a", "command changed", "b", "c")),
    (Event.WOKEN, _run(waiting=frozenset({"b"}), **WAITING), _loaded(B_MOVED),
     _fail("b", "upstream changed", "b", "c")),
    (Event.WOKEN, _run(waiting=frozenset({"b"}), **WAITING), _loaded(B_REMOVED),
     _fail("b", "removed", "b", "c")),
    (Event.WOKEN, _run(waiting=frozenset({"b"}), **WAITING), _loaded(B_KIND),
     _fail("b", "kind changed", "b", "c")),
    # a resume: a running (or tried) step counts as started; a for_each instance as its step
    (Event.RESUMED, _run(a=("succeeded", 1), b=("running", 1), c=("pending", 0)),
     _loaded(C_CHANGED), _goes_on(C_CHANGED, (("c", "shell", 2),), steps=("b",),
                                  leftovers=True)),
    (Event.RESUMED, _run(a=("succeeded", 1), b=("pending", 0), **{"b[1]": ("running", 1)},
                     c=("pending", 0)),
     _loaded(B_KIND), _fail("b", "kind changed", "b", "b[1]", "c", leftovers=True)),
    (Event.RESUMED, _run(a=("succeeded", 1), b=("pending", 2), c=("pending", 0)),
     _loaded(B_MOVED), _fail("b", "upstream changed", "b", "c", leftovers=True)),
    # the first changed step in definition order is named
    (Event.RESUMED, _run(a=("succeeded", 1), b=("succeeded", 1), c=("running", 1)),
     _loaded(_prints(a=("shell", "0", ()), b=("shell", "0", ("a",)), c=("shell", "0", ("b",)))),
     _fail("a", "command changed", "c", leftovers=True)),
    # a retry: its kept (succeeded) steps must be unchanged
    (Event.RETRIED, _run(retry_of="r0", a=("succeeded", 1), b=("pending", 0), c=("pending", 0)),
     _loaded(B_KIND), _goes_on(B_KIND, (("b", "step", 1), ("c", "shell", 2)))),
    (Event.RETRIED, _run(retry_of="r0", a=("succeeded", 1), b=("pending", 0), c=("pending", 0)),
     _loaded(A_CHANGED), _fail("a", "command changed", "b", "c")),
    # a queued run never started takes the loaded definition (restamped)
    (Event.STARTED, _run(a=("pending", 0), b=("pending", 0), c=("pending", 0)),
     _loaded(A_CHANGED), Decision(Action.RESTAMP)),
    # the same definition: nothing to adopt
    (Event.WOKEN, _run(waiting=frozenset({"b"}), **WAITING),
     Definition("flow", "old-hash", prints=OLD), Decision(Action.CONTINUE)),
])
def test_the_continue_rule(event: Event, run: StoredRun, loaded: Definition,
                           decision: Decision) -> None:
    assert on_taken(event, run, loaded) == decision


def test_the_same_hash_with_other_code_is_a_change_too() -> None:
    """A ``@step``'s code is not in the definition hash: its fingerprint tells."""
    run = _run(a=("succeeded", 1), b=("running", 1), c=("pending", 0))
    loaded = Definition("flow", "old-hash", prints=A_CHANGED)
    assert on_taken(Event.RESUMED, run, loaded).reason == \
        f"{WORKFLOW_CHANGED}: step 'a' (command changed)"


# --- the property -------------------------------------------------------------------------


def _definition(folder: Path, name: str, flow: Flow) -> Definition:
    path = folder / f"{name}.py"
    path.write_text(source(flow))
    return definition_of(load_file(path)["flow"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_run_goes_on_exactly_when_its_started_steps_are_unchanged(data: st.DataObject) -> None:
    old = data.draw(flows(), "definition")
    new = data.draw(edits(old), "edited")
    started = set(data.draw(st.lists(st.sampled_from([s.name for s in old]), unique=True),
                            "started"))
    event = data.draw(st.sampled_from((Event.WOKEN, Event.RESUMED, Event.RETRIED)), "event")
    with tempfile.TemporaryDirectory() as folder:
        before = _definition(Path(folder), "before", old)
        after = _definition(Path(folder), "after", new)
    assert before.prints is not None and after.prints is not None
    run = StoredRun("flow", before.definition_hash, step_prints=before.prints.text,
                    retry_of="r0" if event is Event.RETRIED else None,
                    steps={s.name: StoredStep("succeeded", 1) if s.name in started
                           else StoredStep("pending", 0) for s in old})
    decision = on_taken(event, run, after)
    first = expected_change(old, new, started)
    event_note("fails" if first else "goes on")
    if first is None:
        assert decision.action is Action.CONTINUE, decision
        if after.differs(run):
            assert decision.adopt is not None
            assert {n for n, _, _ in decision.adopt.fresh} == {s.name for s in new} - started
            assert set(decision.adopt.removed) == {s.name for s in old} - {s.name for s in new}
    else:
        assert decision.action is Action.FAIL, decision
        assert decision.reason is not None
        assert decision.reason.startswith(f"{WORKFLOW_CHANGED}: step {first!r} (")
