"""Tracing a workflow function into a :class:`~brain.dsl.model.WorkflowSpec` (plain data).

The decorator and the callable workflow built on it live in :mod:`brain.workflow`,
above the runner; this module knows nothing of running.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

from brain import placeholders
from brain._errors import PlaceholderError, WorkflowDefinitionError
from brain.dsl.model import WorkflowSpec
from brain.dsl.nodes import MISUSE, TriggerField
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


def _check_concurrency_key(where: str, key: object, limit: int | None) -> str | None:
    """``concurrency_key=``: text whose placeholders are all trigger fields, with a limit."""
    if key is None:
        return None
    key = str(key) if isinstance(key, TriggerField) else key
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
        if ref.kind != "trigger":
            raise WorkflowDefinitionError(
                f"{where}: concurrency_key is resolved when the run is queued, before any "
                f"step runs: only trigger fields may appear in it, not {ref.text}")
    return key


def trace_workflow(fn: Callable[[], Any], name: str, triggers: Sequence[TriggerSpec],
                   description: str | None, max_concurrent_runs: int | None,
                   concurrency_key: object = None) -> WorkflowSpec:
    """Trace ``fn`` into the spec of workflow ``name``: its steps, their edges, its triggers.

    Every mistake is a :class:`WorkflowDefinitionError` naming the workflow.
    """
    where = f"workflow {name!r}"
    if not placeholders.NAME_RE.match(name):
        raise WorkflowDefinitionError(f"{where}: a workflow name is letters, digits, '_' and '-'")
    if inspect.iscoroutinefunction(fn):
        raise WorkflowDefinitionError(f"{where}: a workflow is a plain def (its steps may be async)")
    required = [p.name for p in inspect.signature(fn).parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if required:
        raise WorkflowDefinitionError(
            f"{where}: a workflow takes no required parameters (got {', '.join(required)}); "
            f"its input is `trigger`")
    if current_tracer() is not None:
        raise WorkflowDefinitionError(f"{where}: workflows cannot be defined while tracing another")
    if max_concurrent_runs is not None and max_concurrent_runs < 1:
        raise WorkflowDefinitionError(f"{where}: max_concurrent_runs must be at least 1")
    key = _check_concurrency_key(where, concurrency_key, max_concurrent_runs)
    with tracing(name) as tracer:
        try:
            fn()
        except WorkflowDefinitionError as exc:
            text = str(exc)
            if text.startswith(where):
                raise
            # The original traceback is kept: it holds the user's offending call.
            raise WorkflowDefinitionError(f"{where}: {text}").with_traceback(
                exc.__traceback__) from None
        except TypeError as exc:  # json.dumps(node) and friends
            if "StepNode" in str(exc) or "TriggerField" in str(exc):
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
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:
        source = None
    return WorkflowSpec(name=name, description=description or inspect.getdoc(fn),
                        steps=tuple(tracer.steps), triggers=tuple(triggers),
                        max_concurrent_runs=max_concurrent_runs, concurrency_key=key,
                        source_file=os.path.abspath(source) if source else None,
                        groups=tuple(tracer.groups))
