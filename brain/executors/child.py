"""Child steps (SPEC §22): the parameters a ``workflow`` step's child run gets.

:meth:`ChildExecutor.prepare` resolves the step's arguments (placeholders filled in,
no shell quoting) and validates them against the child's parameters: a failure fails the
step, not retried. The child run itself is the runner's (:mod:`brain.runner.children`):
it queues it and waits for its end, as a step waits for a signal.

How an argument reaches its parameter: a value filled in from text (a placeholder) stays
text when the parameter's schema takes a string (a ``str``, ``str | None``, ``Any``...)
and is read as JSON only when it cannot (``int``, ``bool``, a list, a model...); a
parameter of the parent given whole is passed as its typed value; literals as they are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from brain import placeholders
from brain._errors import PlaceholderError, StepFailed
from brain.dsl.model import ParamRef, WorkflowStepSpec
from brain.dsl.output import accepts_text
from brain.executors.base import PreparedStep, Resolve, StepContext, StepOutput


@dataclass(frozen=True)
class ChildRequest:
    """What a child step's try queues: a run of ``workflow`` with ``params`` (validated)."""

    workflow: Any
    params: dict[str, Any]


class ChildExecutor:
    """The ``workflow`` step kind; see the module."""

    kind = "workflow"

    def prepare(self, spec: WorkflowStepSpec, resolve: Resolve, *,
                mocked: bool = False) -> PreparedStep:
        """The child's parameters, resolved and validated. Mocked (``brain.testing``), the
        step runs no child: its mock is its output."""
        schema = (spec.child.params_schema or {}) if spec.child is not None else {}
        properties = dict(schema.get("properties") or {})
        raw = {key: _resolved(value, resolve, accepts_text(properties.get(key), schema))
               for key, value in spec.arguments.items()}
        if mocked or spec.child is None:
            return PreparedStep(inputs=raw, payload={})
        try:
            params = spec.child.validate_params(raw)
        except ValueError as exc:  # WorkflowInputError: one line per field
            lines = "; ".join(str(exc).splitlines()) or type(exc).__name__
            raise StepFailed(f"the parameters of workflow {spec.workflow!r} are not valid: "
                             f"{lines}", retryable=False) from None
        return PreparedStep(inputs=dict(params),
                            payload={"child": ChildRequest(spec.child, dict(params))})

    async def execute(self, spec: WorkflowStepSpec, prepared: PreparedStep,
                      ctx: StepContext) -> StepOutput:
        """Never called for a real run (the runner queues the child); here only when a
        process has no runner for child runs."""
        raise StepFailed(f"step {spec.name!r} runs workflow {spec.workflow!r} as a child "
                         f"run, which only the runner can queue", retryable=False)


def _resolved(value: Any, resolve: Resolve, text: bool) -> Any:
    """An argument with its placeholders filled in, at any depth. A whole string that held
    placeholders stays text when its parameter takes text (``text``); otherwise it is read
    as JSON if it parses. A parameter given whole (:class:`ParamRef`) is its typed value."""
    if isinstance(value, ParamRef):
        param = getattr(resolve, "param", None)
        if param is None:
            return _resolved(value.template, resolve, text)
        try:
            return param(value.path)
        except PlaceholderError as exc:
            raise StepFailed(str(exc), retryable=False) from None
    if isinstance(value, str):
        if not placeholders.has_placeholders(value):
            return value
        filled = resolve(value, False)
        if text:
            return filled
        try:
            return json.loads(filled)
        except ValueError:
            return filled
    if isinstance(value, list):
        return [_resolved(v, resolve, True) for v in value]
    if isinstance(value, dict):
        return {k: _resolved(v, resolve, True) for k, v in value.items()}
    return value
