"""Calling a workflow while another is traced (SPEC §22): a step of kind ``workflow``.

``summarize(url=u, words=80)`` inside a ``@workflow`` function records a step named
after the called workflow (``summarize``, ``summarize-2``, ...) whose run, when it
starts, queues a child run of ``summarize`` with those parameters and waits for it.
``summarize.with_options(name="sum", timeout_seconds=600, retries=1)(url=u)`` names it
and sets its options, as ``@step`` functions take them.

The arguments may hold step outputs, parameters and placeholders (resolved when the
step starts, without shell quoting); they are validated against the child's
parameters then. A name the child does not take, or a required one left out, is a
definition error now.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from brain.dsl.helpers import common_options
from brain.dsl.model import SecretRef, WorkflowStepSpec
from brain.dsl.nodes import StepNode
from brain.dsl.tracing import Tracer, require_tracer

#: The options a child step takes (SPEC §22), as ``@step`` takes them.
OPTION_NAMES = ("name", "timeout_seconds", "retries", "retry_delay_seconds")


class ChildWorkflow(Protocol):
    """What a child step needs of the workflow it calls (``brain.Workflow`` has it)."""

    name: str

    @property
    def params_schema(self) -> dict[str, Any]:
        """The JSON Schema of its parameters object."""
        ...

    def validate_params(self, raw: Mapping[str, Any] | None) -> dict[str, Any]:
        """Its parameters validated, defaults applied (``WorkflowInputError`` if not)."""
        ...


def child_step(child: ChildWorkflow, params: Mapping[str, Any], **options: Any) -> StepNode:
    """Record a step that runs ``child`` as a child run with ``params`` (see the module);
    ``options``: :data:`OPTION_NAMES`. Returns the step's node: the child's output."""
    tracer = require_tracer(child.name)
    _check_options(tracer, options)
    name = options.get("name")
    name = tracer.free_name(child.name) if name is None else tracer.check_name(name)
    opts = common_options(tracer, name, options.get("timeout_seconds"),
                          options.get("retries", 0), options.get("retry_delay_seconds", 1.0),
                          None)
    schema = child.params_schema or {}
    known = dict(schema.get("properties") or {})
    unknown = [k for k in params if k not in known]
    if unknown:
        takes = ", ".join(known) or "no parameters"
        raise tracer.error(name, f"workflow {child.name!r} has no parameter "
                                 f"{', '.join(map(repr, unknown))} (it takes {takes})")
    missing = [k for k in schema.get("required") or () if k not in params]
    if missing:
        raise tracer.error(name, f"workflow {child.name!r} needs "
                                 f"{', '.join(map(repr, missing))}: pass "
                                 f"{child.name}({missing[0]}=...)")
    refs: list[str] = []
    arguments = {}
    for key, value in params.items():
        if _holds_secret(value):
            raise tracer.error(name, f"parameter {key!r}: a child run's parameters are stored "
                                     f"with it, so secret() cannot stand for one; let the "
                                     f"child read the secret itself")
        arguments[key] = tracer.deep_template(name, f"parameter {key!r}", value, refs,
                                              typed=True)
    spec = WorkflowStepSpec(name=name, **tracer.placement(name, refs, [], None),
                            workflow=child.name, arguments=arguments, child=child,
                            **opts)  # type: ignore[arg-type]
    return tracer.add(spec)


def placeholder(child: ChildWorkflow) -> str:
    """``f"{summarize}"`` while tracing: the placeholder of the step named like the called
    workflow (``{summarize}``; after a ``for_each`` block, the list of its outputs). A
    workflow with no such step is a definition error where the text is used."""
    return "{" + child.name + "}"


def with_options(child: ChildWorkflow, run: Callable[..., Any],
                 **options: Any) -> Callable[..., Any]:
    """``wf.with_options(name=, timeout_seconds=, retries=, retry_delay_seconds=)``: called
    while another workflow is traced, a child step with those options; otherwise ``run``
    (the workflow run now, the options unused)."""
    unknown = set(options) - set(OPTION_NAMES)
    if unknown:
        raise TypeError(f"unknown options {sorted(unknown)}; use {', '.join(OPTION_NAMES)}")

    def call(**params: Any) -> Any:
        from brain.dsl.tracing import current_tracer

        if current_tracer() is not None:
            return child_step(child, params, **options)
        return run(**params)

    return call


def _check_options(tracer: Tracer, options: Mapping[str, Any]) -> None:
    unknown = set(options) - set(OPTION_NAMES)
    if unknown:
        raise tracer.error(None, f"unknown options {sorted(unknown)}; use "
                                 f"{', '.join(OPTION_NAMES)}")


def _holds_secret(value: Any) -> bool:
    if isinstance(value, SecretRef):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_secret(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_secret(v) for v in value.values())
    return False
