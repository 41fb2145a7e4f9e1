"""Tracing a workflow function into a :class:`~brain.dsl.model.WorkflowSpec` (plain data).

The decorator and the callable workflow built on it live in :mod:`brain.workflow`,
above the runner; this module knows nothing of running.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from brain import placeholders
from brain._errors import PlaceholderError, WorkflowDefinitionError
from brain.dsl.cost import Limit, workflow_limits
from brain.dsl.model import WorkflowSpec
from brain.dsl.nodes import MISUSE, TriggerField
from brain.dsl.output import output_template
from brain.dsl.params import ParamNode, ParamsSpec, read_params
from brain.dsl.tracing import current_tracer, tracing
from brain.dsl.triggers import TriggerSpec


def _check_trigger_identities(where: str, triggers: Sequence[TriggerSpec]) -> None:
    """Two triggers with one identity would share one fire history (SPEC §5): refuse them."""
    seen: set[str] = set()
    for trig in triggers:
        key = trig.key()
        if key in seen and trig.name is not None:
            raise WorkflowDefinitionError(
                f"{where}: two triggers are named {trig.name!r}: give each its own name=")
        if key in seen:
            raise WorkflowDefinitionError(
                f"{where}: two {trig.type} triggers are the same ({key!r}): remove one, "
                f"or give each its own name= if both are meant to fire")
        seen.add(key)


def _check_concurrency_key(where: str, key: object, limit: int | None,
                           params: ParamsSpec) -> str | None:
    """``concurrency_key=``: text whose placeholders are all trigger fields or parameters,
    with a limit."""
    if key is None:
        return None
    key = str(key) if isinstance(key, (TriggerField, ParamNode)) else key
    if not isinstance(key, str) or not key.strip():
        raise WorkflowDefinitionError(f"{where}: concurrency_key must be a text of trigger "
                                      f"placeholders, e.g. '{{trigger.headers.x-repo}}'")
    if limit is None:
        raise WorkflowDefinitionError(f"{where}: concurrency_key needs max_concurrent_runs= "
                                      f"(how many runs with the same key may run at once)")
    try:
        found = placeholders.refs(key)
    except PlaceholderError as exc:
        raise WorkflowDefinitionError(f"{where}: concurrency_key: {exc}") from None
    for ref in found:
        if ref.kind == "params":
            problem = params.field_problem(tuple(ref.name.split(".")))
            if problem is not None:
                raise WorkflowDefinitionError(f"{where}: concurrency_key: {problem}")
        elif ref.kind != "trigger":
            raise WorkflowDefinitionError(
                f"{where}: concurrency_key is resolved when the run is queued, before any "
                f"step runs: only trigger fields and parameters may appear in it, "
                f"not {ref.text}")
    return key


def _check_trigger_params(where: str, params: ParamsSpec,
                          triggers: Sequence[TriggerSpec]) -> None:
    """Each trigger must be able to supply the required parameters (SPEC §21): a schedule
    gives its ``params=`` (validated now), a webhook a JSON body's keys; a watch only the
    defaults."""
    for trig in triggers:
        given = getattr(trig, "params", None)
        if trig.type in ("cron", "every"):
            try:
                params.validate(given or {})
            except ValueError as exc:
                lines = str(exc).replace("\n", "; ")
                raise WorkflowDefinitionError(
                    f"{where}: its {trig.type} trigger ({trig.key()}) does not supply valid "
                    f"parameters: {lines} (give them with params={{...}})") from None
        elif trig.type == "watch" and params.required:
            raise WorkflowDefinitionError(
                f"{where}: a watch trigger cannot supply the required parameters "
                f"{', '.join(params.required)}: give them defaults")


def trace_workflow(fn: Callable[..., Any], name: str, triggers: Sequence[TriggerSpec],
                   description: str | None, max_concurrent_runs: int | None,
                   concurrency_key: object = None, *, mcp: bool = False,
                   limits: Mapping[str, Limit] | None = None) -> WorkflowSpec:
    """Trace ``fn`` into the spec of workflow ``name``: its steps, their edges, its triggers.

    Every mistake is a :class:`WorkflowDefinitionError` naming the workflow.
    """
    where = f"workflow {name!r}"
    if not placeholders.NAME_RE.match(name):
        raise WorkflowDefinitionError(f"{where}: a workflow name is letters, digits, '_' and '-'")
    if inspect.iscoroutinefunction(fn):
        raise WorkflowDefinitionError(f"{where}: a workflow is a plain def (its steps may be async)")
    params = read_params(fn, name)
    if current_tracer() is not None:
        raise WorkflowDefinitionError(f"{where}: workflows cannot be defined while tracing another")
    if not isinstance(mcp, bool):
        raise WorkflowDefinitionError(f"{where}: mcp= takes True or False")
    if max_concurrent_runs is not None and max_concurrent_runs < 1:
        raise WorkflowDefinitionError(f"{where}: max_concurrent_runs must be at least 1")
    key = _check_concurrency_key(where, concurrency_key, max_concurrent_runs, params)
    with tracing(name, params) as tracer:
        try:
            returned = fn(**{n: ParamNode((n,), params) for n in params.names})
        except WorkflowDefinitionError as exc:
            text = str(exc)
            if text.startswith(where):
                raise
            # The original traceback is kept: it holds the user's offending call.
            raise WorkflowDefinitionError(f"{where}: {text}").with_traceback(
                exc.__traceback__) from None
        except TypeError as exc:  # json.dumps(node) and friends
            if any(t in str(exc) for t in ("StepNode", "TriggerField", "ParamNode")):
                raise WorkflowDefinitionError(f"{where}: {MISUSE}").with_traceback(
                    exc.__traceback__) from None
            raise
    tracer.check_previous_refs()
    if not tracer.steps:
        raise WorkflowDefinitionError(f"{where}: no steps were called")
    for trig in triggers:
        problem = trig.problem() if hasattr(trig, "problem") else "not a trigger"
        if problem:
            raise WorkflowDefinitionError(f"{where}: {problem}")
    _check_trigger_identities(where, triggers)
    _check_trigger_params(where, params, triggers)
    output = output_template(returned, where, tracer.positions)
    used_limits = workflow_limits(where, limits, [(s.name, s.limit) for s in tracer.steps
                                                  if s.limit is not None])
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:
        source = None
    return WorkflowSpec(name=name, description=description or inspect.getdoc(fn),
                        steps=tuple(tracer.steps), triggers=tuple(triggers),
                        max_concurrent_runs=max_concurrent_runs, concurrency_key=key,
                        mcp=mcp, source_file=os.path.abspath(source) if source else None,
                        groups=tuple(tracer.groups), params=params,
                        params_schema=params.schema, output_schema=params.output_schema,
                        output=output, limits=used_limits)
