"""What the MCP SDK's own middleware sees of a request, scrubbed of secrets (SPEC §23, §1).

The SDK's low-level ``Server`` ships its OpenTelemetry middleware as its chain's default:
with traces on (SPEC §25) each ``tools/call`` span is named after the tool the client
asked for and carries the request id, takes a protocol error's message as its status, and
an unexpected exception's text and stack as an event — all exported as is — while the
client gets the same text in its error. What a client sends (a tool's name, an argument's
name, a run id, a request id) may hold a secret the server knows, and an error quotes it.

:class:`Scrubbed` wraps each such middleware: it sees the request with the tool's name and
the request id scrubbed, and the rest of the chain — which gets the request as sent —
raises only scrubbed errors: a protocol error with its message and data scrubbed; any
other exception logged here (the log's formatters scrub) and turned into an internal
error whose message is scrubbed. So neither a span nor the client gets the raw text.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from pydantic import ValidationError

from brain._secrets import scrub
from brain.store.records import scrub_json

if TYPE_CHECKING:
    from mcp.server import ServerRequestContext
    from mcp.server.context import CallNext, HandlerResult, ServerMiddleware

log = logging.getLogger("brain.mcp")


class Scrubbed:
    """The middleware ``outer`` (the SDK's OpenTelemetry spans) seeing only scrubbed names,
    ids and errors; the chain inside it is called with the request as sent."""

    def __init__(self, outer: ServerMiddleware[Any]) -> None:
        self.outer = outer

    async def __call__(self, ctx: ServerRequestContext[Any, Any],
                       call_next: CallNext) -> HandlerResult:
        """Call ``outer`` with the request as shown, and the rest of the chain inside it."""

        async def rest(_: ServerRequestContext[Any, Any]) -> HandlerResult:
            return await scrubbing_errors(ctx, call_next)

        return await self.outer(_shown(ctx), rest)


def _shown(ctx: ServerRequestContext[Any, Any]) -> ServerRequestContext[Any, Any]:
    """``ctx`` with the tool's name (``params.name``) and the request id scrubbed."""
    changes: dict[str, Any] = {}
    name = ctx.params.get("name") if ctx.params else None
    if isinstance(name, str) and scrub(name) != name:
        changes["params"] = {**(ctx.params or {}), "name": scrub(name)}
    if isinstance(ctx.request_id, str) and scrub(ctx.request_id) != ctx.request_id:
        changes["request_id"] = scrub(ctx.request_id)
    return dataclasses.replace(ctx, **changes) if changes else ctx


async def scrubbing_errors(ctx: ServerRequestContext[Any, Any],
                           call_next: CallNext) -> HandlerResult:
    """``call_next(ctx)``, whose errors are raised scrubbed: a protocol error with its
    message and data scrubbed, any other exception (logged) as an internal error."""
    try:
        return await call_next(ctx)
    except MCPError as exc:
        message = scrub(exc.error.message) or ""
        data = scrub_json(exc.error.data)
        if message == exc.error.message and data == exc.error.data:
            raise
        raise MCPError(exc.error.code, message, data=data) from None
    except ValidationError:  # the SDK answers it, and records it, with a fixed message
        raise
    except Exception as exc:
        log.exception("MCP %s failed", ctx.method)
        raise MCPError(INTERNAL_ERROR, f"internal error: {scrub(_describe(exc))}") from None


def _describe(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # an exception's __str__ is code too
        return type(exc).__name__
