"""Traces (SPEC §25): what the real OTLP/HTTP exporter sends to a real receiver on loopback
(``tests/otlp_receiver.py``, decoding the protobuf), for workflows with shell, llm (a real
fake OpenAI-compatible server), mcp_tool (a real SDK server process) and ``@step`` steps;
the shell step's ``TRACEPARENT``; token usage; no content by default; secrets never sent;
a ``traceparent`` from the API continued. Process-level continuity (kill -9, then another
process) and "off means not imported" are in ``test_tracing_processes.py``."""

from __future__ import annotations

import asyncio
import json
import string
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otlp_receiver import OtlpReceiver, ReceivedSpan
from support import remembered

from brain import llm, mcp_tool, secret, shell, step, workflow
from brain.runner import execute_run, run_workflow_now
from brain.runner.context import RunContext
from brain.runner.trace_setup import make_provider
from brain.runner.tracing import RunTracing
from brain.store import Store
from brain.testing.chat_server import FakeChatServer, completion

TOOLS = str(Path(__file__).resolve().parent.parent / "mcp_servers" / "tools_server.py")


def traced(receiver: OtlpReceiver, *, capture: bool = False) -> tuple[RunContext, RunTracing]:
    """A context whose runs are traced to ``receiver`` by the real OTLP/HTTP exporter."""
    exporter = OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")
    tracer = RunTracing(make_provider(BatchSpanProcessor(exporter, schedule_delay_millis=50)),
                        capture_content=capture)
    return RunContext().traced_by(tracer), tracer


@pytest.fixture
def receiver() -> Any:
    with OtlpReceiver() as r:
        yield r


@pytest.fixture(scope="module")
def chat() -> Any:
    with FakeChatServer() as server:
        yield server


def answer(content: str) -> dict[str, Any]:
    """A chat answer with usage, as a real server gives it."""
    return {**completion(content, model="fake-model-1"),
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}


@step
def inside() -> str:
    """A user's own span, made with the global OpenTelemetry API, inside its step."""
    from opentelemetry import trace

    with trace.get_tracer("user").start_as_current_span("user work") as span:
        return format(span.get_span_context().trace_id, "032x")


def by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.name: s for s in spans}


async def test_span_tree_of_shell_llm_mcp_and_step(receiver: OtlpReceiver, chat: FakeChatServer,
                                                   tmp_path: Path) -> None:
    chat.respond(json=answer("a haiku about traces"))

    @workflow
    def traced_flow() -> None:
        shell("env", argv=["sh", "-c", 'printf %s "$TRACEPARENT"'])
        llm("ask", prompt="write a haiku", model="m1", provider_url=chat.url)
        mcp_tool("meta", server_command=[sys.executable, TOOLS], tool="trace_meta")
        inside()

    context, tracer = traced(receiver)
    from opentelemetry import trace

    provider_before = trace.get_tracer_provider()
    result = await run_workflow_now(traced_flow, store=f"sqlite:///{tmp_path}/b.db",
                                    context=context)
    assert result.status == "succeeded", result.error
    tracer.force_flush()
    root = receiver.wait_for("invoke_workflow traced_flow")[0]
    spans = by_name([s for s in receiver.spans if s.trace_id == root.trace_id])
    assert root.parent_id == ""
    assert root.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert root.attributes["brain.run.id"] == result.run_id
    assert root.attributes["brain.workflow"] == "traced_flow"
    assert root.attributes["brain.trigger.event"] == "manual"
    assert root.attributes["brain.run.status"] == "succeeded"
    for name, kind in (("env", "shell"), ("ask", "llm"), ("meta", "mcp_tool"),
                       ("inside", "step")):
        span = spans[f"step {name}"]
        assert span.parent_id == root.span_id
        assert span.attributes["brain.step.kind"] == kind
        assert span.attributes["brain.step.try"] == 1
        assert span.attributes["brain.step.status"] == "succeeded"

    # The shell step saw its own span as TRACEPARENT.
    assert result.steps["env"].output == (f"00-{root.trace_id}-"
                                          f"{spans['step env'].span_id}-01")

    # The model call: a client span with the GenAI attributes and usage; no content.
    chat_span = spans["chat m1"]
    assert chat_span.parent_id == spans["step ask"].span_id
    assert chat_span.kind == 3  # SPAN_KIND_CLIENT
    assert chat_span.attributes["gen_ai.operation.name"] == "chat"
    assert chat_span.attributes["gen_ai.provider.name"] == "openai"
    assert chat_span.attributes["gen_ai.request.model"] == "m1"
    assert chat_span.attributes["gen_ai.response.model"] == "fake-model-1"
    assert chat_span.attributes["gen_ai.usage.input_tokens"] == 11
    assert chat_span.attributes["gen_ai.usage.output_tokens"] == 7
    assert chat_span.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert chat_span.attributes["server.address"] == "127.0.0.1"
    assert spans["step ask"].attributes["gen_ai.usage.input_tokens"] == 11
    assert not any(k.startswith(("gen_ai.input", "gen_ai.output")) for k in chat_span.attributes)
    assert b"write a haiku" not in b"".join(receiver.raw)
    assert b"a haiku about traces" not in b"".join(receiver.raw)

    # The tool call: its span, and its context sent to the server in params._meta.
    tool_span = spans["tools/call trace_meta"]
    assert tool_span.parent_id == spans["step meta"].span_id
    assert tool_span.attributes["mcp.method.name"] == "tools/call"
    assert tool_span.attributes["gen_ai.tool.name"] == "trace_meta"
    meta = json.loads(result.steps["meta"].output or "{}")
    sent_trace, sent_parent = meta["traceparent"].split("-")[1:3]
    assert sent_trace == root.trace_id
    # The SDK's own client span (under ours) is what the server's span would continue.
    assert sent_parent in {tool_span.span_id, *(s.span_id for s in receiver.spans
                                               if s.parent_id == tool_span.span_id)}

    # The @step function ran inside its step's span: the user's span nests under it.
    assert result.steps["inside"].output == root.trace_id
    if trace.get_tracer_provider() is not provider_before:  # pragma: no cover
        pytest.fail("a test's tracer must not become the global provider")


async def test_tool_error_and_failed_step(receiver: OtlpReceiver, tmp_path: Path) -> None:
    @workflow
    def failing_tool() -> None:
        mcp_tool("bad", server_command=[sys.executable, TOOLS], tool="fail_with_error",
                 args={"reason": "nope"})

    context, tracer = traced(receiver)
    result = await run_workflow_now(failing_tool, store=f"sqlite:///{tmp_path}/b.db",
                                    context=context)
    assert result.status == "failed"
    tracer.force_flush()
    root = receiver.wait_for("invoke_workflow failing_tool")[0]
    assert root.status_code == 2  # STATUS_CODE_ERROR
    assert root.attributes["brain.run.status"] == "failed"
    tool = receiver.wait_for("tools/call fail_with_error")[0]
    assert tool.attributes["error.type"] == "tool_error"
    step_span = receiver.named("step bad")[0]
    assert step_span.status_code == 2
    assert step_span.attributes["brain.step.error"] == "nope"


async def test_a_retry_is_in_its_originals_trace(receiver: OtlpReceiver, tmp_path: Path) -> None:
    """A retried run's root span is a new span in its original's trace, a child of the
    original's root (the retry is queued with traces off, by the store alone)."""
    flag = tmp_path / "fixed"

    @workflow
    def mended() -> None:
        shell("first", argv=["true"])
        shell("second", argv=["test", "-e", str(flag)])

    context, tracer = traced(receiver)
    url = f"sqlite:///{tmp_path}/r.db"
    first = await run_workflow_now(mended, store=url, context=context)
    assert first.status == "failed"
    flag.write_text("")
    async with Store(url) as store:
        retry_id = await store.retry_run(first.run_id)
        second = await execute_run(mended, store, retry_id, context=context)
    assert second is not None and second.status == "succeeded", second
    tracer.force_flush()
    roots = {s.attributes["brain.run.id"]: s
             for s in receiver.wait_for("invoke_workflow mended", count=2)}
    original, retry = roots[first.run_id], roots[retry_id]
    assert retry.trace_id == original.trace_id
    assert retry.parent_id == original.span_id and retry.span_id != original.span_id
    retried_step = next(s for s in receiver.named("step second")
                        if s.attributes["brain.run.id"] == retry_id)
    assert retried_step.parent_id == retry.span_id


async def test_an_interrupted_run_sends_its_trace(receiver: OtlpReceiver, tmp_path: Path) -> None:
    """A run whose executing task is cancelled (Ctrl-C) while a step runs: its step span
    and root span are sent, ``cancelled``, and nothing of it is kept open."""

    @workflow
    def interrupted_traced() -> None:
        shell("slow", argv=["sleep", "30"])

    context, tracer = traced(receiver)
    task = asyncio.create_task(run_workflow_now(
        interrupted_traced, store=f"sqlite:///{tmp_path}/c.db", context=context))
    while not tracer._runs or not next(iter(tracer._runs.values())).steps:
        assert not task.done(), task
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tracer._runs == {}
    tracer.force_flush()
    root = receiver.wait_for("invoke_workflow interrupted_traced")[0]
    assert root.attributes["brain.run.status"] == "cancelled"
    slow = receiver.wait_for("step slow")[0]
    assert slow.attributes["brain.step.status"] == "cancelled"
    assert slow.parent_id == root.span_id


async def test_content_only_when_asked_and_scrubbed(receiver: OtlpReceiver, chat: FakeChatServer,
                                                    tmp_path: Path) -> None:
    chat.respond(json=answer("the answer is 42"))

    @workflow
    def captured() -> None:
        llm("ask", prompt="what is six times seven", model="m2", provider_url=chat.url)

    context, tracer = traced(receiver, capture=True)
    result = await run_workflow_now(captured, store=f"sqlite:///{tmp_path}/b.db",
                                    context=context)
    assert result.status == "succeeded"
    tracer.force_flush()
    span = receiver.wait_for("chat m2")[0]
    assert "what is six times seven" in span.attributes["gen_ai.input.messages"]
    assert "the answer is 42" in span.attributes["gen_ai.output.messages"]


SECRET_TEXT = st.text(alphabet=string.ascii_letters + string.digits + "-_.~+/=", min_size=12,
                      max_size=40)


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=SECRET_TEXT)
def test_a_secret_is_never_exported(value: str, chat: FakeChatServer, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """With content capture on, a secret the answer repeats, a failing step prints and the
    model's key carries is in no byte sent."""
    import asyncio

    monkeypatch.setenv("TRACE_SECRET", value)
    chat.respond(json=answer(f"your key is {value} indeed"))

    @workflow
    def leaky() -> None:
        llm("ask", prompt="repeat my key", model="m3", provider_url=chat.url,
            api_key=secret("TRACE_SECRET"))
        shell("say", argv=["sh", "-c", 'echo "bad $K" >&2; echo "$K"; exit 3'],
              env={"K": secret("TRACE_SECRET")})

    with remembered(value), OtlpReceiver() as receiver:
        context, tracer = traced(receiver, capture=True)
        result = asyncio.run(run_workflow_now(leaky, store=f"sqlite:///{tmp_path}/b.db",
                                              context=context))
        assert result.status == "failed"
        tracer.force_flush()
        receiver.wait_for("invoke_workflow leaky")
        sent = b"".join(receiver.raw)
        assert b"your key is" in sent  # content was captured...
        assert value.encode() not in sent  # ...but never the secret


def test_api_traceparent_is_continued(receiver: OtlpReceiver, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``POST /api/workflows/{name}/runs`` with a ``traceparent``: the run's root span is a
    child of the caller's span, in the caller's trace."""
    from litestar.testing import TestClient

    from brain.server.app import create_app

    monkeypatch.setenv("BRAIN_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path}/api.db")
    source = tmp_path / "flows.py"
    source.write_text("from brain import shell, workflow\n\n"
                      "@workflow\ndef hello():\n    shell('hi', argv=['true'])\n")
    _, tracer = traced(receiver)
    # Traces on by the standard variable; this process's tracer is the test's.
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setattr("brain.runner.tracing.process_tracing", lambda **_: tracer)
    app = create_app([str(source)])
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with TestClient(app, base_url="http://127.0.0.1:8000", timeout=60) as client:
        answered = client.post("/api/workflows/hello/runs", json={"wait": True}, headers={
            "traceparent": f"00-{caller_trace}-{caller_span}-01"})
        assert answered.status_code == 200, answered.text
    tracer.force_flush()
    root = receiver.wait_for("invoke_workflow hello")[0]
    assert (root.trace_id, root.parent_id) == (caller_trace, caller_span)
    assert receiver.wait_for("step hi")[0].trace_id == caller_trace
