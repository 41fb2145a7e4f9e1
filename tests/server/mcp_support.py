"""Helpers for the MCP server tests: the SDK's client on a server's ``/mcp``, in either
protocol era, with or without the bearer token."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

FLOWS = Path(__file__).resolve().parents[1] / "mcp_server" / "flows.py"


@contextlib.asynccontextmanager
async def mcp_client(url: str, *, mode: str = "auto", token: str | None = None,
                     **options: Any) -> AsyncIterator[Any]:
    """The SDK's ``Client`` on ``url`` (``.../mcp``): ``mode`` ``"legacy"`` (the handshake
    era) or ``"auto"`` (2026-07-28 with The Brain); ``token`` as ``Authorization: Bearer``."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode,
                          **options) as client:
            yield client
