"""The plan alone: scheduling, conditions and ``for_each`` expansion, without a store or an
event loop (the engine drives it; here the tests do)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brain.dsl.model import Condition, ForEachSpec, ShellStepSpec, StepSpec, WorkflowSpec
from brain.runner.plan import Expansion, Fail, Plan, Scope, Skip


def _spec(*steps: StepSpec, groups: tuple[ForEachSpec, ...] = ()) -> WorkflowSpec:
    return WorkflowSpec(name="planned", steps=steps, groups=groups)


def _step(name: str, position: int, *upstream: str, refs: tuple[str, ...] = (),
          when: tuple[Condition, ...] = (), group: int | None = None) -> StepSpec:
    return ShellStepSpec(name=name, position=position, upstream=upstream, refs=refs, when=when,
                         group=group, command="true")


def _names(units: list) -> list[str]:  # type: ignore[type-arg]
    return [u.name for u in units]


def test_a_chain_is_handed_out_one_step_at_a_time() -> None:
    plan = Plan(_spec(_step("a", 0), _step("b", 1, "a"), _step("c", 2, "b")))
    assert _names(plan.take_ready()) == ["a"]
    assert plan.take_ready() == []  # handed out once
    assert plan.unstarted() == ["b", "c"]
    assert plan.finish("a") == ["b"]
    assert _names(plan.take_ready()) == ["b"]
    assert plan.finish("b") == ["c"]
    assert _names(plan.take_ready()) == ["c"]
    assert plan.unstarted() == []


def test_a_fan_in_waits_for_every_branch() -> None:
    plan = Plan(_spec(_step("a", 0), _step("b", 1), _step("join", 2, "a", "b")))
    assert _names(plan.take_ready()) == ["a", "b"]
    assert plan.finish("b") == []
    assert plan.finish("a") == ["join"]


def test_steps_done_in_an_earlier_try_are_not_scheduled_again() -> None:
    plan = Plan(_spec(_step("a", 0), _step("b", 1, "a"), _step("c", 2, "b")),
                outputs={"a": "1", "b": "2"})
    assert _names(plan.take_ready()) == ["c"]
    assert plan.missing() == ["c"]
    plan.succeeded("c", "3")
    assert plan.missing() == []


def test_a_for_each_block_is_one_unit_waiting_for_what_its_steps_wait_for() -> None:
    block = ForEachSpec(index=0, items=["x", "y"], steps=("fetch", "save"))
    plan = Plan(_spec(_step("list", 0), _step("fetch", 1, "list", group=0),
                      _step("save", 2, "fetch", group=0), _step("report", 3, "save"),
                      groups=(block,)))
    assert _names(plan.take_ready()) == ["list"]
    assert plan.finish("list") == ["fetch"]
    (unit,) = plan.take_ready()
    assert unit.group == block and unit.steps == ("fetch", "save")
    assert plan.unstarted() == ["report"]
    assert plan.finish("fetch") == ["report"]


def test_a_step_whose_input_was_skipped_is_skipped() -> None:
    plan = Plan(_spec(_step("a", 0), _step("b", 1, "a", refs=("a",))))
    plan.skip(["a"])
    assert plan.decide(plan.specs["b"]) == Skip("{a} was skipped")


@pytest.mark.parametrize(("value", "negated", "expected"), [
    ("true", False, None), ("yes", False, None), (" 1\n", False, None),
    ("false", False, Skip("condition {gate} is false")),
    ("true", True, Skip("condition not {gate} is true")),
    ("no", True, None),
])
def test_a_condition_runs_or_skips(value: str, negated: bool, expected: object) -> None:
    plan = Plan(_spec(_step("gate", 0), _step("b", 1, "gate",
                                              when=(Condition(step="gate", negated=negated),))),
                outputs={"gate": value})
    assert plan.decide(plan.specs["b"]) == expected


def test_a_condition_that_is_not_a_truth_value_fails_the_step() -> None:
    plan = Plan(_spec(_step("gate", 0), _step("b", 1, "gate", when=(Condition(step="gate"),))),
                outputs={"gate": "maybe"})
    decided = plan.decide(plan.specs["b"])
    assert isinstance(decided, Fail) and "'maybe'" in decided.reason


def test_inside_an_instance_the_blocks_steps_are_that_instances() -> None:
    block = ForEachSpec(index=0, items=["x"], steps=("check", "act"))
    plan = Plan(_spec(_step("check", 0, group=0),
                      _step("act", 1, "check", when=(Condition(step="check"),), group=0),
                      groups=(block,)),
                outputs={"check": "[]", "check[0]": "false"})
    scope = Scope(0, "x", frozenset(block.steps))
    assert plan.decide(plan.specs["act"], scope) == Skip("condition {check} is false")


def _block_plan(outputs: dict[str, str], items: object = "{src}",
                when: tuple[Condition, ...] = ()) -> tuple[Plan, ForEachSpec]:
    block = ForEachSpec(index=0, items=items, items_step="src" if items == "{src}" else None,
                        steps=("each",))
    plan = Plan(_spec(_step("src", 0), _step("gate", 1),
                      _step("each", 2, "src", "gate", when=when, group=0), groups=(block,)),
                outputs=outputs)
    return plan, block


def test_a_block_expands_to_its_list_elements() -> None:
    plan, block = _block_plan({"src": json.dumps(["a", {"b": 1}]), "gate": "true"})
    assert plan.expand(block) == Expansion(["a", {"b": 1}])


def test_a_block_over_a_literal_list_expands_to_it() -> None:
    plan, block = _block_plan({"gate": "true"}, items=[1, 2, 3])
    assert plan.expand(block) == Expansion([1, 2, 3])


@pytest.mark.parametrize(("raw", "says"), [
    ("not json", "not a JSON array"), ('{"a": 1}', "not a JSON array"),
    (json.dumps(list(range(1001))), "1001 elements"),
])
def test_a_block_whose_list_is_unusable_fails_once(raw: str, says: str) -> None:
    plan, block = _block_plan({"src": raw, "gate": "true"})
    expansion = plan.expand(block)
    assert isinstance(expansion, Fail) and says in expansion.reason


def test_a_block_over_a_skipped_list_is_skipped_and_a_false_condition_skips_its_steps() -> None:
    plan, block = _block_plan({"gate": "true"})
    plan.skip(["src"])
    assert plan.expand(block) == Skip("{src} was skipped")
    plan, block = _block_plan({"src": "[1]", "gate": "false"}, when=(Condition(step="gate"),))
    assert plan.expand(block) == Expansion([], {"each": "condition {gate} is false"})
    plan, block = _block_plan({"src": "[1]", "gate": "perhaps"}, when=(Condition(step="gate"),))
    assert isinstance(plan.expand(block), Fail)


def test_a_blocks_output_lists_its_instances_with_null_for_a_skipped_one() -> None:
    plan, _ = _block_plan({})
    plan.succeeded("each[0]", "A")
    plan.skip(["each[1]"])
    plan.succeeded("each[2]", "C")
    assert plan.block_output("each", 3) == '["A",null,"C"]'


@st.composite
def _dags(draw: st.DrawFn) -> tuple[WorkflowSpec, dict[str, str], int]:
    """A workflow of 1-12 steps, each waiting for some earlier ones; some done already."""
    count = draw(st.integers(1, 12))
    steps = []
    for i in range(count):
        ups = draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        steps.append(_step(f"s{i}", i, *(f"s{u}" for u in sorted(ups))))
    # What an earlier try finished: always closed upward (a step ran only after its inputs).
    done: dict[str, str] = {}
    for step in steps:
        if all(u in done for u in step.upstream) and draw(st.booleans()):
            done[step.name] = "x"
    return _spec(*steps), done, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=100, deadline=None)
@given(_dags())
def test_any_dag_runs_each_step_once_and_only_after_its_inputs(
        case: tuple[WorkflowSpec, dict[str, str], int]) -> None:
    spec, done, seed = case
    shuffle = random.Random(seed)
    plan = Plan(spec, outputs=done)
    finished = set(done)
    started: list[str] = []
    running = _names(plan.take_ready())
    while running:
        shuffle.shuffle(running)
        unit = running.pop()  # finish any running unit, in any order
        step = plan.specs[unit]
        assert all(u in finished for u in step.upstream), (unit, step.upstream, finished)
        started.append(unit)
        plan.succeeded(unit, "x")
        finished.add(unit)
        plan.finish(unit)
        running.extend(_names(plan.take_ready()))
    assert sorted(started) == sorted(s.name for s in spec.steps if s.name not in done)
    assert len(started) == len(set(started))
    assert plan.unstarted() == [] and plan.missing() == []


# --- a plan that grows: for_each instances are units of the one scheduler ---------------


def _grow_plan(members: dict[str, tuple[str, ...]], items: list[object], max_parallel: int,
               outputs: dict[str, str] | None = None) -> Plan:
    """``members``: the block's steps, each with the steps of the block it waits for."""
    block = ForEachSpec(index=0, items=items, max_parallel=max_parallel, steps=tuple(members))
    steps = [_step("src", 0)]
    steps += [_step(m, i + 1, "src", *ups, group=0) for i, (m, ups) in enumerate(members.items())]
    steps.append(_step("after", len(steps), *members))
    return Plan(_spec(*steps, groups=(block,)), outputs={"src": "x", **(outputs or {})})


def _expand(plan: Plan) -> None:
    (unit,) = plan.take_ready()
    assert unit.group is not None and unit.scope is None and not unit.gathers
    expansion = plan.expand(unit.group)
    assert isinstance(expansion, Expansion)
    plan.grow(unit.name, expansion)
    assert plan.finish(unit) == []  # the block ends well only once gathered


def test_a_block_grows_a_unit_per_instance_step_with_parallel_siblings() -> None:
    # a; parallel(b, c); d -- inside the block
    plan = _grow_plan({"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c")}, ["x", "y"], 4)
    _expand(plan)
    assert _names(plan.take_ready()) == ["a[0]", "a[1]"]
    assert plan.finish("a[1]") == ["b[1]", "c[1]"]
    (b1, c1) = plan.take_ready()
    assert c1.name == "c[1]" and c1.scope == b1.scope
    assert b1.scope is not None and b1.scope.element == "y" and b1.steps == ("b[1]",)
    assert plan.instance_spec(b1).name == "b[1]" and plan.instance_spec(b1).instance == 1
    assert plan.finish("b[1]") == [] and plan.finish("c[1]") == ["d[1]"]
    assert "d[0]" in plan.unstarted() and "after" in plan.unstarted()
    for name in ("a[0]", "b[0]", "c[0]", "d[0]", "d[1]"):
        plan.take_ready()
        plan.finish(name)
    (gather,) = plan.take_ready()
    assert gather.gathers and gather.name == "a"
    assert plan.finish(gather) == ["after"]


def test_max_parallel_admits_instances_in_item_order() -> None:
    plan = _grow_plan({"a": (), "b": ("a",)}, [1, 2, 3, 4], 2)
    _expand(plan)
    assert _names(plan.take_ready()) == ["a[0]", "a[1]"]
    assert plan.running_instances("a") == 2
    assert plan.finish("a[0]") == ["b[0]"]  # instance 0 is not over: 2 stays out
    assert _names(plan.take_ready()) == ["b[0]"]
    assert plan.finish("b[0]") == ["a[2]"]
    # (what was never handed out: the end of a run that stops now says so of each)
    assert set(plan.unstarted()) == {"a[2]", "b[1]", "b[2]", "a[3]", "b[3]", "after"}


def test_instances_finished_in_an_earlier_try_are_done_and_take_no_room() -> None:
    done = {"a[0]": "A0", "b[0]": "B0", "a[1]": "A1", "a[2]": "A2", "b[2]": "B2"}
    plan = _grow_plan({"a": (), "b": ("a",)}, [1, 2, 3, 4], 1, outputs=done)
    _expand(plan)
    assert _names(plan.take_ready()) == ["b[1]"]  # 0 and 2 are over; 1 goes on where it was
    assert plan.finish("b[1]") == ["a[3]"]
    plan.take_ready()
    plan.finish("a[3]")
    plan.take_ready()
    plan.finish("b[3]")
    (gather,) = plan.take_ready()
    assert gather.gathers
    assert plan.block_output("b", 4) == '["B0",null,"B2",null]'  # (b[1], b[3] not run here)


def test_an_empty_block_gathers_at_once() -> None:
    plan = _grow_plan({"a": ()}, [], 3)
    _expand(plan)
    (gather,) = plan.take_ready()
    assert gather.gathers and plan.finish(gather) == ["after"]


@st.composite
def _blocks(draw: st.DrawFn) -> tuple[dict[str, tuple[str, ...]], list[int], int,
                                      dict[str, str], int]:
    """A block of 1-5 steps, each waiting for some earlier ones of the block (call order,
    siblings of a parallel(), fan-in), 0-6 items, max_parallel 1-3, and what an earlier
    try finished of its instances (closed upward in each instance)."""
    count = draw(st.integers(1, 5))
    members: dict[str, tuple[str, ...]] = {}
    for i in range(count):
        ups = draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        members[f"m{i}"] = tuple(f"m{u}" for u in sorted(ups))
    items = list(range(draw(st.integers(0, 6))))
    done: dict[str, str] = {}
    for index in items:
        for name, ups in members.items():
            if all(f"{u}[{index}]" in done for u in ups) and draw(st.booleans()):
                done[f"{name}[{index}]"] = "x"
    return members, items, draw(st.integers(1, 3)), done, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=150, deadline=None)
@given(_blocks())
def test_any_block_with_parallel_steps_runs_each_instance_step_once_in_order(
        case: tuple[dict[str, tuple[str, ...]], list[int], int, dict[str, str], int]) -> None:
    members, items, max_parallel, done, seed = case
    shuffle = random.Random(seed)
    plan = _grow_plan(members, items, max_parallel, outputs=done)
    finished = {"src", *done}
    left = {i: {f"{m}[{i}]" for m in members} - set(done) for i in items}
    open_instances: set[int] = set()
    started: list[str] = []
    running = plan.take_ready()
    while running:
        for unit in running:
            if unit.scope is not None:
                open_instances.add(unit.scope.index)
        assert len(open_instances) <= max_parallel, open_instances
        shuffle.shuffle(running)
        unit = running.pop()
        if unit.scope is not None:
            index = unit.scope.index
            ups = members[unit.name.split("[")[0]]
            assert all(f"{u}[{index}]" in finished for u in ups), (unit.name, finished)
            started.append(unit.name)
            plan.succeeded(unit.name, "x")
            finished.add(unit.name)
            left[index].discard(unit.name)
            if not left[index]:
                open_instances.discard(index)
        elif unit.gathers:
            assert all(not names for names in left.values())
            for member in members:
                plan.succeeded(member, plan.block_output(member, len(items)))
                finished.add(member)
        elif unit.group is not None:
            expansion = plan.expand(unit.group)
            assert isinstance(expansion, Expansion)
            plan.grow(unit.name, expansion)
        else:
            assert unit.name == "after" and all(m in finished for m in members)
            started.append(unit.name)
            plan.succeeded(unit.name, "x")
        plan.finish(unit)
        running.extend(plan.take_ready())
    expected = {f"{m}[{i}]" for i in items for m in members} - set(done)
    assert sorted(started) == sorted([*expected, "after"])
    assert len(started) == len(set(started))
    assert plan.unstarted() == [] and plan.missing() == []
