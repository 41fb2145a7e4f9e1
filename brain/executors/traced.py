"""What an executor may tell a step's trace (SPEC §25), without knowing OpenTelemetry.

When traces are on, the runner hands each try a :class:`StepTrace` in its
:class:`~brain.executors.base.StepContext` (``ctx.trace``; ``None`` when they are off,
and then nothing here costs anything). The implementation lives in
``brain.runner.tracing``, the only place that imports OpenTelemetry; executors only call
these methods:

- a shell step's processes (and an MCP server started on stdio) get
  :meth:`StepTrace.environment` (``TRACEPARENT``, ``TRACESTATE``);
- an LLM step opens a ``chat MODEL`` span per request with :meth:`StepTrace.chat` and
  ends it with what the answer said (:meth:`CallTrace.answered`) or why it failed;
- an MCP step makes its ``tools/call TOOL`` span current around the call with
  :meth:`StepTrace.tool_call` (the MCP SDK then sends the trace context in
  ``params._meta``).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol


class CallTrace(Protocol):
    """One outgoing call's span (a model's ``chat``, an MCP ``tools/call``)."""

    def answered(self, answer: Mapping[str, Any], *, prompt: Any = None,
                 content: str | None = None) -> None:
        """An LLM answer arrived: ``answer`` is its JSON object (model, usage,
        ``finish_reason``s are read from it); ``prompt`` (the messages sent) and ``content``
        (the answer's text) are recorded only when content capture is on, scrubbed."""
        ...

    def failed(self, error_type: str, message: str | None = None) -> None:
        """The call failed: ``error_type`` is a short low-cardinality name (``timeout``,
        ``429``, ``tool_error``...); ``message`` is scrubbed before it is recorded."""
        ...

    def end(self) -> None:
        """The call is over (idempotent; a span not told otherwise ends as succeeded)."""
        ...


class StepTrace(Protocol):
    """A step try's span, as its executor sees it."""

    def environment(self) -> dict[str, str]:
        """``TRACEPARENT`` (and ``TRACESTATE``) for the processes the step starts."""
        ...

    def activated(self) -> AbstractContextManager[None]:
        """Within it, the step's span is the current OpenTelemetry context (in this task or
        thread, and in tasks and threads started from it with a copy of the context)."""
        ...

    def chat(self, model: str, url: str) -> CallTrace:
        """Start a ``chat MODEL`` client span under the step's, for one request to the
        OpenAI-compatible endpoint ``url``."""
        ...

    def tool_call(self, tool: str) -> AbstractContextManager[CallTrace]:
        """A ``tools/call TOOL`` client span, current within the block (so the MCP SDK
        injects its context into the request's ``params._meta``); ended on leaving it."""
        ...


def trace_environment(trace: StepTrace | None) -> dict[str, str]:
    """:meth:`StepTrace.environment`, or nothing when there is no trace."""
    return {} if trace is None else trace.environment()


__all__ = ["CallTrace", "StepTrace", "trace_environment"]
