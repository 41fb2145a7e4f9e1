"""A small stdio MCP server (official SDK) that says which process answered, for the
``reuse="run"`` tests (SPEC §17): steps sharing a server see one process id.

Run as ``python tests/mcp_servers/pid_server.py [--delay SECONDS] [--pids DIR]``:

- ``--delay``: sleep this long before serving (a server slow to start).
- ``--pids``: write this process's id to ``DIR/<pid>`` at start-up (a test can then
  check that every server it caused is gone).

Its first stderr line is ``pid_server starting pid=N``. Tools: ``pid()``
(``{"pid", "calls"}``: this process's id and how many ``pid`` calls it answered, this one
counted), ``echo(text)``, ``slow(seconds)`` (``{"pid", "start", "end"}``), ``count(n, delay)``
(``n`` progress notifications), and ``die(marker, delay)``, which ends the
process without answering (after ``delay`` seconds) — unless ``marker`` names a file
that exists, when it answers like ``pid()``; it creates that file before it dies, so a
retry of the same step succeeds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

print(f"pid_server starting pid={os.getpid()}", file=sys.stderr, flush=True)

_parser = argparse.ArgumentParser()
_parser.add_argument("--delay", type=float, default=0.0)
_parser.add_argument("--pids")
_options, _ = _parser.parse_known_args()
if _options.pids:
    with open(os.path.join(_options.pids, str(os.getpid())), "w") as _f:
        _f.write(str(os.getpid()))
if _options.delay:
    print(f"pid_server: sleeping {_options.delay:g} s before serving", file=sys.stderr, flush=True)
    time.sleep(_options.delay)

import anyio  # noqa: E402
from mcp.server import MCPServer  # noqa: E402
from mcp.server.mcpserver import Context  # noqa: E402

app = MCPServer("brain-test-pid", log_level="WARNING")
_lock = threading.Lock()
_calls = 0


def _pid_answer() -> str:
    global _calls
    with _lock:
        _calls += 1
        calls = _calls
    return json.dumps({"pid": os.getpid(), "calls": calls})


@app.tool()
def pid() -> str:
    """This process's id and how many ``pid`` calls it answered (this one counted)."""
    return _pid_answer()


@app.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@app.tool()
async def slow(seconds: float) -> str:
    """Sleep ``seconds``; answer with this process's id and when the sleep began and ended
    (``time.time()``), so overlapping calls can be seen."""
    start = time.time()
    await anyio.sleep(seconds)
    return json.dumps({"pid": os.getpid(), "start": start, "end": time.time()})


@app.tool()
async def count(n: int, ctx: Context, delay: float = 0.05) -> str:
    """Send ``n`` progress notifications (``i`` of ``n``, ``"step i"``), a short pause
    between them, then answer."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
        await anyio.sleep(delay)
    return f"counted {n}"


@app.tool()
def die(marker: str | None = None, delay: float = 0.0) -> str:
    """End this process at once, after ``delay`` seconds, without answering; when
    ``marker`` exists already, answer like ``pid()`` instead (it is created before dying)."""
    if marker is not None:
        if os.path.exists(marker):
            return _pid_answer()
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
    time.sleep(delay)  # a worker thread's: other calls go on meanwhile
    print(f"pid_server: dying, pid={os.getpid()}", file=sys.stderr, flush=True)
    os._exit(3)


if __name__ == "__main__":
    app.run()
