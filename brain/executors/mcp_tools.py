"""``brain mcp tools``: start a server (or connect to one by URL), list its tools
(``tools/list``), stop it."""

from __future__ import annotations

import json
import shutil
from typing import Any, cast

from brain._errors import BrainError, innermost


async def list_tools(command: list[str] | None = None, *, url: str | None = None,
                     headers: dict[str, str] | None = None,
                     transport: str = "streamable-http") -> list[dict[str, Any]]:
    """Every tool a server offers (name, description, inputSchema): the server started by
    ``command`` on stdio, or the one at ``url`` (streamable HTTP, or ``transport="sse"``)."""
    from mcp import MCPError

    if url is not None:
        return await _remote_tools(url, headers or {}, transport)
    if not command:
        raise BrainError("no server command given")
    from mcp import StdioServerParameters, stdio_client
    from mcp.client.stdio import get_default_environment

    program = command[0]
    if "/" not in program and shutil.which(program, path=get_default_environment().get("PATH")) is None:
        raise BrainError(f"cannot start the MCP server: {program!r} is not on PATH")
    params = StdioServerParameters(command=program, args=command[1:])
    try:
        return await _tools(stdio_client(params))
    except Exception as exc:  # task groups wrap what went wrong
        leaf = innermost(exc)
        if isinstance(leaf, MCPError):
            raise BrainError(f"the MCP server {program!r} failed: {leaf.message}") from None
        if isinstance(leaf, OSError):
            raise BrainError(f"cannot start the MCP server {program!r}: {leaf}") from None
        raise


async def _remote_tools(url: str, headers: dict[str, str],
                        transport: str) -> list[dict[str, Any]]:
    """The tools of a server reached over HTTP; a refusal or an unreachable server is a
    :class:`BrainError` that shows neither the headers nor the token."""
    from mcp import MCPError

    from brain._secrets import remember, scrub, url_password_forms
    from brain.executors.mcp_remote import RemoteServer, url_problem

    problem = url_problem(url)
    if problem is not None:
        raise BrainError(f"--{problem}")
    for form in url_password_forms(url):  # a password in the URL, and its Basic header
        remember(form)
    server = RemoteServer(url, headers, transport)
    try:
        # What a server answers may quote the token: scrubbed like everything stored.
        return cast(list[dict[str, Any]],
                    json.loads(scrub(json.dumps(await _tools(server.transport()))) or "[]"))
    except Exception as exc:
        known = server.describe_failure(exc)
        if known is not None:
            raise BrainError(scrub(known.message.replace(
                "bearer= and headers=", "--bearer-env and --header")) or "") from None
        leaf = innermost(exc)
        if isinstance(leaf, MCPError):
            raise BrainError(scrub(f"the MCP server at {server.shown} failed: {leaf.message}")
                             or "") from None
        raise BrainError(scrub(f"the MCP server at {server.shown} failed: "
                               f"{type(leaf).__name__}: {leaf}") or "") from None


async def _tools(transport: Any) -> list[dict[str, Any]]:
    """``initialize``, then ``tools/list`` page by page, on the streams ``transport`` yields."""
    import mcp_types as types
    from mcp import ClientSession

    tools: list[dict[str, Any]] = []
    async with transport as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        cursor: str | None = None
        while True:
            page = await session.list_tools(
                params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            for tool in page.tools:
                tools.append(tool.model_dump(mode="json", by_alias=True, exclude_none=True))
            cursor = page.next_cursor
            if not cursor:
                return tools
