"""``@step``: a plain function that becomes a step when called inside a workflow."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

import wrapt

from brain.dsl.cost import step_cost_options
from brain.dsl.helpers import common_options
from brain.dsl.model import FunctionStepSpec
from brain.dsl.tracing import current_tracer

F = TypeVar("F", bound=Callable[..., Any])
_OPTION_NAMES = ("name", "retries", "timeout_seconds", "retry_delay_seconds", "max_output_bytes", "after",
                 "when", "cache", "limit")


def _call(options: dict[str, Any], wrapped: Callable[..., Any], instance: Any,
          args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tracer = current_tracer()
    if tracer is None:
        return wrapped(*args, **kwargs)
    name = options.get("name") or tracer.free_name(wrapped.__name__)
    name = tracer.check_name(name)
    try:
        bound = inspect.signature(wrapped).bind(*args, **kwargs)
    except TypeError as exc:
        raise tracer.error(name, f"cannot call {wrapped.__name__}(): {exc}") from None
    refs: list[str] = []
    arguments = {k: tracer.deep_template(name, f"argument {k!r}", v, refs, typed=True)
                 for k, v in bound.arguments.items()}
    opts = common_options(tracer, name, options.get("timeout_seconds"), options.get("retries", 0),
                          options.get("retry_delay_seconds", 1.0), options.get("max_output_bytes"))
    cost = step_cost_options(tracer, name, options.get("cache"), options.get("limit"), refs)
    after_names = tracer.after_names(name, options.get("after"))
    spec = FunctionStepSpec(
        name=name, **tracer.placement(name, refs, after_names, options.get("when")),
        function=f"{wrapped.__module__}.{wrapped.__qualname__}", arguments=arguments,
        func=wrapped, **opts, **cost)  # type: ignore[arg-type]
    return tracer.add(spec)


class StepFunction(wrapt.FunctionWrapper):  # type: ignore[misc,type-arg]
    """A ``@step`` function: the plain function outside a workflow, a step inside one."""

    def __init__(self, wrapped: Callable[..., Any], options: dict[str, Any]) -> None:
        super().__init__(wrapped, functools.partial(_call, options))
        self._self_options = options

    def with_options(self, **options: Any) -> StepFunction:
        """A copy with other step options, e.g. ``fn.with_options(name="title", retries=2)(x)``."""
        unknown = set(options) - set(_OPTION_NAMES)
        if unknown:
            raise TypeError(f"unknown step options {sorted(unknown)}; use {', '.join(_OPTION_NAMES)}")
        return StepFunction(self.__wrapped__, {**self._self_options, **options})


@overload
def step(fn: F, /) -> F: ...


@overload
def step(*, name: str | None = None, retries: int = 0, timeout_seconds: float | None = None,
         retry_delay_seconds: float = 1.0, max_output_bytes: int | None = None,
         cache: object = None, limit: str | None = None) -> Callable[[F], F]: ...


def step(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Make a plain (sync or async) function usable as a workflow step.

    Outside a workflow it is the function itself. Inside one, a call records
    a step named after the function and returns its output node; arguments
    that are step outputs arrive as text (parsed as JSON and validated when
    the parameter is annotated with another type than ``str``). ``cache="7d"`` reuses
    an earlier output for the same arguments and code; ``limit="NAME"`` counts each try
    against a named rate limit (SPEC §26).

    >>> @step                                      # doctest: +SKIP
    ... def headline(text: str) -> str:
    ...     return text.splitlines()[0]
    """
    unknown = set(options) - set(_OPTION_NAMES)
    if unknown:
        raise TypeError(f"unknown step options {sorted(unknown)}; use {', '.join(_OPTION_NAMES)}")
    if fn is None:
        return lambda f: StepFunction(f, options)
    return StepFunction(fn, options)
