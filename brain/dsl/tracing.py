"""The tracer: records step calls made while a ``@workflow`` function is traced."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from brain import placeholders
from brain._errors import WorkflowDefinitionError
from brain.dsl.model import AnyStepSpec, Condition, ForEachSpec, ParamRef, SecretRef
from brain.dsl.nodes import EachNode, NotNode, PreviousNode, StepNode, _Lazy
from brain.dsl.params import NotParam, ParamNode, ParamsSpec, is_param_key, param_key

#: The most elements a ``for_each`` block takes (SPEC §12).
MAX_ITEMS = 1000

_current: ContextVar[Tracer | None] = ContextVar("brain_tracer", default=None)


def current_tracer() -> Tracer | None:
    """The tracer of the workflow being decorated in this context, if any."""
    return _current.get()


class Tracer:
    """Collects step specs in call order and the order edges between them."""

    def __init__(self, workflow: str, params: ParamsSpec | None = None) -> None:
        self.workflow = workflow
        #: The workflow's parameters (SPEC §21): what ``{params.X}`` may name.
        self.params = params or ParamsSpec(workflow=workflow)
        self.steps: list[AnyStepSpec] = []
        self.positions: dict[str, int] = {}
        self.frontier: tuple[str, ...] = ()
        self.in_parallel = False
        self.block_base: tuple[str, ...] = ()
        self.block: list[str] = []
        self.previous: dict[str, list[str]] = {}
        self.suffixes: dict[str, int] = {}
        #: The conditions of the ``with when(...)`` blocks around the current call.
        self.conditions: list[Condition] = []
        #: The ``for_each`` block being traced, and every block so far.
        self.group: ForEachSpec | None = None
        self.groups: list[ForEachSpec] = []
        self.group_of: dict[str, int] = {}

    # --- naming and errors ---

    def error(self, step: str | None, problem: str) -> WorkflowDefinitionError:
        """A definition error naming this workflow and ``step``."""
        where = f"workflow {self.workflow!r}" + (f", step {step!r}" if step else "")
        return WorkflowDefinitionError(f"{where}: {problem}")

    def check_name(self, name: object) -> str:
        """Refuse a bad or duplicate step name."""
        if not isinstance(name, str) or not placeholders.NAME_RE.match(name):
            raise self.error(None, f"bad step name {name!r}: use letters, digits, '_' and '-'")
        if name in self.positions:
            raise self.error(name, "duplicate step name: each step needs its own name")
        return name

    def free_name(self, base: str) -> str:
        """``base``, or ``base-2``, ``base-3``... skipping names already taken."""
        if base not in self.positions:
            return base
        n = self.suffixes.get(base, 2)
        while f"{base}-{n}" in self.positions:
            n += 1
        self.suffixes[base] = n + 1
        return f"{base}-{n}"

    # --- templates ---

    def template(self, step: str, field: str, value: object, refs: list[str]) -> str:
        """Turn ``value`` (text or a node) into template text and collect its step refs."""
        if isinstance(value, _Lazy):
            value = str(value)
        if isinstance(value, SecretRef):
            raise self.error(step, f"{field}: secret() may stand only for an api_key, "
                                   f"an env value or an args value")
        if not isinstance(value, str):
            raise self.error(step, f"{field} must be a string or a step output, "
                                   f"not {type(value).__name__}")
        self.collect_refs(step, value, refs)
        return value

    def collect_refs(self, step: str, text: str, refs: list[str]) -> None:
        """Check each ``{NAME}`` in ``text`` names an earlier step; add it to ``refs``."""
        for ref in placeholders.refs(text):
            if ref.kind == "step":
                if ref.name not in self.positions:
                    raise self.error(step, f"{ref.text} does not name an earlier step "
                                           f"(steps so far: {', '.join(self.positions) or 'none'})")
                refs.append(ref.name)
            elif ref.kind == "previous":
                self.previous.setdefault(step, []).append(ref.name)
            elif ref.kind == "params":
                problem = self.params.field_problem(tuple(ref.name.split(".")))
                if problem is not None:
                    raise self.error(step, problem)
            elif ref.kind == "each" and (self.group is None or ref.name != self.group.item_name):
                inside = "" if self.group is None else \
                    f" (this block's element is {{each.{self.group.item_name}}})"
                raise self.error(step, f"{ref.text} is used outside the for_each block that "
                                       f"names it{inside}")

    def deep_template(self, step: str, field: str, value: Any, refs: list[str],
                      typed: bool = False) -> Any:
        """Convert nodes at any depth to template text; check the rest is JSON data.
        ``typed`` (``@step`` arguments): a parameter is kept as a :class:`ParamRef`, so
        the function gets its typed value."""
        if typed and isinstance(value, ParamNode):
            return ParamRef(path=value._path)
        if isinstance(value, _Lazy):
            return self.template(step, field, value, refs)
        if isinstance(value, SecretRef):
            return value
        if isinstance(value, str):
            self.collect_refs(step, value, refs)
            return value
        if isinstance(value, (list, tuple)):
            return [self.deep_template(step, field, v, refs, typed) for v in value]
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    raise self.error(step, f"{field}: dict keys must be strings, not {k!r}")
                out[k] = self.deep_template(step, field, v, refs, typed)
            return out
        if value is None or isinstance(value, (bool, int, float)):
            return value
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise self.error(step, f"{field}: {type(value).__name__} is not JSON-serialisable "
                                   f"(step arguments are stored)") from None
        return value

    def after_names(self, step: str, after: Sequence[object] | None) -> list[str]:
        """Names in ``after=``: nodes or step names of earlier steps."""
        names: list[str] = []
        for item in after or ():
            if isinstance(item, StepNode):
                name = item._name
            elif isinstance(item, str):
                name = item
            else:
                raise self.error(step, f"after= takes step outputs or step names, not {item!r}")
            if name not in self.positions:
                raise self.error(step, f"after= names {name!r}, which is not an earlier step")
            names.append(name)
        return names

    # --- conditions and blocks ---

    def condition(self, step: str | None, node: object) -> Condition:
        """The condition ``node`` (a step output, or ``~`` one) stands for."""
        if isinstance(node, (ParamNode, NotParam)):
            return self.param_condition(step, node)
        negated = isinstance(node, NotNode)
        if isinstance(node, NotNode):
            node = node._node
        if isinstance(node, PreviousNode) or not isinstance(node, StepNode):
            shown = ("an output of the previous run (.previous)" if isinstance(node, PreviousNode)
                     else "a for_each element" if isinstance(node, EachNode)
                     else "a trigger field" if isinstance(node, _Lazy) else type(node).__name__)
            raise self.error(step, f"when takes the output of an earlier step of this run (or "
                                   f"~output), not {shown}: compute the condition in a @step "
                                   f"returning a bool")
        if node._name not in self.positions:
            raise self.error(step, f"when names {node._name!r}, which is not an earlier step "
                                   f"of this workflow")
        group = self.group_of.get(node._name)
        if group is not None and (self.group is None or self.group.index != group):
            raise self.error(step, f"when names {node._name!r}, a step of a for_each block: "
                                   f"after the block its output is a list, not a condition")
        return Condition(step=node._name, negated=negated)

    def param_condition(self, step: str | None, node: ParamNode | NotParam) -> Condition:
        """``when=dry_run`` / ``when=~dry_run``: the parameter is (not) JSON ``true``."""
        param = node._node if isinstance(node, NotParam) else node
        if len(param._path) == 1 and self.params.kind_of(param._path[0]) not in ("boolean", None):
            raise self.error(step, f"when takes a bool parameter, and {param._path[0]!r} is a "
                                   f"{self.params.kind_of(param._path[0])}: compute the "
                                   f"condition in a @step returning a bool")
        return Condition(step=param_key(param._path), negated=isinstance(node, NotParam))

    def placement(self, name: str, refs: list[str], after_names: list[str],
                  when: object = None) -> dict[str, Any]:
        """Where a new step sits: its position, what it waits for and reads, its conditions
        and its ``for_each`` block (the fields every step spec shares)."""
        conditions = list(self.conditions)
        if when is not None:
            own = self.condition(name, when)
            if own not in conditions:
                conditions.append(own)
        waits = [c.step for c in conditions if not is_param_key(c.step)]
        if self.group is not None and self.group.items_step is not None and \
                not is_param_key(self.group.items_step):
            waits.append(self.group.items_step)
        return {"position": len(self.steps),
                "upstream": self.upstream(self.order_upstream(), refs, after_names, waits),
                "refs": tuple(dict.fromkeys(refs)), "when": tuple(conditions),
                "group": None if self.group is None else self.group.index,
                "previous_refs": self.previous_refs(name)}

    # --- recording ---

    def order_upstream(self) -> tuple[str, ...]:
        """What a new step waits for by call order."""
        return self.block_base if self.in_parallel else self.frontier

    def add(self, spec: AnyStepSpec) -> StepNode:
        """Record a finished spec and return its node."""
        if spec.name in self.positions:
            raise self.error(spec.name, "duplicate step name: each step needs its own name")
        self.positions[spec.name] = len(self.steps)
        self.steps.append(spec)
        if self.group is not None:
            self.group_of[spec.name] = self.group.index
            self.group = self.group.model_copy(update={"steps": (*self.group.steps, spec.name)})
        if self.in_parallel:
            self.block.append(spec.name)
        else:
            self.frontier = (spec.name,)
        return StepNode(spec.name, self.workflow)

    def upstream(self, *groups: Sequence[str]) -> tuple[str, ...]:
        """The de-duplicated union of ``groups``, first occurrence first."""
        return tuple(dict.fromkeys(n for g in groups for n in g))

    def previous_refs(self, step: str) -> tuple[str, ...]:
        """The ``{previous.X}`` names collected for ``step`` so far."""
        return tuple(dict.fromkeys(self.previous.get(step, ())))

    def check_previous_refs(self) -> None:
        """Check every ``{previous.X}`` names a step of the workflow (any, even later)."""
        for step, names in self.previous.items():
            for name in names:
                if name not in self.positions:
                    raise self.error(step, f"{{previous.{name}}} does not name a step of this workflow")


@contextmanager
def tracing(workflow: str, params: ParamsSpec | None = None) -> Iterator[Tracer]:
    """Make a new tracer current while the workflow function runs."""
    tracer = Tracer(workflow, params)
    token = _current.set(tracer)
    try:
        yield tracer
    finally:
        _current.reset(token)


def require_tracer(helper: str) -> Tracer:
    """The current tracer, or a clear error for a helper used outside a workflow."""
    tracer = _current.get()
    if tracer is None:
        raise WorkflowDefinitionError(
            f"{helper}() can only be called inside a @workflow function (it records a step)")
    return tracer


@contextmanager
def parallel() -> Iterator[None]:
    """Run the steps called inside the block as siblings.

    Each waits for what came before the block; what follows waits for all.

    >>> with parallel():          # doctest: +SKIP
    ...     a = shell("a", command="sleep 1")
    ...     b = shell("b", command="sleep 1")
    """
    tracer = require_tracer("parallel")
    if tracer.in_parallel:
        raise tracer.error(None, "parallel() blocks cannot be nested")
    # Inside a for_each block it makes siblings within each instance.
    tracer.in_parallel = True
    tracer.block_base = tracer.frontier
    tracer.block = []
    try:
        yield
    finally:
        tracer.in_parallel = False
        if tracer.block:
            tracer.frontier = tuple(tracer.block)


@contextmanager
def when(node: object) -> Iterator[None]:
    """Run the steps called inside the block only if ``node``'s output holds at run time.

    The output, stripped and lower-cased, must be ``true``/``false`` (also
    ``1``/``0``, ``yes``/``no``); otherwise the conditioned step fails. Steps
    that do not run end ``skipped``. Nested blocks AND together;
    ``when(~node)`` negates.

    >>> with when(pushed_to_main(trigger.headers["X-Ref"])):   # doctest: +SKIP
    ...     shell("deploy", argv=["./deploy.sh"])
    """
    tracer = require_tracer("when")
    condition = tracer.condition(None, node)
    tracer.conditions.append(condition)
    try:
        yield
    finally:
        tracer.conditions.pop()


@contextmanager
def for_each(items: object, *, max_parallel: int = 4, name: str = "item") -> Iterator[Any]:
    """Run the steps called inside the block once per element of ``items``.

    ``items`` is a literal list or a step output holding a JSON array (at most
    1,000 elements). The block yields the current element (``{each.NAME}``):
    a string element is its text, any other its compact JSON. Instances run in
    parallel, up to ``max_parallel`` at once; each runs the block's steps in
    call order (those inside a ``parallel()`` within the block as siblings), as
    steps named ``step[0]``, ``step[1]``... A reference inside
    the block is to the same instance; after it, to the JSON array of every
    instance's output in item order.

    >>> with for_each(files, max_parallel=4) as f:       # doctest: +SKIP
    ...     review = llm("review", prompt=f"Review the change to {f}")
    """
    tracer = require_tracer("for_each")
    if tracer.group is not None:
        raise tracer.error(None, "for_each blocks cannot be nested")
    if not isinstance(name, str) or not placeholders.NAME_RE.match(name):
        raise tracer.error(None, f"for_each name= must be letters, digits, '_' and '-', "
                                 f"not {name!r}")
    if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
        raise tracer.error(None, f"for_each max_parallel= must be a whole number >= 1, "
                                 f"not {max_parallel!r}")
    index = len(tracer.groups)
    if isinstance(items, StepNode) and not isinstance(items, PreviousNode):
        if items._name not in tracer.positions:
            raise tracer.error(None, f"for_each over {items._name!r}, which is not an earlier "
                                     f"step of this workflow")
        spec = ForEachSpec(index=index, items=str(items), items_step=items._name,
                           item_name=name, max_parallel=max_parallel)
    elif isinstance(items, ParamNode):
        if len(items._path) == 1 and tracer.params.kind_of(items._path[0]) not in ("array", None):
            raise tracer.error(None, f"for_each over parameter {items._path[0]!r}, which is a "
                                     f"{tracer.params.kind_of(items._path[0])}, not a list")
        spec = ForEachSpec(index=index, items=str(items), items_step=param_key(items._path),
                           item_name=name, max_parallel=max_parallel)
    elif isinstance(items, (list, tuple)):
        if len(items) > MAX_ITEMS:
            raise tracer.error(None, f"for_each over {len(items)} elements: at most "
                                     f"{MAX_ITEMS} are allowed")
        literal = tracer.deep_template("for_each", "items", list(items), [])
        if any(isinstance(v, str) and placeholders.has_placeholders(v) for v in literal):
            raise tracer.error(None, "for_each items: a literal list holds plain values, not "
                                     "step outputs (loop over a step that returns the list)")
        spec = ForEachSpec(index=index, items=literal, item_name=name,
                           max_parallel=max_parallel)
    else:
        shown = "a trigger field" if isinstance(items, _Lazy) else type(items).__name__
        raise tracer.error(None, f"for_each takes a list or the output of an earlier step "
                                 f"(a JSON array), not {shown}: parse it in a @step that "
                                 f"returns a list")
    # Each instance runs the block's steps in call order (siblings only inside a parallel()
    # within the block), so a block inside a parallel() orders its own steps: the parallel
    # is set aside while the block is traced, and the block joins its siblings after.
    outer = (tracer.in_parallel, tracer.block_base, tracer.block)
    tracer.in_parallel = False
    tracer.group = spec
    try:
        yield EachNode(name, index)
    finally:
        block = tracer.group
        tracer.group = None
        tracer.in_parallel, tracer.block_base, tracer.block = outer
        if tracer.in_parallel:
            tracer.frontier = tracer.block_base
            if block is not None:
                tracer.block.extend(block.steps)
    if block is not None and block.steps:
        tracer.groups.append(block)
        if not tracer.in_parallel:
            tracer.frontier = block.steps
