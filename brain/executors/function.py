"""``@step`` functions: resolve arguments, validate annotated ones, call the function."""

from __future__ import annotations

import asyncio
import inspect
import typing
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from brain import placeholders
from brain._errors import PlaceholderError, StepFailed
from brain.dsl.model import FunctionStepSpec, ParamRef, SecretRef
from brain.executors.base import REDACTED, PreparedStep, Resolve, StepContext, StepOutput, read_secret
from brain.executors.capture import capturing
from brain.executors.threads import ThreadCall

_TEXT_TYPES: tuple[object, ...] = (str, Any, inspect.Parameter.empty)


@lru_cache(maxsize=1024)
def _signature(func: Callable[..., Any]) -> tuple[inspect.Signature, dict[str, Any]]:
    sig = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # unresolvable forward references: fall back to the raw annotations
        hints = {k: p.annotation for k, p in sig.parameters.items()}
    return sig, hints


@lru_cache(maxsize=1024)
def _adapter(annotation: Any) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(annotation)


class FunctionExecutor:
    """Runs ``@step`` functions: async ones on the loop, sync ones in a worker thread."""

    kind = "step"

    def prepare(self, spec: FunctionStepSpec, resolve: Resolve, *,
                mocked: bool = False) -> PreparedStep:
        """Fill in placeholders at any depth; parse and validate annotated parameters."""
        sig, hints = _signature(spec.func)
        secrets: list[str] = []
        inputs: dict[str, Any] = {}
        values: dict[str, Any] = {}
        for pname, raw in spec.arguments.items():
            shown, value = _resolve_deep(raw, resolve, secrets, mocked)
            inputs[pname] = shown
            param = sig.parameters.get(pname)
            annotation = hints.get(pname, inspect.Parameter.empty)
            if param is not None and param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                annotation = inspect.Parameter.empty
            if annotation not in _TEXT_TYPES and _templated(raw):
                value = _validate(pname, annotation, raw, value)
            values[pname] = value
        return PreparedStep(inputs=inputs, payload={"arguments": values}, secrets=secrets)

    async def execute(self, spec: FunctionStepSpec, prepared: PreparedStep,
                      ctx: StepContext) -> StepOutput:
        """Call the function and turn its return value into the output text."""
        sig, _ = _signature(spec.func)
        bound = inspect.BoundArguments(sig, prepared.payload["arguments"])
        with capturing(ctx.log):  # its print() and logging go to its step's log
            if inspect.iscoroutinefunction(spec.func):
                result = await spec.func(*bound.args, **bound.kwargs)
            else:
                call = ThreadCall(spec.func, bound.args, bound.kwargs)
                try:
                    result = await call.result()
                except asyncio.CancelledError:
                    # Timed out or cancelled, the thread goes on and may still send its
                    # request: its rate limit counts it until the thread ends.
                    if ctx.gate is not None:
                        ctx.gate.outlived(call.when_done)
                    raise
                if inspect.isawaitable(result):
                    result = await result
        return StepOutput(output=output_text(result))


def output_text(result: Any) -> str:
    """A return value as stored: ``str`` as is, ``None`` as ``""``, else its JSON text."""
    if isinstance(result, str):
        return result
    if result is None:
        return ""
    from pydantic_core import to_json

    try:
        return to_json(result).decode()
    except Exception as exc:
        raise StepFailed(f"the return value ({type(result).__name__}) cannot be stored as JSON: "
                         f"{exc}", retryable=False) from None


def _templated(raw: Any) -> bool:
    if isinstance(raw, ParamRef):
        return True
    if isinstance(raw, str):
        return placeholders.has_placeholders(raw)
    if isinstance(raw, list):
        return any(_templated(v) for v in raw)
    if isinstance(raw, dict):
        return any(_templated(v) for v in raw.values())
    return False


def _resolve_deep(raw: Any, resolve: Resolve, secrets: list[str],
                  mocked: bool) -> tuple[Any, Any]:
    """(shown, real) values of an argument: strings resolved, secrets read."""
    if isinstance(raw, str):
        value = resolve(raw, False)
        return value, value
    if isinstance(raw, ParamRef):  # a run parameter given whole: its typed value
        param = getattr(resolve, "param", None)
        if param is None:
            raise StepFailed(f"argument {raw.template}: this run has no parameters",
                             retryable=False)
        try:
            value = param(raw.path)
        except PlaceholderError as exc:
            raise StepFailed(str(exc), retryable=False) from None
        return value, value
    if isinstance(raw, SecretRef):
        value = read_secret(raw, lenient=mocked)
        secrets.append(value)
        return REDACTED, value
    if isinstance(raw, list):
        pairs = [_resolve_deep(v, resolve, secrets, mocked) for v in raw]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    if isinstance(raw, dict):
        shown, real = {}, {}
        for k, v in raw.items():
            shown[k], real[k] = _resolve_deep(v, resolve, secrets, mocked)
        return shown, real
    return raw, raw


def _validate(pname: str, annotation: Any, raw: Any, value: Any) -> Any:
    from pydantic import ValidationError

    adapter = _adapter(annotation)
    try:
        if isinstance(raw, str):
            return adapter.validate_json(value)
        return adapter.validate_python(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        detail = f"{first.get('msg')}" + (f" at {where}" if where else "")
        type_name = getattr(annotation, "__name__", None) or str(annotation)
        raise StepFailed(f"argument {pname!r} is not a valid {type_name}: {detail}",
                         retryable=False) from None
