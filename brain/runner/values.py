"""What placeholders read while a run executes: step outputs, the trigger, the previous run."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from brain._errors import PlaceholderError
from brain.placeholders import Ref
from brain.results import TriggerData
from brain.runner.plan import Scope
from brain.runner.texts import fill

#: Fills one field of a step: ``(text, shell_quote) -> text``.
Resolver = Callable[[str, bool], str]


class Values:
    """The values ``{step}``, ``{previous.step}``, ``{trigger.X}`` and ``{each.X}`` stand for.

    ``outputs`` is the execution's own dict of step outputs (it grows as steps
    succeed); ``previous`` the outputs of the run ``{previous.X}`` reads, once loaded.
    """

    def __init__(self, trigger: TriggerData, outputs: Mapping[str, str],
                 previous: Mapping[str, str] | None) -> None:
        self.trigger = trigger
        self.outputs = outputs
        self.previous = previous

    def lookup(self, ref: Ref) -> str:
        """The value of one placeholder outside any ``for_each`` instance."""
        if ref.kind == "step":
            return self.outputs[ref.name]
        if ref.kind == "previous":
            assert self.previous is not None
            return self.previous.get(ref.name, "")
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
        """Placeholder filling for a step, inside a ``for_each`` instance or not."""
        if scope is None:
            return lambda text, shell_quote: fill(text, self.lookup, shell_quote)

        def lookup(ref: Ref) -> str:
            if ref.kind == "each":
                return scope.element
            if ref.kind == "step":
                return self.outputs[scope.name(ref.name)]
            return self.lookup(ref)

        return lambda text, shell_quote: fill(text, lookup, shell_quote)
