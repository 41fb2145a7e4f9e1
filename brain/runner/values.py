"""What placeholders read while a run executes: step outputs, the trigger, the previous run."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from brain._errors import PlaceholderError
from brain.dsl.model import WorkflowSpec
from brain.dsl.params import PARAM_PREFIX, is_param_key, lookup_param, param_text, param_truth
from brain.placeholders import Ref
from brain.results import TriggerData
from brain.runner.plan import Scope
from brain.runner.texts import fill

#: Fills one field of a step: ``(text, shell_quote) -> text``.
Resolver = Callable[[str, bool], str]


class Values:
    """The values ``{step}``, ``{previous.step}``, ``{trigger.X}``, ``{params.X}`` and
    ``{each.X}`` stand for.

    ``outputs`` is the execution's own dict of step outputs (it grows as steps
    succeed); ``previous`` the outputs of the run ``{previous.X}`` reads, once loaded;
    ``params`` the run's validated parameters.
    """

    def __init__(self, trigger: TriggerData, outputs: Mapping[str, str],
                 previous: Mapping[str, str] | None,
                 params: Mapping[str, Any] | None = None) -> None:
        self.trigger = trigger
        self.outputs = outputs
        self.previous = previous
        self.params: Mapping[str, Any] = params or {}

    def param(self, path: tuple[str, ...] | list[str]) -> Any:
        """The (JSON) value of a parameter, or of a field of one."""
        try:
            return lookup_param(self.params, path)
        except KeyError as exc:
            raise PlaceholderError(f"{{params.{'.'.join(path)}}}: this run's parameters have "
                                   f"no {exc.args[0]!r}") from None

    def lookup(self, ref: Ref) -> str:
        """The value of one placeholder outside any ``for_each`` instance."""
        if ref.kind == "step":
            return self.outputs[ref.name]
        if ref.kind == "previous":
            assert self.previous is not None
            return self.previous.get(ref.name, "")
        if ref.kind == "params":
            return param_text(self.param(ref.name.split(".")))
        t = self.trigger
        if ref.name == "event":
            return t.event
        if ref.name == "body":
            return t.body
        if ref.name == "path":
            if t.path is None:
                raise PlaceholderError(f"{ref.text}: this run's trigger ({t.event}) has no path")
            return t.path
        header = ref.name[len("headers."):]
        if header not in t.headers:
            raise PlaceholderError(f"{ref.text}: this run's trigger has no header {header!r}")
        return t.headers[header]

    def resolver(self, scope: Scope | None) -> Resolver:
        """Placeholder filling for a step, inside a ``for_each`` instance or not; it also
        gives a parameter's typed value (``.param``, for ``@step`` arguments)."""
        if scope is None:
            return _Resolver(self.lookup, self.param)

        def lookup(ref: Ref) -> str:
            if ref.kind == "each":
                return scope.element
            if ref.kind == "step":
                return self.outputs[scope.name(ref.name)]
            return self.lookup(ref)

        return _Resolver(lookup, self.param)


def param_outputs(spec: WorkflowSpec, params: Mapping[str, Any]) -> dict[str, str]:
    """What the plan reads for conditions and ``for_each`` lists on parameters (SPEC §21),
    known when the run starts: a condition's ``true``/``false`` (``true`` only for JSON
    ``true``), a list's JSON text. Keyed by their pseudo-step names (``params.dry_run``)."""
    found: dict[str, str] = {}
    for step in spec.steps:
        for condition in step.when:
            if is_param_key(condition.step):
                found[condition.step] = param_truth(_value_at(params, condition.step))
    for group in spec.groups:
        if group.items_step is not None and is_param_key(group.items_step):
            found[group.items_step] = param_text(_value_at(params, group.items_step))
    return found


def _value_at(params: Mapping[str, Any], key: str) -> Any:
    try:
        return lookup_param(params, key[len(PARAM_PREFIX):].split("."))
    except KeyError:
        return None


class _Resolver:
    """Fills one field of a step: ``(text, shell_quote) -> text``; ``param(path)`` is a
    parameter's typed value."""

    __slots__ = ("lookup", "param")

    def __init__(self, lookup: Callable[[Ref], str],
                 param: Callable[[tuple[str, ...] | list[str]], Any]) -> None:
        self.lookup = lookup
        self.param = param

    def __call__(self, text: str, shell_quote: bool) -> str:
        return fill(text, self.lookup, shell_quote)
