"""``brain mcp tools``: start a server, list its tools (``tools/list``), stop it."""

from __future__ import annotations

import shutil
from typing import Any

from brain._errors import BrainError, innermost


async def list_tools(command: list[str]) -> list[dict[str, Any]]:
    """Every tool the server at ``command`` offers: name, description, inputSchema."""
    import mcp_types as types
    from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
    from mcp.client.stdio import get_default_environment

    if not command:
        raise BrainError("no server command given")
    program = command[0]
    if "/" not in program and shutil.which(program, path=get_default_environment().get("PATH")) is None:
        raise BrainError(f"cannot start the MCP server: {program!r} is not on PATH")
    params = StdioServerParameters(command=program, args=command[1:])
    tools: list[dict[str, Any]] = []
    try:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            cursor: str | None = None
            while True:
                page = await session.list_tools(
                    params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
                for tool in page.tools:
                    tools.append(tool.model_dump(mode="json", by_alias=True, exclude_none=True))
                cursor = page.next_cursor
                if not cursor:
                    break
    except Exception as exc:  # task groups wrap what went wrong
        leaf = innermost(exc)
        if isinstance(leaf, MCPError):
            raise BrainError(f"the MCP server {program!r} failed: {leaf.message}") from None
        if isinstance(leaf, OSError):
            raise BrainError(f"cannot start the MCP server {program!r}: {leaf}") from None
        raise
    return tools
