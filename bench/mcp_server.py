"""Cost of The Brain's MCP server (SPEC §23), on one in-process server (uvicorn on loopback,
a SQLite file): ``tools/call`` of a one-step workflow with the SDK's client (2026-07-28
era, one client reused) against ``POST /api/workflows/{name}/runs`` with ``wait: true``
(one HTTP client reused), calls alternating, side by side; then ``tools/list`` with 100
``mcp=True`` workflows loaded.

Prints the median milliseconds per call of each, and the difference; asserts nothing.

    .venv/bin/python bench/mcp_server.py [CALLS]

Target: a tools/call adds at most 5 ms.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

CALLS = int(sys.argv[1]) if len(sys.argv) > 1 else 200

FLOWS = '''
from brain import step, workflow

@step
def echo(text: str) -> str:
    return text

@workflow(mcp=True)
def one(text: str = "hi") -> str:
    """One step."""
    return echo(text)
''' + "".join(f'''
@workflow(mcp=True)
def extra_{i}(n: int = {i}, label: str = "x") -> dict[str, int]:
    """Workflow number {i}."""
    return echo(label)
''' for i in range(99))


def _serve(path: Path) -> tuple[object, str]:
    import uvicorn

    from brain.server import create_app

    config = uvicorn.Config(create_app([str(path)]), host="127.0.0.1", port=0, log_config=None,
                            lifespan="on")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def _measure(url: str) -> None:
    import httpx
    from mcp import Client

    mcp_ms: list[float] = []
    api_ms: list[float] = []
    async with Client(url + "/mcp") as client, httpx.AsyncClient(base_url=url) as http:
        for _ in range(10):  # warm both paths
            await client.call_tool("one", {"text": "warm"})
            await http.post("/api/workflows/one/runs", json={"params": {"text": "warm"},
                                                             "wait": True})
        for i in range(CALLS):
            t = time.perf_counter()
            result = await client.call_tool("one", {"text": f"n{i}"})
            mcp_ms.append((time.perf_counter() - t) * 1000)
            assert not result.is_error
            t = time.perf_counter()
            answer = await http.post("/api/workflows/one/runs",
                                     json={"params": {"text": f"n{i}"}, "wait": True})
            api_ms.append((time.perf_counter() - t) * 1000)
            assert answer.status_code == 200
        lists: list[float] = []
        for _ in range(20):
            t = time.perf_counter()
            tools = (await client.list_tools()).tools
            lists.append((time.perf_counter() - t) * 1000)
    mcp, api = statistics.median(mcp_ms), statistics.median(api_ms)
    print(f"one-step workflow, {CALLS} calls each (median ms per call):")
    print(f"  POST /api/workflows/one/runs wait:true  {api:7.2f} ms")
    print(f"  MCP tools/call one                      {mcp:7.2f} ms")
    print(f"  added by MCP                            {mcp - api:+7.2f} ms (target <= 5 ms)")
    print(f"tools/list with {len(tools) - 1} workflows (+ brain_run): "
          f"{statistics.median(lists):.2f} ms median of 20")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flows.py"
        path.write_text(FLOWS)
        os.environ["BRAIN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp}/brain.db"
        os.environ.pop("BRAIN_API_TOKEN", None)
        server, url = _serve(path)
        try:
            asyncio.run(_measure(url))
        finally:
            server.should_exit = True  # type: ignore[attr-defined]
            time.sleep(1)


if __name__ == "__main__":
    main()
