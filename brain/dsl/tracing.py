"""The tracer: records step calls made while a ``@workflow`` function is traced."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from brain import placeholders
from brain._errors import WorkflowDefinitionError
from brain.dsl.model import AnyStepSpec, SecretRef
from brain.dsl.nodes import StepNode, _Lazy

_current: ContextVar[Tracer | None] = ContextVar("brain_tracer", default=None)


def current_tracer() -> Tracer | None:
    """The tracer of the workflow being decorated in this context, if any."""
    return _current.get()


class Tracer:
    """Collects step specs in call order and the order edges between them."""

    def __init__(self, workflow: str) -> None:
        self.workflow = workflow
        self.steps: list[AnyStepSpec] = []
        self.positions: dict[str, int] = {}
        self.frontier: tuple[str, ...] = ()
        self.in_parallel = False
        self.block_base: tuple[str, ...] = ()
        self.block: list[str] = []
        self.previous: dict[str, list[str]] = {}
        self.suffixes: dict[str, int] = {}

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

    def deep_template(self, step: str, field: str, value: Any, refs: list[str]) -> Any:
        """Convert nodes at any depth to template text; check the rest is JSON data."""
        if isinstance(value, _Lazy):
            return self.template(step, field, value, refs)
        if isinstance(value, SecretRef):
            return value
        if isinstance(value, str):
            self.collect_refs(step, value, refs)
            return value
        if isinstance(value, (list, tuple)):
            return [self.deep_template(step, field, v, refs) for v in value]
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    raise self.error(step, f"{field}: dict keys must be strings, not {k!r}")
                out[k] = self.deep_template(step, field, v, refs)
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
def tracing(workflow: str) -> Iterator[Tracer]:
    """Make a new tracer current while the workflow function runs."""
    tracer = Tracer(workflow)
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
    tracer.in_parallel = True
    tracer.block_base = tracer.frontier
    tracer.block = []
    try:
        yield
    finally:
        tracer.in_parallel = False
        if tracer.block:
            tracer.frontier = tuple(tracer.block)
