"""The Brain as an MCP server (SPEC §23): ``@workflow(mcp=True)`` workflows as tools.

:class:`BrainMcp` (:mod:`.server`) answers ``tools/list`` and ``tools/call`` through the
application core only (:class:`~brain.service.api.BrainApi`); :class:`McpHttpApp`
(:mod:`.http`) serves it over streamable HTTP for ``brain serve`` to mount at ``/mcp``;
:func:`serve_stdio` (:mod:`.stdio`) serves it over stdio (``brain mcp serve``). No web
framework here: the HTTP layer mounts the app and applies its access rule.
"""

from brain.mcp_server.http import McpHttpApp
from brain.mcp_server.server import BrainMcp, state_key

__all__ = ["BrainMcp", "McpHttpApp", "state_key"]
