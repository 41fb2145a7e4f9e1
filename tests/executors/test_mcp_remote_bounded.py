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
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_servers.fixtures import SERVERS, START_SECONDS, _read_port, stop_group

from brain import mcp_tool, workflow
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
