"""LLM answers read within a bound (SPEC §2 "Failure": an output over ``max_output_bytes``),
and usage numbers taken only when they are sane (SPEC §18).

A hostile endpoint here is a real HTTP server on 127.0.0.1, written with raw sockets so it
can do what no well-behaved server does: announce 256 MB, stream an endless chunked body,
send a compressed bomb. It makes its body as it sends it (a few KiB in memory) and counts
the bytes the client took before it hung up. What the client held is measured with
``tracemalloc`` (every Python allocation, the response buffers included).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from json_values import ANY_TEXT, TINY, structure_count

from brain import llm, workflow
from brain.executors.llm_answer import MAX_USAGE_TOKENS, PREVIEW_SCAN, answer_limit, shown_body
from brain.testing import FakeChatServer

MIB = 1 << 20
HUGE = 256 * MIB  # far beyond any bound below, and beyond what kernel buffers can hold
PREFIX = b'{"choices": [{"message": {"role": "assistant", "content": "'
BLOCK = b"a" * 65536


def kernel_buffers() -> int:
    """The most bytes loopback TCP can hold between a sender and a reader that stopped
    reading: the largest receive buffer plus the largest send buffer."""
    most = 0
    for name in ("tcp_rmem", "tcp_wmem"):
        most += int(Path(f"/proc/sys/net/ipv4/{name}").read_text().split()[2])
    return most


def blocks(total: int) -> Iterator[bytes]:
    """``PREFIX`` then ``a``s up to ``total`` bytes (``0``: without end)."""
    yield PREFIX
    sent = len(PREFIX)
    while not total or sent < total:
        block = BLOCK if not total else BLOCK[:total - sent]
        sent += len(block)
        yield block


def gzip_bomb(total: int) -> Iterator[bytes]:
    """``blocks(total)`` gzip-compressed as it goes (zeros and ``a``s shrink about 1000:1)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    for block in blocks(total):
        packed = packer.compress(block)
        if packed:
            yield packed
    yield packer.flush()


class HostileServer:
    """Answers every POST with a status line, ``headers`` and the chunks ``body()`` yields
    (chunked when no Content-Length is among the headers); counts what the client took."""

    def __init__(self, body: Callable[[], Iterator[bytes]], headers: dict[str, str],
                 status: int = 200) -> None:
        self.body = body
        self.headers = headers
        self.status = status
        self.sent = 0  # bytes of body the client's socket took, over every request
        self.requests = 0
        self.hung_up = threading.Event()  # the client closed before the body's end
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the test is over
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                more = conn.recv(65536)
                if not more:
                    return
                head += more
            top, _, rest = head.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in top.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(rest) < length:
                rest += conn.recv(65536)
            self.requests += 1
            chunked = not any(k.lower() == "content-length" for k in self.headers)
            lines = [f"HTTP/1.1 {self.status} Hostile", "Content-Type: application/json",
                     *(f"{k}: {v}" for k, v in self.headers.items())]
            if chunked:
                lines.append("Transfer-Encoding: chunked")
            try:
                conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
                for data in self.body():
                    if not data:
                        continue
                    frame = b"%x\r\n%s\r\n" % (len(data), data) if chunked else data
                    conn.sendall(frame)
                    self.sent += len(data)
                if chunked:
                    conn.sendall(b"0\r\n\r\n")
            except OSError:  # the client hung up: what it took is counted
                self.hung_up.set()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def hostile() -> Iterator[Callable[..., HostileServer]]:
    servers: list[HostileServer] = []

    def start(body: Callable[[], Iterator[bytes]], headers: dict[str, str] | None = None,
              status: int = 200) -> HostileServer:
        servers.append(HostileServer(body, headers or {}, status))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def run_traced(url: str, **options: Any) -> tuple[Any, int]:
    """Run a one-step llm() workflow against ``url``; the run and the peak of the Python
    memory it allocated meanwhile (after a first run against a normal server, so that
    modules imported on a first run do not count)."""
    with FakeChatServer() as normal:
        normal_url = normal.url

        @workflow(name="normal_llm")
        def normal_llm() -> None:
            llm("ask", prompt="p", model="m", provider_url=normal_url)

        assert normal_llm().succeeded

    @workflow(name="hostile_llm")
    def hostile_llm() -> None:
        llm("ask", prompt="p", model="m", provider_url=url, **options)

    tracemalloc.start()
    try:
        result = hostile_llm()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak


# --- bounded answers ----------------------------------------------------------------------


@pytest.mark.parametrize("framing", ["content-length", "chunked-endless", "gzip-bomb"])
def test_an_oversized_answer_fails_at_once_having_read_no_more_than_its_bound(
        hostile: Callable[..., HostileServer], framing: str) -> None:
    """256 MB announced, an endless chunked body (capped at 256 MB, so the code as it was
    ends), or 256 MB compressed to a few hundred KiB: the step fails at once (not retried,
    it would repeat) saying the answer is over its bound; the client took no more than the
    bound plus what kernel buffers hold, and held a few times the bound at most."""
    limit = answer_limit(64 * 1024)
    if framing == "content-length":
        server = hostile(lambda: blocks(HUGE), {"Content-Length": str(HUGE)})
    elif framing == "chunked-endless":
        server = hostile(lambda: blocks(HUGE))
    else:
        server = hostile(lambda: gzip_bomb(HUGE), {"Content-Encoding": "gzip"})
    result, peak = run_traced(server.url, max_output_bytes=64 * 1024, retries=2,
                              retry_delay_seconds=0.01, timeout_seconds=120)
    step = result.steps["ask"]
    print(f"{framing}: bound {limit / MIB:.1f} MiB, the server sent "
          f"{server.sent / MIB:.1f} MiB, Python peak {peak / MIB:.1f} MiB")
    assert step.status == "failed"
    assert "is larger than" in (step.error or "") and "max_output_bytes" in (step.error or "")
    assert step.tries == 1 and server.requests == 1
    assert server.sent <= limit + kernel_buffers() < HUGE
    assert peak < 4 * limit + 8 * MIB  # the bound, one read's worth and JSON; never 256 MB


def test_an_announced_length_over_the_bound_is_not_read_at_all(
        hostile: Callable[..., HostileServer]) -> None:
    server = hostile(lambda: blocks(HUGE), {"Content-Length": str(HUGE)})
    result, _ = run_traced(server.url, max_output_bytes=1000)
    assert "is larger than" in (result.steps["ask"].error or "")
    assert server.hung_up.wait(30)
    assert server.sent <= kernel_buffers()


def test_an_error_status_with_a_huge_body_keeps_its_status_and_a_preview(
        hostile: Callable[..., HostileServer]) -> None:
    """A 503 is retried as a 503 (SPEC §2), whatever its size; its body is previewed, read
    no further than the bound."""
    server = hostile(lambda: blocks(HUGE), status=503)
    result, peak = run_traced(server.url, max_output_bytes=1000, retries=1,
                              retry_delay_seconds=0.01)
    step = result.steps["ask"]
    assert step.status == "failed" and step.tries == 2 and server.requests == 2
    assert (step.error or "").startswith("HTTP 503 from ")
    assert "aaaa" in (step.error or "")
    assert server.sent <= 2 * (answer_limit(1000) + kernel_buffers())
    assert peak < 4 * answer_limit(1000) + 8 * MIB


def test_an_answer_under_the_bound_is_read_whole_through_any_framing(
        hostile: Callable[..., HostileServer]) -> None:
    """A compressed or chunked answer that fits is read as before (the bound stops only
    what no output of ``max_output_bytes`` needs)."""
    answer = json.dumps({"choices": [{"message": {"content": "é" * 5000}}]}).encode()

    def gzipped() -> Iterator[bytes]:
        yield zlib.compress(answer, wbits=16 + zlib.MAX_WBITS)

    for server in (hostile(lambda: iter([answer[:100], answer[100:]])),
                   hostile(gzipped, {"Content-Encoding": "gzip",
                                     "Content-Length": str(len(next(gzipped())))})):
        result, _ = run_traced(server.url, max_output_bytes=10_000)
        assert result.succeeded, result.error
        assert result.steps["ask"].output == "é" * 5000


def test_a_trickling_answer_fails_within_the_step_timeout(
        hostile: Callable[..., HostileServer]) -> None:
    """One byte every 50 ms, without end: the step's timeout ends it (a guard: this held
    before the answers were bounded too)."""
    def trickle() -> Iterator[bytes]:
        yield PREFIX
        while True:
            time.sleep(0.05)
            yield b"a"

    server = hostile(trickle)
    result, _ = run_traced(server.url, timeout_seconds=1)
    assert result.steps["ask"].error == "timed out after 1 s"
    assert server.hung_up.wait(30)


# --- usage numbers ------------------------------------------------------------------------


SANE = st.integers(min_value=0, max_value=MAX_USAGE_TOKENS)
#: A usage field as JSON text, and the whole number it counts as (``None``: not counted).
FIELD = st.one_of(
    SANE.map(lambda n: (str(n), n)),
    st.integers(min_value=MAX_USAGE_TOKENS + 1).map(lambda n: (str(n), None)),
    st.integers(max_value=-1).map(lambda n: (str(n), None)),
    st.integers(min_value=19, max_value=6000).map(lambda k: ("9" * k, None)),  # past int()'s limit
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: (json.dumps(x), None)),
    st.sampled_from(["1e30", "1E400", "-0.0", "12.0", "1e3"]).map(lambda t: (t, None)),
    st.sampled_from(["true", "false", "null", '"12"', '""', "[]", "[12]", "{}",
                     '{"n": 12}', '[[[[1]]]]']).map(lambda t: (t, None)),
)
USAGE = st.one_of(
    st.fixed_dictionaries({}, optional={"prompt_tokens": FIELD, "completion_tokens": FIELD}),
    st.sampled_from(["absent", '"lots"', "12", "[1, 2]", "null"]),
)


def usage_json(usage: dict[str, tuple[str, int | None]] | str) -> tuple[str | None, Any]:
    """The ``usage`` member's JSON text (``None``: no member) and the usage the step must
    keep for it."""
    if isinstance(usage, str):
        return (None if usage == "absent" else usage), None
    text = "{" + ", ".join([*(f'"{k}": {v[0]}' for k, v in usage.items()),
                            '"total_tokens": 1']) + "}"
    counted = {k: v[1] for k, v in usage.items() if v[1] is not None}
    if not counted:
        return text, None
    return text, {"prompt_tokens": counted.get("prompt_tokens", 0),
                  "completion_tokens": counted.get("completion_tokens", 0)}


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(usage=USAGE)
def test_usage_is_counted_only_as_sane_whole_numbers_and_the_answer_always_counts(
        usage: dict[str, tuple[str, int | None]] | str) -> None:
    """Floats (``1e30``), numbers past 10⁹ or past Python's 4300 digits, negatives, text,
    booleans, nesting, nothing: the step succeeds with its answer; its usage holds only the
    whole numbers from 0 to 10⁹, and the log says what was left out."""
    text, expected = usage_json(usage)
    body = ('{"choices": [{"message": {"role": "assistant", "content": "fine"}}]'
            + ("" if text is None else f', "usage": {text}') + "}")
    with FakeChatServer() as server:
        server.respond(body=body)
        url = server.url

        @workflow(name="usage_shapes")
        def usage_shapes() -> None:
            llm("ask", prompt="p", model="m", provider_url=url)

        result = usage_shapes()
    step = result.steps["ask"]
    assert result.succeeded, result.error
    assert step.output == "fine"
    assert step.usage == expected
    ignored = isinstance(usage, dict) and any(v[1] is None for v in usage.values())
    said = any("usage" in line and "ignored" in line for line in step_log(result.run_id))
    assert said == ignored


def step_log(run_id: str) -> list[str]:
    """The stored log lines of the run's step ``ask``, read back from the test's database."""
    import asyncio

    from brain.store import Store

    async def read() -> list[str]:
        async with Store() as store:
            return [line.text for line in await store.read_log(run_id, "ask")]

    return asyncio.run(read())


@settings(max_examples=60, deadline=None)
@given(before=st.integers(min_value=0, max_value=3 * PREVIEW_SCAN),
       secret=st.text(alphabet="abcdefghijklmnopqrstuvw0123456789-_", min_size=8,
                      max_size=64),
       gap=st.sampled_from([" ", "\n", "  ", ""]))
def test_a_long_bodys_preview_shows_no_piece_of_a_secret_wherever_the_cut_falls(
        before: int, secret: str, gap: str) -> None:
    """Only a body's start is scrubbed and shown: a secret the cut splits leaves no piece
    (the secret has no x or y, which fill the body)."""
    from brain import _secrets

    _secrets.remember(secret)
    raw = ("x" * before + gap + secret + gap + "y" * PREVIEW_SCAN).encode()
    shown = shown_body(raw)
    assert all(secret[i:i + 6] not in shown for i in range(len(secret) - 5))


# --- values: an answer's structure is bounded before it is parsed -----------------------------



@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=ANY_TEXT, max_output=st.integers(min_value=1024, max_value=256 * 1024),
       unit=TINY, scale=st.floats(min_value=0.0, max_value=2.0),
       gzipped=st.booleans())
def test_text_of_any_content_passes_and_too_many_values_fail_at_once(
        hostile: Callable[..., HostileServer], text: str, max_output: int, unit: Any,
        scale: float, gzipped: bool) -> None:
    """An answer carrying ``max_output_bytes`` of any text (braces and commas included: in a
    string they are not structure) beside ``scale`` times as many tiny values as the limit
    allows: it is read and succeeds exactly when its structure is within the limit, and
    fails at once otherwise, saying so, whether or not it came gzipped."""
    from brain.executors.json_budget import structure_limit

    content = (text * (max_output // len(text.encode()) + 1)).encode()[:max_output]
    content_text = content.decode("utf-8", errors="ignore")
    limit = structure_limit(max_output)
    answer = {"choices": [{"message": {"role": "assistant", "content": content_text}}],
              "x": [unit] * int(limit * scale / (structure_count(unit) + 1))}
    raw = json.dumps(answer, ensure_ascii=False).encode()
    within = structure_count(answer) <= limit
    body = zlib.compress(raw) if gzipped else raw
    server = hostile(lambda: iter([body]), {"Content-Length": str(len(body))}
                     | ({"Content-Encoding": "deflate"} if gzipped else {}))

    @workflow(name="llm_values")
    def llm_values() -> None:
        llm("ask", prompt="p", model="m", provider_url=server.url,
            max_output_bytes=max_output, retries=2, retry_delay_seconds=0)

    event(f"gzipped={gzipped}: {'within' if within else 'over'} the limit")
    step = llm_values().steps["ask"]
    if within:
        assert step.status == "succeeded", step.error
        assert step.output == content_text
    else:
        assert step.status == "failed" and step.tries == 1, step.error
        assert f"holds more than {limit} JSON values" in (step.error or ""), step.error
        assert f"max_output_bytes ({max_output} bytes)" in (step.error or ""), step.error
