"""MCP servers reached over HTTP (SPEC §17): streamable HTTP, or the legacy HTTP+SSE
transport, through the official SDK's clients.

The SDK turns an HTTP error into a JSON-RPC error that no longer says which status came
back (or, on SSE, into a log line while the request goes unanswered), so every response
passes a hook that keeps the first refusal (401, 403) or server error (5xx): the step
fails with it at once, saying what the server answered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from brain._errors import StepFailed, innermost
from brain.executors.llm import shown_endpoint

#: Seconds to connect, write and wait for a pooled connection (a read may take as long as
#: the step's timeout allows: the step's timeout covers the whole call).
CONNECT_SECONDS = 30.0


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
                 shown: str | None = None) -> None:
        self.url = url
        self._shown = shown
        self.headers = headers
        self.kind = transport
        #: The first refusal or server error a response carried.
        self.status: int | None = None
        self._refused = asyncio.Event()
        self.refused: asyncio.Event | None = self._refused
        self.stderr: str | None = None

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

    def refusal(self) -> StepFailed | None:
        """The failure a response status says, if one did."""
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
        if self.kind == "sse":
            from mcp.client.sse import sse_client

            def factory(headers: dict[str, str] | None = None, timeout: Any = None,
                        auth: Any = None) -> httpx2.AsyncClient:
                return httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth,
                                          event_hooks=hooks, trust_env=False)

            async with sse_client(self.url, headers=self.headers, timeout=CONNECT_SECONDS,
                                  sse_read_timeout=24 * 3600.0,
                                  httpx_client_factory=factory) as streams:
                yield streams
            return
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers=self.headers, timeout=timeout, event_hooks=hooks,
                                      trust_env=False) as client, \
                streamable_http_client(self.url, http_client=client) as streams:
            yield streams
