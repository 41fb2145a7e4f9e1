"""The MCP server side continues a client's trace (SPEC §25): a ``tools/call`` whose
``params._meta`` holds a ``traceparent`` starts a run whose root span is a child of the
client's span, in the client's trace; spans go to a real OTLP/HTTP receiver."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from mcp_support import FLOWS, mcp_client
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otlp_receiver import OtlpReceiver
from serve_support import AppServer

from brain.runner.trace_setup import make_provider
from brain.runner.tracing import RunTracing


@pytest.fixture
def traced_server(tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[AppServer, OtlpReceiver,
                                                                     RunTracing]]:
    """A serving app whose runs are traced to a receiver by the real exporter."""
    db = tmp_path_factory.mktemp("mcp-trace") / "brain.db"
    monkeypatch.setenv("BRAIN_DATABASE_URL", f"sqlite+aiosqlite:///{db}")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    with OtlpReceiver() as receiver:
        exporter = OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")
        tracer = RunTracing(make_provider(BatchSpanProcessor(exporter,
                                                             schedule_delay_millis=50)))
        monkeypatch.setattr("brain.runner.tracing.process_tracing", lambda **_: tracer)
        with AppServer(FLOWS) as app:
            yield app, receiver, tracer


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_tool_call_continues_the_clients_trace(traced_server, mode: str) -> None:
    app, receiver, tracer = traced_server
    assert "BRAIN_API_TOKEN" not in os.environ  # loopback-only, as a local agent calls
    caller_trace, caller_span = "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
    async with mcp_client(f"{app.url}/mcp", mode=mode) as client:
        result = await client.call_tool("hello", {"name": "Ada"}, meta={
            "traceparent": f"00-{caller_trace}-{caller_span}-01"})
    assert not result.is_error, result.content
    tracer.force_flush()
    root = receiver.wait_for("invoke_workflow hello")[0]
    assert (root.trace_id, root.parent_id) == (caller_trace, caller_span)
    step = next(s for s in receiver.spans if s.name.startswith("step "))
    assert step.trace_id == caller_trace and step.parent_id == root.span_id
