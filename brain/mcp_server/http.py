"""The MCP server over streamable HTTP, as an ASGI app for a web layer to mount (SPEC §23).

The SDK's session manager in stateless mode: a request of the 2026-07-28 era stands alone,
and a handshake-era request gets a throwaway session, so any serving process answers any
request and a load balancer needs no sticky sessions. Who may call is the mounting web
layer's rule (``brain.server``: the same as ``/api``), so the SDK's own Host/Origin checks
are not set here.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from brain.mcp_server.server import BrainMcp


class McpHttpApp:
    """The ASGI app serving ``mcp`` over streamable HTTP; :meth:`running` around its use
    (the web layer's lifespan)."""

    def __init__(self, mcp: BrainMcp) -> None:
        self.mcp = mcp
        self.manager = StreamableHTTPSessionManager(app=mcp.server, stateless=True,
                                                    json_response=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve while inside; on the way out, calls still waiting end without cancelling
        their runs (the server stops, the client did not cancel)."""
        async with self.manager.run():
            try:
                yield
            finally:
                self.mcp.closing = True
