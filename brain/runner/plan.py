"""The plan of one execution: what may start now, and what each ending makes ready.

Pure state and transitions, no store and no event loop (modelled on how
``dask/local.py`` keeps its state apart from the loop that drives it): the
engine asks :meth:`Plan.take_ready` for what to start, and tells the plan how
each unit ended (:meth:`Plan.finish`). The decisions taken before a step or a
``for_each`` block starts (conditions, skips, the block's expansion) are plan
transitions too: :meth:`Plan.decide` and :meth:`Plan.expand`.

What is scheduled is a *unit*: a step, or a whole ``for_each`` block (named
after its first step), which waits for everything its steps wait for outside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from brain.dsl.model import Condition, ForEachSpec, StepSpec, WorkflowSpec

#: The most elements a ``for_each`` block takes (SPEC §12); the tracer checks literal lists.
from brain.dsl.tracing import MAX_ITEMS
from brain.results import base_name

_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


def holds(value: str) -> bool | None:
    """A condition's output as a truth value: ``None`` when it is not one."""
    text = value.strip().lower()
    return True if text in _TRUE else False if text in _FALSE else None


def does_not_hold(condition: Condition, value: bool) -> str:
    """Why a step is skipped by its condition: ``condition {x} is false``."""
    return f"condition {condition.describe()} is {'true' if value else 'false'}"


def not_a_condition(condition: Condition, value: str) -> str:
    """Why a step fails on its condition: the output is not a truth value."""
    shown = value if len(value) <= 80 else value[:77] + "..."
    return (f"condition {condition.describe()} is {shown!r}: a condition's output must be "
            f"true or false (also 1/0, yes/no)")


def _gate(block: str, index: int) -> str:
    """What an instance's units wait for until it is admitted (never a step's name)."""
    return f"{block} instance {index}"


def element_text(item: Any) -> str:
    """A for_each element as ``{each.NAME}`` gives it: a string as it is, else compact JSON."""
    if isinstance(item, str):
        return item
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Scope:
    """One instance of a ``for_each`` block: its index, its element's text, the block's steps."""

    index: int
    element: str
    members: frozenset[str]

    def name(self, step: str) -> str:
        """The name ``step`` has in this instance, if it is one of the block's steps."""
        return f"{step}[{self.index}]" if step in self.members else step


@dataclass(frozen=True)
class Unit:
    """What is scheduled: one step, or a ``for_each`` block, or one step of an instance.

    A block (``group`` set, ``scope`` ``None``) is handed out twice: first to be
    expanded (:meth:`Plan.expand`, then :meth:`Plan.grow` adds its instances'
    steps as units of their own), then, once every instance ended, with
    ``gathers`` set, to record each of its steps' list of outputs. A step of an
    instance has ``scope`` set; its one step is named in the instance (``fetch[2]``).
    """

    name: str
    steps: tuple[str, ...]
    group: ForEachSpec | None = None
    scope: Scope | None = None
    gathers: bool = False


@dataclass(frozen=True)
class Skip:
    """The step (or block) does not run, and that is a success: ``reason`` says why."""

    reason: str


@dataclass(frozen=True)
class Fail:
    """The step (or block) fails before it starts: ``reason`` says why."""

    reason: str


@dataclass(frozen=True)
class Expansion:
    """A block that runs: its elements, and the steps of it skipped as a whole (with why)."""

    items: list[Any]
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass
class _Block:
    """A block that grew instances: how many, the steps of it skipped as a whole, and
    where its instances are (each instance's units not ended yet; the next to admit)."""

    unit: Unit
    count: int
    skipped: dict[str, str]
    left: list[int]
    next: int = 0
    active: int = 0
    gathered: bool = False


class Plan:
    """What runs, what waits, and what is already known, for one execution of ``spec``.

    ``outputs`` holds the outputs of steps that succeeded (in an earlier try too):
    a unit whose steps all have one is done and never scheduled. ``skipped`` holds
    the steps (and instances) that ended skipped in this execution. The plan grows
    while it runs: a ``for_each`` block, once expanded, adds a unit per step of each
    instance (:meth:`grow`), admitted ``max_parallel`` instances at a time.
    """

    def __init__(self, spec: WorkflowSpec, outputs: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self.specs: dict[str, StepSpec] = {s.name: s for s in spec.steps}
        self.outputs: dict[str, str] = dict(outputs or {})
        self.skipped: set[str] = set()
        groups = {g.steps[0]: g for g in spec.groups}
        unit_of = {name: name for name in self.specs}
        for group in groups.values():
            for name in group.steps:
                unit_of[name] = group.steps[0]
        self.units: dict[str, Unit] = {}
        needs: dict[str, set[str]] = {}
        for step in spec.steps:
            unit = unit_of[step.name]
            if unit not in self.units:
                block = groups.get(unit)
                self.units[unit] = Unit(unit, block.steps if block else (unit,), block)
            needs.setdefault(unit, set()).update(
                unit_of[u] for u in step.upstream if unit_of[u] != unit)
        #: Units not started yet, with the units each still waits for.
        self.waiting: dict[str, set[str]] = {}
        self.dependants: dict[str, list[str]] = {unit: [] for unit in self.units}
        self._ready: list[str] = []
        self._gathers: list[Unit] = []
        #: The blocks that grew instances, by unit name; and each instance unit's block.
        self.blocks: dict[str, _Block] = {}
        self._instance_of: dict[str, tuple[_Block, int]] = {}
        for unit, ups in needs.items():
            if not self.is_done(unit):
                self._wait(unit, {u for u in ups if not self.is_done(u)}, ups)

    def _wait(self, unit: str, deps: set[str], ups: Iterable[str]) -> None:
        """``unit`` waits for ``deps`` (of ``ups``, what it would wait for if nothing ended)."""
        self.waiting[unit] = deps
        for up in ups:
            self.dependants.setdefault(up, []).append(unit)
        if not deps:
            self._ready.append(unit)

    # --- scheduling ---

    def is_done(self, unit: str) -> bool:
        """Whether every step of ``unit`` has its output (from an earlier try too)."""
        return all(n in self.outputs for n in self.units[unit].steps)

    def take_ready(self) -> list[Unit]:
        """The units that may start now (each handed out once): they leave the waiting."""
        taken = [self.units[name] for name in self._ready]
        for unit in taken:
            del self.waiting[unit.name]
        self._ready = []
        taken.extend(self._gathers)
        self._gathers = []
        return taken

    def finish(self, unit: str | Unit) -> list[str]:
        """``unit`` ended well (succeeded or skipped): the units that became ready by it.

        They are handed out by the next :meth:`take_ready`. A block that grew instances
        ends well once gathered: the end of its expansion releases nothing.
        """
        if isinstance(unit, Unit):
            if unit.group is not None and unit.scope is None and not unit.gathers \
                    and unit.name in self.blocks:
                return []
            unit = unit.name
        newly = self._release(unit)
        owner = self._instance_of.get(unit)
        if owner is not None:
            block, index = owner
            block.left[index] -= 1
            if not block.left[index]:
                block.active -= 1
                newly.extend(self._admit(block))
        return newly

    def _release(self, unit: str) -> list[str]:
        newly = []
        for child in self.dependants.get(unit, ()):
            deps = self.waiting.get(child)
            if deps is not None and unit in deps:
                deps.discard(unit)
                if not deps:
                    newly.append(child)
        self._ready.extend(newly)
        return newly

    def unstarted(self) -> list[str]:
        """The step names of the units never started (a block stands for all its steps)."""
        return [name for unit in self.waiting for name in self.units[unit].steps]

    def missing(self) -> list[str]:
        """Steps that neither succeeded nor were skipped (none, after a run that succeeded)."""
        return [n for n in self.specs if n not in self.outputs and n not in self.skipped]

    # --- a plan that grows ---

    def grow(self, unit: str, expansion: Expansion) -> None:
        """A block expanded to ``expansion`` (its instance rows are stored): add a unit per
        step of each instance, each waiting for the steps of its own instance it waits for
        (call order, or siblings in ``parallel()``). Instances are admitted in item order,
        at most ``max_parallel`` at once; an instance finished in an earlier try is done."""
        block_unit = self.units[unit]
        group = block_unit.group
        assert group is not None
        members = frozenset(group.steps)
        count = len(expansion.items)
        block = self.blocks[unit] = _Block(block_unit, count, dict(expansion.skipped), [0] * count)
        for index, item in enumerate(expansion.items):
            scope = Scope(index, element_text(item), members)
            for member in group.steps:
                name = scope.name(member)
                self.units[name] = Unit(name, (name,), group, scope)
                if name in self.outputs:
                    continue
                block.left[index] += 1
                self._instance_of[name] = (block, index)
                ups = {scope.name(u) for u in self.specs[member].upstream if u in members}
                self.waiting[name] = {u for u in ups if u not in self.outputs} | {_gate(unit, index)}
                for up in ups:
                    self.dependants.setdefault(up, []).append(name)
                self.dependants.setdefault(_gate(unit, index), []).append(name)
        self._admit(block)

    def _admit(self, block: _Block) -> list[str]:
        """Admit the block's next instances while fewer than ``max_parallel`` run; gather
        the block once every instance ended."""
        group = block.unit.group
        assert group is not None
        newly: list[str] = []
        while block.next < block.count and block.active < group.max_parallel:
            index = block.next
            block.next += 1
            if block.left[index]:  # (one finished in an earlier try takes no room)
                block.active += 1
                newly.extend(self._release(_gate(block.unit.name, index)))
        if block.next == block.count and not block.active and not block.gathered:
            block.gathered = True
            self._gathers.append(replace(block.unit, gathers=True))
        return newly

    def instance_spec(self, unit: Unit) -> StepSpec:
        """The spec a step of an instance runs as: the block's step, named in the instance."""
        assert unit.scope is not None
        base = base_name(unit.name)
        return self.specs[base].model_copy(update={"name": unit.name,
                                                   "instance": unit.scope.index})

    def running_instances(self, unit: str) -> int:
        """How many instances of the block ``unit`` are admitted and not ended."""
        block = self.blocks.get(unit)
        return 0 if block is None else block.active

    # --- what is known ---

    def succeeded(self, name: str, output: str) -> None:
        """A step (or an instance) succeeded with ``output``."""
        self.outputs[name] = output

    def skip(self, names: Iterable[str]) -> None:
        """Steps (or instances) ended skipped."""
        self.skipped.update(names)

    # --- decisions before a start ---

    def decide(self, step: StepSpec, scope: Scope | None = None) -> Skip | Fail | None:
        """Before ``step`` starts: skipped (a step whose output it needs was skipped, or a
        condition does not hold), failed (a condition is not true or false), or ``None``
        to run it. Inside a block's instance, the block's steps are that instance's."""
        name_of: Callable[[str], str] = scope.name if scope is not None else (lambda n: n)
        for need in [*step.refs, *(c.step for c in step.when)]:
            if name_of(need) in self.skipped:
                return Skip(f"{{{need}}} was skipped")
        for condition in step.when:
            value = self.outputs[name_of(condition.step)]
            truth = holds(value)
            if truth is None:
                return Fail(not_a_condition(condition, value))
            if truth == condition.negated:
                return Skip(does_not_hold(condition, truth))
        return None

    def expand(self, group: ForEachSpec) -> Skip | Fail | Expansion:
        """Before a block starts: skipped as a whole, failed once (a condition around it
        is not a truth value, its list is not a JSON array or too long), or its elements
        with the steps of it that are skipped as a whole."""
        members = [self.specs[n] for n in group.steps]
        # Conditions around the whole block, and the list it loops over, decide it as one.
        around = set.intersection(*(set(m.when) for m in members))
        if group.items_step in self.skipped:
            return Skip(f"{{{group.items_step}}} was skipped")
        for condition in around:
            if condition.step in group.steps:
                continue
            value = self.outputs[condition.step]
            if holds(value) is None:
                return Fail(not_a_condition(condition, value))
        skipped: dict[str, str] = {}
        for member in members:
            reason = self._skipped_as_a_whole(member, group, skipped)
            if reason is not None:
                skipped[member.name] = reason
        if len(skipped) == len(members):
            return Expansion([], skipped)
        items = self._items(group)
        if isinstance(items, str):
            return Fail(items)
        return Expansion(items, skipped)

    def _skipped_as_a_whole(self, member: StepSpec, group: ForEachSpec,
                            skipped: Mapping[str, str]) -> str | None:
        """Why a step of a block is skipped as a whole, before it runs: a step it needs was
        skipped (outside the block, or a step of the block skipped as a whole), or one of
        its conditions outside the block does not hold; else ``None``."""
        for need in [*member.refs, *(c.step for c in member.when)]:
            if need in skipped or (need not in group.steps and need in self.skipped):
                return f"{{{need}}} was skipped"
        for condition in member.when:
            if condition.step in group.steps:
                continue
            truth = holds(self.outputs[condition.step])
            if truth is not None and truth == condition.negated:
                return does_not_hold(condition, truth)
        return None

    def _items(self, group: ForEachSpec) -> list[Any] | str:
        """The block's elements, or why there are none to loop over."""
        if group.items_step is None:
            assert isinstance(group.items, list)
            return group.items
        raw = self.outputs[group.items_step]
        try:
            items = json.loads(raw)
        except ValueError:
            items = None
        if not isinstance(items, list):
            shown = raw if len(raw) <= 80 else raw[:77] + "..."
            return (f"for_each over {{{group.items_step}}}: its output is not a JSON array "
                    f"({shown!r}); return a list from a @step")
        if len(items) > MAX_ITEMS:
            return (f"for_each over {{{group.items_step}}}: {len(items)} elements, at most "
                    f"{MAX_ITEMS} are allowed")
        return items

    def block_output(self, member: str, count: int) -> str:
        """A block step's own output: the JSON list of its instances' outputs (``null`` for
        a skipped one)."""
        values = [None if f"{member}[{i}]" in self.skipped else self.outputs.get(f"{member}[{i}]")
                  for i in range(count)]
        return json.dumps(values, ensure_ascii=False, separators=(",", ":"))

    def reads_previous(self) -> bool:
        """Whether any step reads ``{previous.X}``."""
        return any(s.previous_refs for s in self.specs.values())
