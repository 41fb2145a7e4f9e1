"""OpenTelemetry's side of traces (SPEC §25): the tracer provider, the ids a span is given,
and the trace context a run keeps. Imported only when traces are on (see
:func:`brain.runner.context.tracer_for`), like :mod:`brain.runner.tracing`.

A run's root span ``invoke_workflow NAME`` is decided when the run is created: its trace id
and span id are chosen then and stored with the run (:func:`new_trace_context`), so that
every execution of it — the first, a resume after a crash on another machine, the one
woken after a three-day wait — puts its step spans under that same root. The root span
itself is sent once, by the execution that sees the run end, with the stored ids
(:class:`PresetIds`) and the run's start time.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from brain._errors import BrainError

#: The W3C trace context format (``traceparent``, ``tracestate``), read and written by
#: OpenTelemetry's own propagator.
PROPAGATOR = TraceContextTextMapPropagator()
#: The instrumentation scope of The Brain's spans.
SCOPE = "brain"

_preset: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "brain_preset_ids", default=None)


class PresetIds(RandomIdGenerator):
    """Random ids, except for the span started inside :func:`preset_ids`: that one gets
    the trace id and span id chosen when its run was created."""

    def generate_span_id(self) -> int:
        preset = _preset.get()
        return preset[1] if preset is not None else super().generate_span_id()

    def generate_trace_id(self) -> int:
        preset = _preset.get()
        return preset[0] if preset is not None else super().generate_trace_id()


@contextlib.contextmanager
def preset_ids(span_context: SpanContext) -> Iterator[None]:
    """The span started within gets ``span_context``'s trace id and span id."""
    token = _preset.set((span_context.trace_id, span_context.span_id))
    try:
        yield
    finally:
        _preset.reset(token)


def provider_from_environment() -> TracerProvider:
    """A tracer provider for this process, configured by the standard variables: the
    resource (``OTEL_SERVICE_NAME``, default ``the-brain``; ``OTEL_RESOURCE_ATTRIBUTES``)
    and the exporter (``OTEL_TRACES_EXPORTER``: ``otlp``, the default, over HTTP to
    ``OTEL_EXPORTER_OTLP_ENDPOINT``; or ``console``), batched
    (``OTEL_BSP_SCHEDULE_DELAY``...)."""
    name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    exporter: SpanExporter
    if name == "otlp":
        protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                                  os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"))
        if protocol.strip() != "http/protobuf":
            raise BrainError(f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r} is not supported: "
                             f"The Brain sends traces as http/protobuf")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    elif name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        exporter = ConsoleSpanExporter()
    else:
        raise BrainError(f"OTEL_TRACES_EXPORTER {name!r} is not supported: use otlp or console")
    return make_provider(BatchSpanProcessor(exporter))


def make_provider(processor: SpanProcessor) -> TracerProvider:
    """A tracer provider whose spans go to ``processor``, with the ids runs need
    (:class:`PresetIds`) and the resource the environment describes."""
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME")
                                or "the-brain"})
    provider = TracerProvider(resource=resource, id_generator=PresetIds())
    provider.add_span_processor(processor)
    return provider


@dataclass(frozen=True)
class RunTraceContext:
    """What a run keeps of its trace: its root span's context and, when the run continues
    another trace (an HTTP request's ``traceparent``, a parent run's step), the context
    its root span is a child of."""

    root: SpanContext
    parent: Context | None = None

    def root_context(self) -> Context:
        """A context whose current span is the run's root (its steps' parent)."""
        return trace.set_span_in_context(NonRecordingSpan(self.root))

    def stored(self) -> str:
        """The JSON text stored with the run."""
        data = {"root": carrier_of(self.root_context())}
        if self.parent is not None:
            data["parent"] = carrier_of(self.parent)
        return json.dumps(data, separators=(",", ":"))


def carrier_of(context: Context) -> dict[str, str]:
    """``context``'s current span as W3C headers (``traceparent``, ``tracestate``)."""
    carrier: dict[str, str] = {}
    PROPAGATOR.inject(carrier, context=context)
    return carrier


def incoming_context(carrier: Mapping[str, str] | None) -> Context | None:
    """The context W3C ``traceparent``/``tracestate`` values (HTTP headers, an MCP request's
    ``params._meta``) continue; ``None`` when absent or malformed."""
    if not carrier:
        return None
    headers = {k.lower(): v for k, v in carrier.items() if isinstance(v, str)}
    if "traceparent" not in headers:
        return None
    context = PROPAGATOR.extract(headers)
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def new_trace_context(parent: Context | None) -> RunTraceContext:
    """A new run's trace context: a new root span id, in ``parent``'s trace (and sampled as
    it is) when given, else in a new trace."""
    ids = RandomIdGenerator()
    parent_span = trace.get_current_span(parent).get_span_context() if parent else None
    if parent_span is not None and parent_span.is_valid:
        root = SpanContext(parent_span.trace_id, ids.generate_span_id(), is_remote=False,
                           trace_flags=parent_span.trace_flags,
                           trace_state=parent_span.trace_state)
        return RunTraceContext(root, parent)
    root = SpanContext(ids.generate_trace_id(), ids.generate_span_id(), is_remote=False,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return RunTraceContext(root)


def stored_trace_context(text: str | None) -> RunTraceContext | None:
    """A run's stored trace context read back (``None`` when it has none, or it is not
    one: a run is never failed by its trace)."""
    if not text:
        return None
    try:
        data = json.loads(text)
        root = incoming_context(data.get("root"))
    except (ValueError, AttributeError, TypeError):
        return None
    if root is None:
        return None
    root_span = trace.get_current_span(root).get_span_context()
    local = SpanContext(root_span.trace_id, root_span.span_id, is_remote=False,
                        trace_flags=root_span.trace_flags, trace_state=root_span.trace_state)
    return RunTraceContext(local, incoming_context(data.get("parent")))


__all__ = ["PROPAGATOR", "SCOPE", "PresetIds", "RunTraceContext", "carrier_of",
           "incoming_context", "make_provider", "new_trace_context", "preset_ids",
           "provider_from_environment", "stored_trace_context"]
