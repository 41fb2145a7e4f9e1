"""MCP step cost: 20 mcp_tool() steps against one small server, and in the same run 20 bare
SDK spawn + initialize + call + close cycles on the same server.

Prints figures; asserts nothing.   .venv/bin/python bench/mcp_step.py

Target (issue 4): median step / median bare cycle ≤ 1.15.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from brain import mcp_tool, workflow

N = 20
SERVER = Path(__file__).resolve().parent / "_mcp_server.py"


async def bare_cycle() -> float:
    import mcp_types as types
    from mcp import ClientSession, StdioServerParameters, stdio_client

    t0 = time.perf_counter()
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        request = types.CallToolRequest(params=types.CallToolRequestParams(
            name="echo", arguments={"text": "hi"}))
        await session.send_request(request, types.CallToolResult)
    return time.perf_counter() - t0


def main() -> None:
    def chain() -> None:
        for i in range(N):
            mcp_tool(f"s{i}", server_command=f"{sys.executable} {SERVER}", tool="echo",
                     args={"text": "hi"})

    wf = workflow(name="mcp_bench")(chain)
    bare: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(N // 2):
            bare.append(asyncio.run(bare_cycle()))
        result = wf(store=f"sqlite+aiosqlite:///{tmp}/bench.db")
        for _ in range(N - N // 2):
            bare.append(asyncio.run(bare_cycle()))
    assert result.succeeded, result.error
    steps = [(s.ended_at - s.started_at).total_seconds() for s in result.steps.values()
             if s.ended_at and s.started_at]
    b, s = statistics.median(bare), statistics.median(steps)
    print(f"bare SDK cycle (spawn, initialize, tools/call, close): median {b * 1000:.0f} ms over {N}")
    print(f"mcp_tool() step (recorded start → end): median {s * 1000:.0f} ms over {N}; "
          f"ratio {s / b:.2f} (target ≤ 1.15)")


if __name__ == "__main__":
    main()
