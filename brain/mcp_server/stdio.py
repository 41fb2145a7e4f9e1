"""The MCP server over stdio (``brain mcp serve [PATH...]``, SPEC §23), for desktop clients
that start their servers as commands.

The process serves the workflows it was given, records their runs in
``BRAIN_DATABASE_URL`` and executes them itself (a ``BrainService`` without schedules or
file watches: those are ``brain serve``'s). Stdio has a back-channel, so a handshake-era
client that can ask is asked an approval with ``elicitation/create``. When the client goes
away (stdin ends), calls still waiting end without cancelling their runs: the runs go on in
whichever process serves the database next.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.stdio import stdio_server

from brain.mcp_server.server import BrainMcp, state_key

if TYPE_CHECKING:
    from anyio.abc import ObjectReceiveStream, ObjectSendStream

    from brain.service import BrainService
    from brain.store import Store
    from brain.workflow import Workflow


def stdio_service(workflows: Mapping[str, Workflow], *, store: Store | None = None
                  ) -> BrainService:
    """The service behind ``brain mcp serve``: executes runs, fires no schedules."""
    from brain.service import BrainService

    return BrainService(workflows, store=store, triggers=False, kind="mcp")


async def serve_stdio(service: BrainService, *,
                      claimed: Callable[[], None] | None = None) -> None:
    """Serve ``service``'s ``mcp=True`` workflows over this process's stdin and stdout until
    stdin ends (the service started and stopped around it). ``claimed`` is called once the
    SDK holds stdin and stdout (what is printed from then on goes to stderr): the place to
    set up logging."""
    mcp = BrainMcp(lambda: service.api, wait_seconds=service.context.settings.mcp_wait_seconds,
                   key=state_key(None, service.store.url))
    async with stdio_server() as (read, write):
        if claimed is not None:
            claimed()
        await service.start()
        try:
            inbox_in, inbox = anyio.create_memory_object_stream[Any](0)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_until_eof, read, inbox_in, mcp)
                await mcp.server.run(inbox, write, mcp.server.create_initialization_options())
        finally:
            mcp.closing = True
            await service.stop()


async def _until_eof(read: ObjectReceiveStream[Any], inbox: ObjectSendStream[Any],
                     mcp: BrainMcp) -> None:
    """Pass the client's messages on; at the end of stdin, mark the server closing first, so
    the calls cut short by it leave their runs alone."""
    async with inbox:
        async for message in read:
            await inbox.send(message)
        mcp.closing = True
