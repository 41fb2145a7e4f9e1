"""MCP servers reached over HTTP (SPEC §17): streamable HTTP, or the legacy HTTP+SSE
transport, through the official SDK's clients.

The SDK turns an HTTP error into a JSON-RPC error that no longer says which status came
back (or, on SSE, into a log line while the request goes unanswered), so every response
passes a hook that keeps the first refusal (401, 403) or server error (5xx): the step
fails with it at once, saying what the server answered.

The same hook keeps memory bounded whatever a server sends: the body of every answer to a
``POST`` (a JSON answer, or an event stream answering one request) is read as a stream and
cut at :func:`answer_bound` bytes, and the step fails at once (not retried: it would
repeat). Answers are asked for uncompressed, and a compressed one is refused, since its
size would only be known once inflated. The event streams a session listens on (``GET``)
live as long as the session, so they are bounded event by event instead, by the SDK's own
limit (the bound for streamable HTTP; the SDK's fixed 1 MiB on the legacy transport).

Bytes are not memory: 7 MiB of tiny values (``[{},{},…]``) is millions of Python objects
once the SDK and pydantic have parsed it. So every answer, and every event of every stream
(``GET`` ones included), is also counted as it streams in
(:class:`~brain.executors.json_budget.StructureCounter`), and one JSON message holding more
than :func:`~brain.executors.json_budget.structure_limit` values fails the step at once,
before anything parses it. Every body is read as UTF-8 (what MCP sends), whatever charset
it declares, so that the count is made on the bytes the parser reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

from brain._errors import StepFailed, innermost
from brain.executors.json_budget import StructureCounter, structure_limit
from brain.executors.llm import shown_endpoint

#: Seconds to connect, write and wait for a pooled connection (a read may take as long as
#: the step's timeout allows: the step's timeout covers the whole call).
CONNECT_SECONDS = 30.0
#: How many times larger than the step's output the JSON-RPC message carrying it may be:
#: JSON escapes a control character as six bytes (``\u0001``), and a server may send the
#: same data twice (a text block and ``structuredContent``).
ANSWER_FACTOR = 6
#: Room on top for the message's envelope and what comes with the answer on its event
#: stream (progress and log notifications), however small ``max_output_bytes`` is.
ANSWER_MARGIN = 1024 * 1024


def answer_bound(max_output_bytes: int) -> int:
    """The most bytes read of one HTTP answer for a step whose output may be
    ``max_output_bytes``: ``ANSWER_FACTOR`` times that, plus ``ANSWER_MARGIN`` (7 MiB for
    the default 1 MiB). An answer within it that still makes too large an output fails
    afterwards, as any step's output does."""
    return ANSWER_FACTOR * max_output_bytes + ANSWER_MARGIN


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be requested: the workflow's rule (:func:`brain.dsl.mcp.url_problem`,
    checked again for a URL that was a secret) and what the HTTP client refuses; or ``None``."""
    import httpx2

    from brain.dsl.mcp import url_problem as written_problem

    problem = written_problem(url)
    if problem is not None:
        return problem
    try:
        httpx2.URL(url)
    except (ValueError, httpx2.InvalidURL) as exc:
        return f"url is not usable: {exc}"
    return None


class RemoteServer:
    """One session with a server reached over HTTP (see the module)."""

    def __init__(self, url: str, headers: dict[str, str], transport: str, *,
                 shown: str | None = None, max_output_bytes: int = 1024 * 1024) -> None:
        self.url = url
        self._shown = shown
        self.headers = headers
        self.kind = transport
        #: The largest output a step on this session may make (see :meth:`expect_output`).
        self.max_output_bytes = max_output_bytes
        #: The first refusal or server error a response carried.
        self.status: int | None = None
        #: Why an answer was not read to its end (too large, compressed).
        self.cut: StepFailed | None = None
        self._refused = asyncio.Event()
        self.refused: asyncio.Event | None = self._refused
        self.stderr: str | None = None

    def expect_output(self, max_output_bytes: int) -> None:
        """A step on this session may output up to ``max_output_bytes``: answers are read
        as far as the largest such step needs (a session shared by a run's steps)."""
        self.max_output_bytes = max(self.max_output_bytes, max_output_bytes)

    @property
    def bound(self) -> int:
        """The most bytes read of one answer (:func:`answer_bound`)."""
        return answer_bound(self.max_output_bytes)

    @property
    def most_values(self) -> int:
        """The most structural characters one JSON message may hold (:func:`structure_limit`)."""
        return structure_limit(self.max_output_bytes)

    @property
    def shown(self) -> str:
        """The URL as it may be shown (any user and password hidden; ``***`` for a URL that
        is a secret as a whole)."""
        if self._shown is not None:
            return self._shown
        try:
            return shown_endpoint(self.url)
        except ValueError:
            return "the server's URL"

    async def _watch(self, response: Any) -> None:
        code = response.status_code
        if (code in (401, 403, 404) or code >= 500) and self.status is None:
            self.status = code
            self._refused.set()
        # The count is made on the bytes, so they are read as UTF-8 whatever the answer says
        # (an SSE body is decoded with its declared charset; a JSON one must be UTF-8).
        response.encoding = "utf-8"
        content_type = response.headers.get("content-type", "").partition(";")[0]
        counter = StructureCounter(self.most_values,
                                   events=content_type.strip().lower() == "text/event-stream")
        if response.request.method != "POST":
            # An event stream the session listens on: its bytes are bounded event by event
            # (by the SDK), its values here; past them it just ends (the SDK would log an
            # error with its traceback, and reconnect).
            response.stream = _bounded_stream()(response.stream, None, counter, self._cut,
                                                raises=False)
            return
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        if coding not in ("", "identity"):
            raise self._stop_reading(StepFailed(
                f"the MCP server at {self.shown} sent a compressed answer (Content-Encoding: "
                f"{coding}) although asked not to: its size cannot be bounded before it is "
                f"inflated", retryable=False))
        # The SDK reads a JSON answer whole and logs a read error with its traceback:
        # stopped by an error of ours, it does neither. The legacy transport's message
        # POSTs log any error, so there the answer just ends early (it carries nothing).
        response.stream = _bounded_stream()(response.stream, self.bound, counter, self._cut,
                                            raises=self.kind != "sse")

    def _cut(self, too_large: bool) -> StepFailed:
        """Stop reading an answer larger than the bound (``too_large``) or holding too many
        values: the step fails at once."""
        return self._too_large() if too_large else self._too_many_values()

    def _too_many_values(self) -> StepFailed:
        """Stop reading an answer holding more values than a step's output needs."""
        return self._stop_reading(StepFailed(
            f"the MCP server at {self.shown} sent a JSON message of more than "
            f"{self.most_values} values (counted as the braces, brackets, commas and colons "
            f"outside its strings), the most read for max_output_bytes="
            f"{self.max_output_bytes}; the rest was not read", retryable=False))

    def _too_large(self) -> StepFailed:
        """Stop reading an answer larger than the bound: the step fails at once."""
        return self._stop_reading(StepFailed(
            f"the MCP server at {self.shown} sent an answer larger than {self.bound} bytes, "
            f"the most read for max_output_bytes={self.max_output_bytes} (its JSON-RPC "
            f"message may be {ANSWER_FACTOR} times the output, plus "
            f"{ANSWER_MARGIN // 1024} KiB); the rest was not read", retryable=False))

    def _stop_reading(self, failure: StepFailed) -> StepFailed:
        """Keep ``failure`` as the session's and let the step waiting on it fail now."""
        if self.cut is None:
            self.cut = failure
        self._refused.set()
        return self.cut

    def refusal(self) -> StepFailed | None:
        """The failure a response status says, or why an answer was not read, if one did."""
        if self.cut is not None:
            return self.cut
        if self.status in (401, 403):
            return StepFailed(f"authentication failed: the MCP server at {self.shown} answered "
                              f"HTTP {self.status}; check bearer= and headers=", retryable=False)
        if self.status == 404:
            return StepFailed(f"the MCP server at {self.shown} answered HTTP 404: no MCP "
                              f"endpoint at this path, or its session ended")
        if self.status is not None:
            return StepFailed(f"the MCP server at {self.shown} answered HTTP {self.status}")
        return None

    def describe_failure(self, exc: BaseException) -> StepFailed | None:
        """A readable failure for what went wrong while connecting, if known."""
        import httpx2

        refused = self.refusal()
        if refused is not None:
            return refused
        leaf = innermost(exc)
        if isinstance(leaf, httpx2.HTTPStatusError):
            self.status = leaf.response.status_code
            return self.refusal() or StepFailed(
                f"the MCP server at {self.shown} answered HTTP {self.status}", retryable=False)
        if isinstance(leaf, httpx2.SSEError) and "exceeded" in str(leaf):
            # The SDK's own limit on one event (the legacy transport's stream).
            return StepFailed(f"the MCP server at {self.shown} sent an event larger than the "
                              f"MCP client reads ({leaf}); the rest was not read",
                              retryable=False)
        if isinstance(leaf, httpx2.TimeoutException):
            return StepFailed(f"timed out talking to the MCP server at {self.shown}")
        if isinstance(leaf, (httpx2.TransportError, OSError)):
            return StepFailed(f"cannot reach the MCP server at {self.shown}: "
                              f"{str(leaf) or type(leaf).__name__}")
        if isinstance(leaf, RuntimeError):  # e.g. no common protocol version
            return StepFailed(f"the MCP server at {self.shown}: {leaf}", retryable=False)
        return None

    def exit_code(self) -> int | None:
        """No process to exit: always ``None``."""
        return None

    def kill_now(self) -> None:
        """Nothing to kill: the session ends with its connection."""

    def tail(self) -> str | None:
        """No stderr to keep."""
        return None

    def cleanup(self) -> None:
        """Nothing to clean up."""

    @contextlib.asynccontextmanager
    async def transport(self) -> AsyncIterator[tuple[Any, Any]]:
        """Connect; yield the session's streams; end the session."""
        import httpx2

        timeout = httpx2.Timeout(CONNECT_SECONDS, read=None)
        hooks = {"response": [self._watch]}
        headers = {name: value for name, value in self.headers.items()
                   if name.lower() != "accept-encoding"} | {"Accept-Encoding": "identity"}
        if self.kind == "sse":
            from mcp.client.sse import sse_client

            def factory(headers: dict[str, str] | None = None, timeout: Any = None,
                        auth: Any = None) -> httpx2.AsyncClient:
                return httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth,
                                          event_hooks=hooks, trust_env=False)

            async with sse_client(self.url, headers=headers, timeout=CONNECT_SECONDS,
                                  sse_read_timeout=24 * 3600.0,
                                  httpx_client_factory=factory) as streams:
                yield streams
            return
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks=hooks,
                                      trust_env=False) as client, \
                streamable_http_client(self.url, http_client=client,
                                       max_sse_event_size=self.bound) as streams:
            yield streams


@functools.cache
def _bounded_stream() -> type:
    """The stream type that cuts an answer's body at a bound (made on first use: httpx2 is
    imported only when a step talks to a server)."""
    import httpx2

    class BoundedStream(httpx2.AsyncByteStream):
        """An answer's body, passed on until more than ``bound`` bytes came (``None``: no
        bound) or ``counter`` says a JSON message in it holds too many values: then
        ``cut(too_large)`` is raised (``raises``), or the body just ends there."""

        def __init__(self, inner: Any, bound: int | None, counter: StructureCounter,
                     cut: Callable[[bool], StepFailed], *, raises: bool) -> None:
            self._inner = inner
            self._bound = bound
            self._counter = counter
            self._cut = cut
            self._raises = raises

        async def __aiter__(self) -> AsyncIterator[bytes]:
            seen = 0
            async for chunk in self._inner:
                seen += len(chunk)
                too_large = self._bound is not None and seen > self._bound
                if too_large or not self._counter.feed(chunk):
                    failure = self._cut(too_large)
                    if self._raises:
                        raise failure
                    return
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    return BoundedStream
