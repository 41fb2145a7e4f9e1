"""Lazy stand-ins for values that exist only at run time: step outputs and trigger fields.

A node turns into its placeholder text (``f"{node}"`` is ``{node}``); any other
use is a definition error, because the value does not exist while tracing.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, NoReturn

from brain._errors import WorkflowDefinitionError

MISUSE = "step outputs exist only at run time; transform them in a @step"
_HEADER = re.compile(r"^[A-Za-z0-9_-]+$")


if TYPE_CHECKING:
    # Type checkers see a node as the text it becomes, so a step output passes to any
    # parameter typed `str` (`headline(fast)`); at run time it is a placeholder object
    # whose every other use is a definition error.
    _Text = str
else:
    _Text = object


class _Lazy(_Text):
    """Shared behaviour: text form, and a clear error for any other use."""

    __slots__ = ()

    def _placeholder(self) -> str:
        raise NotImplementedError

    def _where(self) -> str:
        raise NotImplementedError

    def _misuse(self, *_: Any, **__: Any) -> NoReturn:
        raise WorkflowDefinitionError(f"{self._where()}: {MISUSE}")

    def __str__(self) -> str:
        return self._placeholder()

    def __format__(self, spec: str) -> str:
        if spec:
            raise WorkflowDefinitionError(
                f"{self._where()}: a format spec ({spec!r}) cannot apply to a step output; "
                f"{MISUSE}")
        return self._placeholder()

    def __repr__(self) -> str:
        from brain.dsl.tracing import current_tracer

        if current_tracer() is not None:  # f"{node!r}" while tracing: refuse, don't embed junk
            self._misuse()
        return f"<{type(self).__name__} {self._placeholder()}>"

    def __hash__(self) -> int:
        return id(self)

    __bool__ = __len__ = __iter__ = __contains__ = __getitem__ = _misuse  # type: ignore[assignment]
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _misuse  # type: ignore[assignment]
    __add__ = __radd__ = __mul__ = __rmul__ = __mod__ = __rmod__ = _misuse  # type: ignore[assignment]
    __int__ = __float__ = __index__ = __call__ = _misuse  # type: ignore[assignment]

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._misuse()


class StepNode(_Lazy):
    """The output of step ``name`` in the same run, as returned by the helpers."""

    __slots__ = ("_name", "_workflow")

    def __init__(self, name: str, workflow: str) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_workflow", workflow)

    _name: str
    _workflow: str

    def _placeholder(self) -> str:
        return "{" + self._name + "}"

    def _where(self) -> str:
        return f"workflow {self._workflow!r}, step {self._name!r}"

    @property
    def previous(self) -> PreviousNode:
        """This step's output in the workflow's latest succeeded run (``{previous.NAME}``)."""
        return PreviousNode(self._name, self._workflow)

    def __invert__(self) -> NotNode:
        """``~node``: the condition that this step's output does *not* hold (for ``when``)."""
        return NotNode(self)


class PreviousNode(StepNode):
    """``node.previous``: the placeholder ``{previous.NAME}``."""

    __slots__ = ()

    def _placeholder(self) -> str:
        return "{previous." + self._name + "}"

    @property
    def previous(self) -> PreviousNode:
        """Already the previous output."""
        return self


class NotNode(_Lazy):
    """``~node``: a negated condition; it means something only to ``when``."""

    __slots__ = ("_node",)

    _node: StepNode

    def __init__(self, node: StepNode) -> None:
        object.__setattr__(self, "_node", node)

    def _placeholder(self) -> str:
        raise WorkflowDefinitionError(
            f"{self._where()}: ~node is a condition for when(); it has no text of its own")

    def _where(self) -> str:
        return self._node._where()

    def __invert__(self) -> StepNode:  # type: ignore[override]
        return self._node


class EachNode(_Lazy):
    """The current element of a ``for_each`` block: ``{each.NAME}``, valid only inside
    the block that made it (block ``index``)."""

    __slots__ = ("_block", "_item")

    _item: str
    _block: int

    def __init__(self, item: str, block: int = -1) -> None:
        object.__setattr__(self, "_item", item)
        object.__setattr__(self, "_block", block)

    def _placeholder(self) -> str:
        from brain.dsl.tracing import current_tracer

        tracer = current_tracer()
        if tracer is not None and (tracer.group is None or tracer.group.index != self._block):
            raise WorkflowDefinitionError(
                f"{self._where()}: the element of a for_each block is used outside that block")
        return "{each." + self._item + "}"

    def __invert__(self) -> NoReturn:  # type: ignore[misc]
        raise WorkflowDefinitionError(
            f"{self._where()}: ~ negates a step's output for when(); an element is not one")

    def _where(self) -> str:
        return f"for_each element {self._item!r}"


class TriggerField(_Lazy):
    """One field of the run's trigger: ``{trigger.body}``, ``{trigger.headers.x}``..."""

    __slots__ = ("_field",)

    _field: str

    def __init__(self, field: str) -> None:
        object.__setattr__(self, "_field", field)

    def _placeholder(self) -> str:
        return "{trigger." + self._field + "}"

    def _where(self) -> str:
        return f"trigger.{self._field}"


class _Headers:
    """``trigger.headers["X-GitHub-Event"]`` → ``{trigger.headers.x-github-event}``."""

    __slots__ = ()

    def __getitem__(self, header: str) -> TriggerField:
        if not isinstance(header, str) or not _HEADER.match(header):
            raise WorkflowDefinitionError(
                f"trigger.headers[{header!r}]: a header name is letters, digits, '-' and '_'")
        return TriggerField("headers." + header.lower())

    def __repr__(self) -> str:
        return "trigger.headers"


class _Trigger:
    """The ``trigger`` object: the run's input, as placeholders."""

    __slots__ = ()
    headers = _Headers()

    @property
    def event(self) -> TriggerField:
        """``manual``, ``schedule``, ``webhook`` or ``file``."""
        return TriggerField("event")

    @property
    def body(self) -> TriggerField:
        """The payload text."""
        return TriggerField("body")

    @property
    def path(self) -> TriggerField:
        """The file path of a file trigger."""
        return TriggerField("path")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise WorkflowDefinitionError(
            f"trigger.{attr} does not exist: use trigger.event, trigger.body, trigger.path "
            f"or trigger.headers[NAME]")

    def __repr__(self) -> str:
        return "trigger"


trigger = _Trigger()
