"""Bounded answers from remote MCP servers (SPEC §2, §17): whatever a server sends, a step
reads at most a bound derived from its ``max_output_bytes`` and fails at once, saying so.

The server is a real hostile process on loopback (``tests/mcp_servers/flood_server.py``)
that answers ``tools/call`` with as many bytes as its URL asks for, and records how many
of them the client took before it went away. What sits in the kernel's socket buffers
counts as taken (tens of MiB at most on loopback), so "bounded" is checked against an
answer far larger than that.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from json_values import ANY_TEXT, TINY, structure_count
from mcp_servers.fixtures import SERVERS, START_SECONDS, _read_port, stop_group

from brain import mcp_tool, workflow
from brain.executors.json_budget import structure_limit
from brain.executors.mcp_remote import answer_bound

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOOD_SERVER = str(SERVERS / "flood_server.py")
#: What a hostile answer sends, at most (the server stops when the client goes away).
HUGE = 400 * 1024 * 1024
#: More than the bound plus every socket buffer on loopback, far less than ``HUGE``.
TAKEN_AT_MOST = 100 * 1024 * 1024
MAX_OUTPUT = 64 * 1024


@dataclass
class FloodServer:
    port: int
    events_file: Path

    def url(self, mode: str, size: int, tag: str, fill: str = "ascii") -> str:
        end = "sse" if mode.startswith("legacy") else "mcp"
        return f"http://127.0.0.1:{self.port}/{mode}/{size}/{fill}/{tag}/{end}"

    def answer(self, tag: str, seconds: float = 30.0) -> dict[str, Any]:
        """What the server recorded of the answer carrying ``tag`` (polled, bounded)."""
        deadline = time.monotonic() + seconds
        while True:
            if self.events_file.exists():
                for line in self.events_file.read_text().splitlines():
                    event: dict[str, Any] = json.loads(line)
                    if event["tag"] == tag:
                        return event
            assert time.monotonic() < deadline, f"the server recorded no answer for {tag}"
            time.sleep(0.05)

    def answers(self, tag: str) -> list[dict[str, Any]]:
        if not self.events_file.exists():
            return []
        return [e for e in map(json.loads, self.events_file.read_text().splitlines())
                if e["tag"] == tag]


@pytest.fixture(scope="module")
def flood(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FloodServer]:
    folder = tmp_path_factory.mktemp("mcp_flood")
    events, stderr_file = folder / "events.jsonl", folder / "stderr.txt"
    with stderr_file.open("ab") as err:
        proc = subprocess.Popen([sys.executable, FLOOD_SERVER, "--port", "0", "--events",
                                 str(events), "--watch-stdin"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    try:
        yield FloodServer(_read_port(proc, stderr_file, START_SECONDS), events)
    finally:
        stop_group(proc)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --- brain run against a hostile server -------------------------------------------------------


def brain_run(brain_cmd: list[str], folder: Path, url: str, transport: str,
              env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``brain run --json`` of one ``mcp_tool`` step at ``url`` (2 retries allowed)."""
    folder.mkdir(parents=True, exist_ok=True)
    flow = folder / "flow.py"
    flow.write_text(
        "from brain import mcp_tool, workflow\n\n\n@workflow\ndef hostile():\n"
        f"    mcp_tool('call', url={url!r}, transport={transport!r}, tool='big',\n"
        f"             max_output_bytes={MAX_OUTPUT}, retries=2, retry_delay_seconds=0,\n"
        "             timeout_seconds=60)\n")
    done = subprocess.run([*brain_cmd, "run", "--json", str(flow)], capture_output=True,
                          text=True, cwd=folder, env=env, timeout=180)
    return done, json.loads(done.stdout)


@pytest.mark.parametrize("mode", ["json", "sse", "flood", "legacypost"])
def test_a_huge_answer_fails_the_step_at_once_having_read_a_bounded_part(
        mode: str, flood: FloodServer, brain_cmd: list[str], tmp_path: Path) -> None:
    """A 400 MiB answer (one JSON body, one SSE event, endless notifications on the event
    stream, a legacy message POST answered with it): ``brain run`` fails the step in one
    try, saying it was larger than it reads, and the server could hand over only a bounded
    part before the client went away."""
    tag = unique(mode)
    transport = "sse" if mode.startswith("legacy") else "streamable-http"
    env = os.environ | {"BRAIN_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"}
    done, run = brain_run(brain_cmd, tmp_path / "flow", flood.url(mode, HUGE, tag), transport,
                          env)
    (step,) = [s for s in run["steps"] if s["name"] == "call"]
    assert step["status"] == "failed", step
    assert step["tries"] == 1, step  # not retried: it would repeat
    assert f"larger than {answer_bound(MAX_OUTPUT)} bytes" in step["error"], step["error"]
    assert f"max_output_bytes={MAX_OUTPUT}" in step["error"], step["error"]
    assert "Traceback" not in step["error"]
    if transport == "streamable-http":  # (the legacy SDK client logs its teardown races)
        assert "Traceback" not in done.stderr, done.stderr
    answer = flood.answer(tag)
    assert len(flood.answers(tag)) == 1  # one try, one answer
    assert not answer["complete"], answer
    assert answer["sent"] < TAKEN_AT_MOST, answer


def test_one_huge_event_on_the_legacy_stream_fails_at_once(flood: FloodServer) -> None:
    """The legacy transport's event stream is bounded by the SDK's own limit on one event;
    meeting it fails the step at once with a message saying so (it used to read "cannot
    reach the MCP server" and be retried)."""
    tag = unique("legacy")
    url = flood.url("legacy", HUGE, tag)

    @workflow
    def mcp_legacy_huge_event() -> None:
        mcp_tool("call", url=url, transport="sse", tool="big", retries=2,
                 retry_delay_seconds=0, timeout_seconds=60)

    r = mcp_legacy_huge_event()
    step = r.steps["call"]
    assert step.status == "failed"
    assert step.tries == 1, step.error
    assert "larger than the MCP client reads" in (step.error or ""), step.error
    assert "cannot reach" not in (step.error or "")
    answer = flood.answer(tag)
    assert not answer["complete"] and answer["sent"] < TAKEN_AT_MOST, answer


def test_a_compressed_answer_is_refused_at_once(flood: FloodServer) -> None:
    """Answers are asked for uncompressed: one compressed anyway (here 64 KiB of gzip that
    inflates to 64 MiB) could not be bounded before it is inflated, so the step fails at
    once saying why, before reading it."""
    tag = unique("gzip")
    url = flood.url("gzip", 64 * 1024 * 1024, tag)

    @workflow
    def mcp_compressed_answer() -> None:
        mcp_tool("call", url=url, tool="big", retries=2, retry_delay_seconds=0,
                 timeout_seconds=60)

    r = mcp_compressed_answer()
    step = r.steps["call"]
    assert step.status == "failed"
    assert step.tries == 1, step.error
    assert "compressed answer (Content-Encoding: gzip)" in (step.error or ""), step.error


# --- the family: any answer size, either fill, either way of answering --------------------------


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(mode=st.sampled_from(["json", "sse"]),
       fill=st.sampled_from(["ascii", "escaped"]),
       max_output=st.integers(min_value=1024, max_value=256 * 1024),
       scale=st.floats(min_value=0.0, max_value=40.0))
def test_answers_are_read_up_to_the_bound_and_no_further(
        flood: FloodServer, mode: str, fill: str, max_output: int, scale: float) -> None:
    """Whatever the size of the text a tool answers with: an output within
    ``max_output_bytes`` (of any characters, JSON-escaped as it may be) is read whole and
    succeeds; an answer over the bound fails at once having read a bounded part; one in
    between is read and fails as too large an output."""
    size = int(max_output * scale)
    tag = unique(f"{mode}-{fill}")
    url = flood.url(mode, size, tag, fill)

    @workflow
    def mcp_bounded_family() -> None:
        mcp_tool("call", url=url, transport="streamable-http", tool="big",
                 max_output_bytes=max_output, retries=1, retry_delay_seconds=0,
                 timeout_seconds=60)

    r = mcp_bounded_family()
    step = r.steps["call"]
    answer = flood.answer(tag)
    error = step.error or ""
    if size <= max_output:
        assert step.status == "succeeded", error
        assert len(step.output or "") == size
        assert answer["complete"]
    elif answer["total"] > answer_bound(max_output):
        assert step.status == "failed" and step.tries == 1, error
        assert f"larger than {answer_bound(max_output)} bytes" in error, error
        assert not answer["complete"] or answer["total"] < TAKEN_AT_MOST, answer
        assert answer["sent"] < TAKEN_AT_MOST, answer
    else:
        assert step.status == "failed" and step.tries == 1, error
        assert "output is larger than max_output_bytes" in error, error


# --- values: an answer's structure is bounded before the SDK parses it ---------------------------



class ResultServer:
    """A real MCP server on loopback, just enough of one, answering ``tools/call`` with the
    result the test sets: as a JSON answer, as an event stream answering the POST, or (the
    legacy transport) as an event on the stream the session listens on."""

    def __init__(self) -> None:
        self.result: dict[str, Any] = {}
        self.framing = "json"
        self.streams: dict[str, queue.Queue[bytes | None]] = {}
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        end = "sse" if self.framing == "legacy" else "mcp"
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{end}"

    def answer(self, message: dict[str, Any]) -> bytes | None:
        """The JSON-RPC answer to ``message`` (``None`` for a notification)."""
        if "id" not in message:
            return None
        if message["method"] == "initialize":
            result: Any = {"protocolVersion": message["params"]["protocolVersion"],
                           "capabilities": {"tools": {}},
                           "serverInfo": {"name": "values", "version": "1"}}
        else:
            result = self.result
        return json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result},
                          ensure_ascii=False).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def send(self, status: int, body: bytes = b"", ctype: str = "application/json",
                     **headers: str) -> None:
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name.replace("_", "-"), value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if server.framing != "legacy":
                    self.send(405)
                    return
                session = uuid.uuid4().hex
                events = server.streams[session] = queue.Queue()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                self.wfile.write(f"event: endpoint\ndata: /messages/?session_id={session}"
                                 f"\n\n".encode())
                self.wfile.flush()
                try:
                    while (event := events.get(timeout=60)) is not None:
                        self.wfile.write(event)
                        self.wfile.flush()
                except (OSError, queue.Empty):
                    pass
                self.close_connection = True

            def do_DELETE(self) -> None:
                self.send(200)

            def do_POST(self) -> None:
                message = json.loads(self.rfile.read(int(self.headers["content-length"])))
                answer = server.answer(message)
                if server.framing == "legacy":
                    session = self.path.partition("session_id=")[2]
                    if answer is not None:
                        server.streams[session].put(b"event: message\ndata: " + answer
                                                    + b"\n\n")
                    self.send(202)
                elif answer is None:
                    self.send(202)
                elif server.framing == "sse":
                    self.send(200, b"event: message\ndata: " + answer + b"\n\n",
                              "text/event-stream", mcp_session_id="s1")
                else:
                    self.send(200, answer, mcp_session_id="s1")

        return Handler

    def close(self) -> None:
        for events in self.streams.values():
            events.put(None)
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def results() -> Iterator[ResultServer]:
    server = ResultServer()
    try:
        yield server
    finally:
        server.close()


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(framing=st.sampled_from(["json", "sse", "legacy"]), text=ANY_TEXT,
       max_output=st.integers(min_value=1024, max_value=64 * 1024), unit=TINY,
       scale=st.floats(min_value=0.0, max_value=2.0))
def test_text_of_any_content_passes_and_too_many_values_fail_at_once(
        results: ResultServer, framing: str, text: str, max_output: int, unit: Any,
        scale: float) -> None:
    """A ``tools/call`` result carrying ``max_output_bytes`` of any text, twice (a text block
    and ``structuredContent``; braces and commas in a string are not structure), beside
    ``scale`` times as many tiny values in ``_meta`` as the limit allows, answered as JSON,
    as an event stream, or on the legacy transport's stream: the step succeeds exactly when
    the message is within the limit, and fails at once otherwise, saying so."""
    content = (text * (max_output // len(text.encode()) + 1)).encode()[:max_output]
    content_text = content.decode("utf-8", errors="ignore")
    limit = structure_limit(max_output)
    results.framing = framing
    results.result = {"content": [{"type": "text", "text": content_text}],
                      "structuredContent": {"text": content_text},
                      "_meta": {"x": [unit] * int(limit * scale / (structure_count(unit) + 1))}}
    message = {"jsonrpc": "2.0", "id": 1, "result": results.result}
    # An event's "event:" and "data:" lines add a colon each.
    within = structure_count(message) + (0 if framing == "json" else 2) <= limit
    url = results.url

    @workflow
    def mcp_values() -> None:
        mcp_tool("call", url=url, transport="sse" if framing == "legacy" else "streamable-http",
                 tool="t", max_output_bytes=max_output, retries=2, retry_delay_seconds=0,
                 timeout_seconds=60)

    event(f"{framing}: {'within' if within else 'over'} the limit")
    step = mcp_values().steps["call"]
    if within:
        assert step.status == "succeeded", step.error
        assert step.output == content_text
    else:
        assert step.status == "failed" and step.tries == 1, step.error
        assert f"a JSON message of more than {limit} values" in (step.error or ""), step.error
        assert f"max_output_bytes={max_output}" in (step.error or ""), step.error
