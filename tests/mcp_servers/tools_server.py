"""A small real MCP server (official SDK, stdio) with one tool per behaviour under test.

Run as ``python tests/mcp_servers/tools_server.py``. Used by tests/executors/test_mcp.py
and tests/cli/test_mcp_tools.py. Environment knobs (all optional):

- ``MCP_METHOD_LOG``: append the JSON-RPC method of every inbound message to this file.
- ``MCP_PID_DIR``: write this process's id to ``MCP_PID_DIR/<pid>`` at start-up.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

# Cheap start-up evidence, before the (slow) SDK import: the tests find the process by it.
print(f"tools_server starting pid={os.getpid()}", file=sys.stderr, flush=True)
if os.environ.get("MCP_PID_DIR"):
    with open(os.path.join(os.environ["MCP_PID_DIR"], str(os.getpid())), "w") as _f:
        _f.write(str(os.getpid()))

import anyio  # noqa: E402
import mcp_types as types  # noqa: E402
from mcp import MCPError  # noqa: E402
from mcp.server import MCPServer  # noqa: E402
from mcp.server.mcpserver import Context, Image  # noqa: E402
from pydantic import BaseModel  # noqa: E402

app = MCPServer("brain-test-tools")
log = logging.getLogger("tools_server")


def _describe(value: Any) -> Any:
    """``value`` with the Python type of every scalar, to prove types arrived intact."""
    if isinstance(value, dict):
        return {"type": "dict", "items": {k: _describe(v) for k, v in value.items()}}
    if isinstance(value, list):
        return {"type": "list", "items": [_describe(v) for v in value]}
    return {"type": type(value).__name__, "value": value}


@app.tool()
def echo_args() -> str:
    """Return the raw tools/call arguments, each value with its Python type, as JSON."""
    return json.dumps(_describe(_LAST_CALL.get("arguments")), sort_keys=True)


@app.tool()
def trace_meta() -> str:
    """Return the ``params._meta`` of this tools/call as JSON (the trace context a client
    sent: SPEC §25)."""
    return json.dumps(_LAST_CALL.get("_meta") or {}, sort_keys=True)


@app.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@app.tool()
def fail_with_error(reason: str) -> types.CallToolResult:
    """Answer with isError: true and two text blocks; the first is the reason."""
    print(f"fail_with_error stderr: {reason}", file=sys.stderr, flush=True)
    return types.CallToolResult(is_error=True, content=[
        types.TextContent(type="text", text=reason),
        types.TextContent(type="text", text="second block, not the error"),
    ])


@app.tool()
def rpc_error(message: str) -> str:
    """Answer the tools/call with a JSON-RPC error."""
    raise MCPError(-32602, message)


@app.tool()
def die(code: int = 3) -> str:
    """Write to stderr, then end this process at once with ``code``: no answer ever comes."""
    print("die: first stderr line", file=sys.stderr, flush=True)
    print(f"die: about to exit with {code}", file=sys.stderr, flush=True)
    os._exit(code)


@app.tool()
def kill_self(signal: int = 9) -> str:
    """Write to stderr, then send this process ``signal``: no answer ever comes."""
    print(f"kill_self: sending signal {signal}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal)
    return "still alive"


@app.tool()
async def hang() -> str:
    """Never answer."""
    print("hang: now sleeping forever", file=sys.stderr, flush=True)
    await anyio.sleep(3600)
    return "woke up"


@app.tool()
def flood_stderr(megabytes: int = 5) -> str:
    """Write ``megabytes`` MB to stderr (ending with a marker line), then answer."""
    err = sys.stderr
    err.write("FLOOD-START\n")
    line = "x" * 1023 + "\n"
    for _ in range(megabytes * 1024):
        err.write(line)
    err.write("FLOOD-END\n")
    err.flush()
    return "flood done"


@app.tool()
async def chatty(ctx: Context) -> str:
    """Send log and progress notifications (and log to stderr) before answering."""
    log.warning("chatty-log-record")
    for i in range(5):
        await ctx.info(f"chatty info {i}")
        await ctx.warning({"step": i, "detail": "structured log data"})
        await ctx.report_progress(i, 5, f"step {i}")
        # Progress for a token the client never sent must be ignored too.
        await ctx.session.send_progress_notification("no-such-token", i, 5, "stray")
    return "chatty done"


@app.tool()
def two_texts() -> list[types.TextContent]:
    """Two text blocks."""
    return [types.TextContent(type="text", text="first line"),
            types.TextContent(type="text", text="second line")]


@app.tool()
def text_and_image() -> list[Any]:
    """A text block and an image block: only the text counts."""
    return [types.TextContent(type="text", text="caption"),
            types.ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png")]


@app.tool()
def structured_only() -> types.CallToolResult:
    """No content blocks at all, only structuredContent."""
    return types.CallToolResult(content=[], structured_content={"b": [1, 2], "a": "ü", "c": None})


@app.tool()
def image_only() -> Image:
    """A single image block and nothing else."""
    return Image(data=b"\x89PNG\r\n\x1a\n", format="png")


@app.tool()
def get_pid() -> str:
    """This server process's id."""
    return str(os.getpid())


@app.tool()
def get_group() -> str:
    """This server's process group and when the group's leader started (clock ticks since
    boot, field 22 of /proc/PID/stat)."""
    pgid = os.getpgrp()
    with open(f"/proc/{pgid}/stat") as f:
        stat = f.read()
    return f"{pgid} {stat.rsplit(')', 1)[1].split()[19]}"


@app.tool()
def flaky(marker: str, pid_log: str) -> str:
    """Fail (isError) when ``marker`` does not exist yet, creating it; succeed after that.

    Every call appends this process's id to ``pid_log``.
    """
    with open(pid_log, "a") as f:
        f.write(f"{os.getpid()}\n")
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("tried")
        raise RuntimeError("first try fails on purpose")
    return "second try worked"


@app.tool()
def show_env() -> str:
    """The server's whole environment as JSON (also written to stderr)."""
    env = dict(os.environ)
    print(f"show_env stderr: {json.dumps(env, sort_keys=True)}", file=sys.stderr, flush=True)
    return json.dumps(env, sort_keys=True)


@app.tool()
def show_argv() -> str:
    """This process's sys.argv as JSON."""
    return json.dumps(sys.argv)


@app.tool()
async def ask_sampling(ctx: Context) -> str:
    """Ask the client for an LLM completion (sampling); report what came back."""
    try:
        result = await ctx.session.create_message(
            [types.SamplingMessage(role="user", content=types.TextContent(type="text", text="hi"))],
            max_tokens=10)
    except Exception as exc:
        return f"sampling failed: {type(exc).__name__}: {exc}"
    return f"sampling answered: {result}"


class _Answer(BaseModel):
    answer: str


@app.tool()
async def ask_elicitation(ctx: Context) -> str:
    """Ask the client's user a question (elicitation); report what came back."""
    try:
        result = await ctx.elicit("What is your name?", _Answer)
    except Exception as exc:
        return f"elicitation failed: {type(exc).__name__}: {exc}"
    return f"elicitation answered: {result}"


@app.tool()
async def ask_roots(ctx: Context) -> str:
    """Ask the client for its roots; report what came back."""
    try:
        result = await ctx.session.list_roots()
    except Exception as exc:
        return f"roots failed: {type(exc).__name__}: {exc}"
    return f"roots answered: {result}"


_LAST_CALL: dict[str, Any] = {}


async def _observe(ctx: Any, call_next: Any) -> Any:
    """Middleware: keep the raw params of the last tools/call; with ``MCP_METHOD_LOG`` set,
    append the method of every inbound request and notification to that file."""
    if ctx.method == "tools/call" and isinstance(ctx.params, dict):
        _LAST_CALL.clear()
        _LAST_CALL.update(ctx.params)
    if os.environ.get("MCP_METHOD_LOG"):
        _append(os.environ["MCP_METHOD_LOG"], f"{ctx.method}\n")
    return await call_next(ctx)


def _append(path: str, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


app.middleware.append(_observe)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    app.run()
