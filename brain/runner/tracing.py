"""Traces of runs (SPEC §25): every run, step try, model call and tool call as an
OpenTelemetry span. Imported only when traces are on (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_TRACES_EXPORTER`` set, see :func:`brain.runner.context.tracer_for`): with traces
off nothing of OpenTelemetry is loaded.

:class:`RunTracing` is a run observer (:mod:`brain.runner.observe`) and the context's
:class:`~brain.runner.context.RunTracer`:

- ``invoke_workflow NAME``, a run's root span, sent once when the run ends, with the ids
  chosen when it was created (:mod:`brain.runner.trace_setup`), so every execution of the
  run, on any process, is one trace;
- ``step NAME`` per try, a child of the root: opened when the try starts (or its wait
  begins), closed when it ends; a wait the run is let go of while it lasts is closed by
  the execution of this process that continues the run;
- ``chat MODEL`` and ``tools/call TOOL`` under a step's span, opened by the executors
  through :class:`~brain.executors.traced.StepTrace` (``ctx.trace``).

Every text recorded is scrubbed of the secrets this process knows; prompts and answers
are recorded only with ``BRAIN_OTEL_CAPTURE_CONTENT=1``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer, TracerProvider

from brain._clock import utcnow
from brain._secrets import scrub
from brain.executors.traced import CallTrace, StepTrace
from brain.results import FINISHED_RUN, RunResult, RunStatus
from brain.runner.events import RunEvent, StepEvent, WaitEvent
from brain.runner.observe import RunObserver
from brain.runner.trace_setup import (
    SCOPE,
    RunTraceContext,
    carrier_of,
    incoming_context,
    new_trace_context,
    preset_ids,
    provider_from_environment,
    stored_trace_context,
)

#: Providers known by the hosts of their OpenAI-compatible APIs (GenAI semantic
#: conventions' ``gen_ai.provider.name``); any other server is ``openai`` (the API it speaks),
#: its address in ``server.address``.
PROVIDERS = {"api.openai.com": "openai", "api.groq.com": "groq", "api.mistral.ai": "mistral_ai",
             "api.deepseek.com": "deepseek", "api.x.ai": "x_ai",
             "generativelanguage.googleapis.com": "gcp.gemini"}


def _text(value: str | None, limit: int = 4096) -> str:
    """A text as a span may hold it: secrets scrubbed, then cut."""
    return (scrub(value) or "")[:limit]


def _nanos(when: datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1_000_000_000)


class CallSpan(CallTrace):
    """A ``chat`` or ``tools/call`` span (see :class:`~brain.executors.traced.CallTrace`)."""

    def __init__(self, span: Span, capture_content: bool) -> None:
        self.span = span
        self.capture_content = capture_content
        self._ended = False

    def answered(self, answer: Mapping[str, Any], *, prompt: Any = None,
                 content: str | None = None) -> None:
        span = self.span
        if isinstance(answer.get("model"), str):
            span.set_attribute("gen_ai.response.model", _text(answer["model"], 200))
        if isinstance(answer.get("id"), str):
            span.set_attribute("gen_ai.response.id", _text(answer["id"], 200))
        usage = answer.get("usage")
        if isinstance(usage, dict):
            for key, name in (("prompt_tokens", "input_tokens"),
                              ("completion_tokens", "output_tokens")):
                if isinstance(usage.get(key), int) and not isinstance(usage[key], bool):
                    span.set_attribute(f"gen_ai.usage.{name}", usage[key])
        choices = answer.get("choices")
        if isinstance(choices, list):
            reasons = [_text(c["finish_reason"], 40) for c in choices
                       if isinstance(c, dict) and isinstance(c.get("finish_reason"), str)]
            if reasons:
                span.set_attribute("gen_ai.response.finish_reasons", reasons)
        if self.capture_content:
            if prompt is not None:
                span.set_attribute("gen_ai.input.messages",
                                   _text(json.dumps(prompt, ensure_ascii=False), 65536))
            if content is not None:
                span.set_attribute("gen_ai.output.messages", _text(json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": content}]}],
                    ensure_ascii=False), 65536))

    def failed(self, error_type: str, message: str | None = None) -> None:
        self.span.set_attribute("error.type", _text(error_type, 100))
        self.span.set_status(StatusCode.ERROR, _text(message, 1000) or None)

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self.span.end()


class StepSpan(StepTrace):
    """A step try's span (see :class:`~brain.executors.traced.StepTrace`)."""

    def __init__(self, tracer: Tracer, span: Span, tries: int, capture_content: bool) -> None:
        self.tracer = tracer
        self.span = span
        self.tries = tries
        self.capture_content = capture_content
        self.context = trace.set_span_in_context(span)

    def environment(self) -> dict[str, str]:
        return {k.upper(): v for k, v in carrier_of(self.context).items()}

    @contextlib.contextmanager
    def activated(self) -> Iterator[None]:
        token = otel_context.attach(self.context)
        try:
            yield
        finally:
            otel_context.detach(token)

    def chat(self, model: str, url: str) -> CallTrace:
        parts = urlsplit(url)
        host = parts.hostname or ""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": PROVIDERS.get(host, "openai"),
            "gen_ai.request.model": _text(model, 200), "server.address": _text(host, 200)}
        if parts.port:
            attributes["server.port"] = parts.port
        span = self.tracer.start_span(f"chat {_text(model, 200)}", self.context,
                                      SpanKind.CLIENT, attributes)
        return CallSpan(span, self.capture_content)

    @contextlib.contextmanager
    def tool_call(self, tool: str) -> Iterator[CallTrace]:
        name = _text(tool, 200)
        span = self.tracer.start_span(f"tools/call {name}", self.context, SpanKind.CLIENT, {
            "mcp.method.name": "tools/call", "gen_ai.tool.name": name,
            "gen_ai.operation.name": "execute_tool"})
        call = CallSpan(span, self.capture_content)
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield call
        except BaseException as exc:
            if span.is_recording() and "error.type" not in getattr(span, "attributes", {}):
                call.failed(type(exc).__name__)
            raise
        finally:
            otel_context.detach(token)
            call.end()


class _RunState:
    """What this process keeps of one run's trace while it executes (or waits)."""

    def __init__(self, context: RunTraceContext, event: RunEvent) -> None:
        self.context = context
        #: The parent of its step spans, made once.
        self.root = context.root_context()
        self.event = event
        self.steps: dict[str, StepSpan] = {}


class RunTracing(RunObserver):
    """Traces runs as OpenTelemetry spans (see the module); one per process, or one per
    test with its own ``provider``."""

    def __init__(self, provider: TracerProvider, *, capture_content: bool = False) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE)
        self.capture_content = capture_content
        self._runs: dict[str, _RunState] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RunTracing(capture_content={self.capture_content})"

    # --- trace contexts of new runs ------------------------------------------------------

    def new_trace(self, incoming: Mapping[str, str] | None = None) -> str:
        """See :meth:`brain.runner.context.RunTracer.new_trace`. ``incoming`` may be HTTP
        headers or an MCP request's ``params._meta`` (the MCP server side, SPEC §23:
        ``context.new_trace(meta)`` puts the run under the client's ``tools/call``)."""
        return new_trace_context(incoming_context(incoming)).stored()

    def child_trace(self, run_id: str, step: str) -> str | None:
        state = self._runs.get(run_id)
        if state is None:
            return None
        span = self._open(state, run_id, step, "workflow", 1)
        return new_trace_context(span.context).stored()

    def step_trace(self, run_id: str, step: str, tries: int) -> StepTrace | None:
        state = self._runs.get(run_id)
        if state is None:
            return None
        span = state.steps.get(step)
        if span is not None and span.tries != tries:
            span.span.end()
            span = None
        return span or self._open(state, run_id, step, "", tries)

    # --- the observer --------------------------------------------------------------------

    def run_started(self, run: RunEvent) -> None:
        with self._lock:
            state = self._runs.get(run.run_id)
            if state is None:
                context = stored_trace_context(run.trace_context) or new_trace_context(None)
                self._runs[run.run_id] = _RunState(context, run)
            else:
                state.event = run

    def run_ended(self, run: RunEvent, result: RunResult, seconds: float) -> None:
        state = self._runs.get(run.run_id)
        if state is None:
            return
        if result.status == RunStatus.WAITING:
            return  # its waiting steps' spans go on (closed by whoever continues it here)
        for name, span in list(state.steps.items()):
            step = result.steps.get(name)
            self._end_step(span, str(step.status) if step else str(result.status),
                           step.error if step else None, when=step.ended_at if step else None)
        state.steps.clear()
        with self._lock:
            self._runs.pop(run.run_id, None)
        if result.status in FINISHED_RUN:
            self._root(state, result)
        # else its lease was lost, or its execution raised: whoever takes the run next
        # ends it (its root's ids are stored with it)

    def step_started(self, event: StepEvent) -> None:
        state = self._runs.get(event.run_id)
        if state is not None:
            self._open(state, event.run_id, event.step, event.kind, max(event.tries, 1))

    def step_waiting(self, event: WaitEvent) -> None:
        state = self._runs.get(event.run_id)
        if state is None:
            return
        span = self._open(state, event.run_id, event.step, event.kind, max(event.tries, 1))
        span.span.set_attribute("brain.wait.kind", event.kind)
        if event.signal:
            span.span.set_attribute("brain.wait.signal", _text(event.signal, 200))

    def step_ended(self, event: StepEvent) -> None:
        state = self._runs.get(event.run_id)
        if state is None or event.status == "skipped":
            return
        span = state.steps.pop(event.step, None)
        if span is None:
            # It failed (or was cancelled) before a try began, or it waited while another
            # process (or an earlier execution here) had the run: its span starts when the
            # try did, so a wait's span covers the wait wherever the run continued.
            began = (time.time_ns() - int(event.seconds * 1_000_000_000)
                     if event.seconds else None)
            span = self._open(state, event.run_id, event.step, event.kind, max(event.tries, 1),
                              start_time=began)
            state.steps.pop(event.step, None)
        if event.usage:
            for key, name in (("input_tokens", "input_tokens"), ("prompt_tokens", "input_tokens"),
                              ("output_tokens", "output_tokens"),
                              ("completion_tokens", "output_tokens")):
                if isinstance(event.usage.get(key), int):
                    span.span.set_attribute(f"gen_ai.usage.{name}", event.usage[key])
        self._end_step(span, event.status, event.error)

    # --- spans ---------------------------------------------------------------------------

    def _open(self, state: _RunState, run_id: str, step: str, kind: str,
              tries: int, *, start_time: int | None = None) -> StepSpan:
        """The open span of ``step``, or a new one for try ``tries``."""
        span = state.steps.get(step)
        if span is not None:
            if kind and not span.span.attributes.get("brain.step.kind"):  # type: ignore[attr-defined]
                span.span.set_attribute("brain.step.kind", kind)
            return span
        # A step's name is the workflow's code (never a secret): not scrubbed, it costs nothing.
        attributes: dict[str, Any] = {"brain.run.id": run_id, "brain.step.name": step,
                                      "brain.step.try": tries}
        if kind:
            attributes["brain.step.kind"] = kind
        otel_span = self.tracer.start_span(f"step {step}", state.root, SpanKind.INTERNAL,
                                           attributes, start_time=start_time)
        span = state.steps[step] = StepSpan(self.tracer, otel_span, tries, self.capture_content)
        return span

    def _end_step(self, span: StepSpan, status: str, error: str | None, *,
                  when: datetime | None = None) -> None:
        otel = span.span
        otel.set_attribute("brain.step.status", status)
        if status in ("failed", "retrying", "cancelled"):
            otel.set_attribute("error.type", "step_" + status if status != "failed"
                               else "step_failed")
            otel.set_status(StatusCode.ERROR, _text(error, 1000) or status)
        if error:
            otel.set_attribute("brain.step.error", _text(error, 1000))
        otel.end(_nanos(when))

    def _root(self, state: _RunState, result: RunResult) -> None:
        """Send the run's root span, with its stored ids, from its start to its end."""
        event = state.event
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_workflow", "brain.run.id": result.run_id,
            "brain.workflow": result.workflow, "brain.trigger.event": result.trigger.event,
            "brain.run.status": str(result.status)}
        if result.retry_of:
            attributes["brain.run.retry_of"] = result.retry_of
        if result.parent:
            attributes["brain.run.parent"] = result.parent.get("run_id", "")
        with preset_ids(state.context.root):
            span = self.tracer.start_span(
                f"invoke_workflow {result.workflow or event.workflow}", state.context.parent,
                SpanKind.INTERNAL, attributes,
                start_time=_nanos(result.started_at or result.created_at))
        if result.status != RunStatus.SUCCEEDED:
            span.set_attribute("error.type", f"run_{result.status}")
            span.set_status(StatusCode.ERROR, _text(result.error, 1000) or str(result.status))
        span.end(_nanos(result.ended_at or utcnow()))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Send the spans ended so far now (tests, and a process about to exit)."""
        flush = getattr(self.provider, "force_flush", None)
        return bool(flush(timeout_millis)) if flush is not None else True


_process: RunTracing | None = None
_process_lock = threading.Lock()


def process_tracing(*, capture_content: bool = False) -> RunTracing:
    """This process's :class:`RunTracing`, made the first time from the standard
    ``OTEL_*`` variables; its provider becomes the global one when none was set, so a
    ``@step`` function's own spans (``opentelemetry.trace.get_tracer(...)``) are sent
    too, nested under its step's span."""
    global _process
    with _process_lock:
        if _process is None:
            provider = provider_from_environment()
            with contextlib.suppress(Exception):
                if not _has_sdk_provider():
                    trace.set_tracer_provider(provider)
            _process = RunTracing(provider, capture_content=capture_content)
        elif capture_content and not _process.capture_content:
            _process.capture_content = True
        return _process


def _has_sdk_provider() -> bool:
    """Whether the host application set a global tracer provider already."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


__all__ = ["CallSpan", "RunTracing", "StepSpan", "process_tracing"]
