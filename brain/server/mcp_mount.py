"""``/mcp``: The Brain's MCP server (SPEC §23) mounted in the Litestar app, behind the
access rule of ``/api`` (:func:`~brain.server.routes.require_mcp_access`).

The server itself (:mod:`brain.mcp_server`) knows no Litestar; this module makes it for the
app's service, mounts its ASGI app, runs the SDK's session manager in the app's lifespan,
and tells it where the console shows a run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar.handlers import asgi

from brain.mcp_server import BrainMcp, McpHttpApp, state_key
from brain.server import security
from brain.server.routes import require_mcp_access

if TYPE_CHECKING:
    from litestar.types import Receive, Scope, Send
    from mcp.server import ServerRequestContext

    from brain.service import BrainService

#: Where the MCP server is mounted.
MCP_PATH = "/mcp"


def console_link(ctx: ServerRequestContext[Any, Any], run_id: str) -> str | None:
    """The console page of run ``run_id`` on the server this call reached (its Host)."""
    request = ctx.request
    headers = getattr(request, "headers", None)
    url = getattr(request, "url", None)
    host = headers.get("host") if headers is not None else None
    if not host or url is None:
        return None
    return f"{url.scheme}://{host}/runs/{run_id}"


def mcp_app(service: BrainService) -> McpHttpApp:
    """The MCP server of ``service``'s workflows, as the ASGI app to mount."""
    mcp = BrainMcp(lambda: service.api, wait_seconds=service.context.settings.mcp_wait_seconds,
                   key=state_key(security.api_token(), service.store.url),
                   console=console_link)
    return McpHttpApp(mcp)


@asgi(MCP_PATH, is_mount=True, guards=[require_mcp_access], copy_scope=True,
      include_in_schema=False)
async def mcp_route(scope: Scope, receive: Receive, send: Send) -> None:
    """Streamable HTTP MCP (both protocol eras, stateless)."""
    app: McpHttpApp = scope["litestar_app"].state["brain_mcp"]
    await app(scope, receive, send)  # type: ignore[arg-type]
