"""Attack on SPEC §25 (traces) where it meets the MCP server (§23) and the HTTP edges: the MCP
server side continues a client's trace; with traces off nothing of OpenTelemetry's SDK is
imported by a server answering ``/mcp`` and ``/api``, and a malformed ``traceparent`` on the
API or a webhook never breaks or alters the run. Real OTLP/HTTP export to a real receiver
on loopback (``tests/otlp_receiver.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.append(str(Path(__file__).resolve().parent))
from attack34_support import answer_of, call
from serve_support import AppServer

FLOWS = '''
from brain import shell, webhook, workflow

@workflow(mcp=True, triggers=[webhook(secret_env="ATK34_HOOK_SECRET")])
def hello(name: str = "x") -> str:
    """Say hello."""
    return shell("hi", argv=["echo", "hello", name])
'''

HOOK_SECRET = "atk34-hook-secret-8c1d5e"
CALLER_TRACE, CALLER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def test_an_mcp_call_continues_the_clients_trace(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from otlp_receiver import OtlpReceiver

    from brain.runner.trace_setup import make_provider
    from brain.runner.tracing import RunTracing

    (tmp_path / "flows.py").write_text(FLOWS)
    monkeypatch.setenv("BRAIN_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'b.db'}")
    monkeypatch.setenv("BRAIN_MCP_WAIT_SECONDS", "10")
    with OtlpReceiver() as receiver:
        exporter = OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")
        tracer = RunTracing(make_provider(BatchSpanProcessor(exporter,
                                                             schedule_delay_millis=50)))
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
        monkeypatch.setattr("brain.runner.tracing.process_tracing", lambda **_: tracer)
        parent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
        with AppServer(tmp_path / "flows.py") as app:
            assert app.client is not None
            answer = call(app.client, "hello", {"name": "traced"},
                          meta={"traceparent": parent}, headers={"traceparent": parent})
            assert "result" in answer_of(answer.text), answer.text
        tracer.force_flush()
        root = receiver.wait_for("invoke_workflow hello")[0]
    assert root.trace_id == CALLER_TRACE


def test_traces_off_a_server_answering_mcp_and_api_imports_no_opentelemetry_sdk(
        tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOWS)
    script = tmp_path / "serve_once.py"
    script.write_text(textwrap.dedent(f'''
        import json, sys
        from litestar.testing import TestClient
        from brain.server import create_app

        app = create_app([{str(tmp_path / "flows.py")!r}])
        with TestClient(app, base_url="http://127.0.0.1:8000", timeout=60) as client:
            headers = {{"Accept": "application/json, text/event-stream",
                       "Content-Type": "application/json",
                       "MCP-Protocol-Version": "2025-11-25",
                       "traceparent": "00-{CALLER_TRACE}-{CALLER_SPAN}-01"}}
            body = json.dumps({{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                "params": {{"name": "hello", "arguments": {{}},
                                           "_meta": {{"traceparent": headers["traceparent"]}}}}}})
            assert client.post("/mcp", content=body, headers=headers).status_code == 200
            done = client.post("/api/workflows/hello/runs", json={{"wait": True}},
                               headers={{"traceparent": headers["traceparent"]}})
            assert done.status_code == 200, done.text
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk")
                        or m.startswith("opentelemetry.exporter"))
        print("loaded:", loaded)
    '''))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BRAIN_", "THE_BRAIN_", "LLM_", "OTEL_"))}
    env["BRAIN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'b.db'}"
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "loaded: []"


PRINTABLE = st.characters(min_codepoint=32, max_codepoint=126)
TRACEPARENT = st.one_of(
    st.text(alphabet=PRINTABLE, max_size=80),
    st.builds(lambda v, t, s, f: f"{v}-{t}-{s}-{f}",
              st.sampled_from(["00", "ff", "01", "0", "zz", ""]),
              st.sampled_from(["0" * 32, CALLER_TRACE, CALLER_TRACE.upper(), "x" * 32,
                               CALLER_TRACE[:-1]]),
              st.sampled_from(["0" * 16, CALLER_SPAN, "g" * 16, CALLER_SPAN + "0"]),
              st.sampled_from(["01", "00", "ff", "1", "010"])))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(traceparent=TRACEPARENT,
       tracestate=st.one_of(st.none(), st.text(alphabet=PRINTABLE, max_size=60)))
def test_traces_off_a_malformed_traceparent_never_breaks_or_alters_a_run(
        client: Any, traceparent: str, tracestate: str | None) -> None:
    headers = {"traceparent": traceparent.strip().replace("\r", "").replace("\n", "")}
    if tracestate is not None:
        headers["tracestate"] = tracestate.strip().replace("\r", "").replace("\n", "")
    api = client.post("/api/workflows/hello/runs", json={"params": {"name": "tp"}, "wait": True},
                      headers=headers)
    assert api.status_code == 200, api.text
    assert api.json()["status"] == "succeeded" and api.json()["output"] == "hello tp"
    import hashlib
    import hmac

    body = b'{"name": "hook"}'
    signature = "sha256=" + hmac.new(HOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    hook = client.post("/hooks/hello", content=body, headers={
        **headers, "Content-Type": "application/json", "X-Brain-Signature": signature})
    assert hook.status_code in (200, 202), hook.text
    run_id = hook.json()["run_id"]
    import time

    deadline = time.monotonic() + 10
    run = client.get(f"/api/runs/{run_id}").json()
    while run["status"] not in ("succeeded", "failed", "cancelled") and \
            time.monotonic() < deadline:
        time.sleep(0.02)
        run = client.get(f"/api/runs/{run_id}").json()
    assert run["status"] == "succeeded" and run["output"] == "hello hook", run


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from litestar.testing import TestClient

    from brain.server.app import create_app

    folder = tmp_path_factory.mktemp("atk34-tp")
    (folder / "flows.py").write_text(FLOWS)
    saved = {k: os.environ.get(k) for k in ("BRAIN_DATABASE_URL", "OTEL_TRACES_EXPORTER",
                                            "OTEL_EXPORTER_OTLP_ENDPOINT", "BRAIN_API_TOKEN")}
    for key in saved:
        os.environ.pop(key, None)
    os.environ["BRAIN_DATABASE_URL"] = f"sqlite+aiosqlite:///{folder / 'b.db'}"
    os.environ["ATK34_HOOK_SECRET"] = HOOK_SECRET
    try:
        app = create_app([str(folder / "flows.py")])
        with TestClient(app, base_url="http://127.0.0.1:8000", timeout=60) as test_client:
            yield test_client
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
