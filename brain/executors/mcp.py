"""MCP tool steps: a fresh server process per step and per try, over stdio.

The official SDK's stdio client spawns the server (in its own session, with
the SDK's minimal environment plus the step's ``env``), the client negotiates
the protocol version, sends exactly one ``tools/call`` — through
``send_request``, because ``ClientSession.call_tool`` would also send
``tools/list`` to validate structured output — and the server is stopped
(stdin closed, then its process group killed). The group is announced to the
runner once the server's shell has written its pid (``StepContext.on_process``).
Its stderr goes to a file, read into the step's log as it grows, of which the last 8 KiB
are kept as the step's stderr. The SDK is
imported only when a step runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import signal
from collections.abc import Iterator
from typing import Any

from brain._errors import StepFailed, innermost
from brain.dsl.model import McpStepSpec, SecretRef
from brain.executors.base import (
    PreparedStep,
    Resolve,
    StepContext,
    StepOutput,
    cut,
    resolve_values,
    run_marker,
    tail_margin,
    tail_text,
)
from brain.executors.process import (
    KILL_GRACE_SECONDS,
    announce_group,
    kill_group,
    open_gate,
    signal_group,
)
from brain.executors.steplog import StepLog

STDERR_TAIL = 8192
# sh runs the server and records its own pid (= the process group the SDK spawns) and the
# server's exit status, which the SDK's client does not expose.
# It waits at a gate (a FIFO) before it starts the server, until the runner has recorded
# its process group (SPEC §4): if the orchestrator dies first, the server never starts.
_RECORD_EXIT = ('dir="$1"; shift; printf %s "$$" > "$dir/pid"; '
                'IFS= read -r _ < "$dir/gate" || exit 125; "$@"; code=$?; '
                'printf %s "$code" > "$dir/exit"; exit "$code"')


def tool_output(result: Any) -> str:
    """Text blocks joined by newlines; else compact JSON of structuredContent, else of content."""
    texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False)
    content = [block.model_dump(mode="json", by_alias=True, exclude_none=True)
               for block in result.content]
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False)


def _exit_reason(code: int) -> str:
    return f"killed by signal {code - 128}" if code > 128 else f"exit code {code}"


class McpExecutor:
    """Runs ``mcp_tool()`` steps."""

    kind = "mcp_tool"

    def prepare(self, spec: McpStepSpec, resolve: Resolve, *, mocked: bool = False) -> PreparedStep:
        """Fill in the command's words, top-level string args and env values."""
        secrets: list[str] = []
        words = [spec.server_command[0], *(resolve(w, False) for w in spec.server_command[1:])]
        # Top-level strings and secrets are resolved; other values keep their types.
        templated = {k: v for k, v in spec.args.items() if isinstance(v, (str, SecretRef))}
        real, shown = resolve_values(templated, resolve, secrets, mocked=mocked)
        args = {k: real.get(k, v) for k, v in spec.args.items()}
        shown_args = {k: shown.get(k, v) for k, v in spec.args.items()}
        env, shown_env = resolve_values(spec.env, resolve, secrets, mocked=mocked)
        if any("\x00" in word for word in words):
            raise StepFailed("a server_command word contains a NUL byte", retryable=False)
        inputs: dict[str, Any] = {"server_command": words, "tool": spec.tool, "args": shown_args}
        if shown_env:
            inputs["env"] = shown_env
        return PreparedStep(inputs=inputs, payload={"words": words, "args": args, "env": env},
                            secrets=secrets)

    async def execute(self, spec: McpStepSpec, prepared: PreparedStep,
                      ctx: StepContext) -> StepOutput:
        """Spawn, initialize, call the tool once, stop the server; return the tool's output."""
        import tempfile

        from mcp import StdioServerParameters
        from mcp.client.stdio import get_default_environment

        words: list[str] = prepared.payload["words"]
        env = get_default_environment() | prepared.payload["env"] | run_marker(ctx)
        program = words[0]
        _check_program(program, env.get("PATH"), ctx.workflow_dir)
        with tempfile.TemporaryDirectory(prefix="brain-mcp-") as tmp:
            os.mkfifo(os.path.join(tmp, "gate"), 0o600)
            params = StdioServerParameters(
                command="/bin/sh", args=["-c", _RECORD_EXIT, "brain-mcp", tmp, *words],
                env=prepared.payload["env"] | run_marker(ctx), cwd=ctx.workflow_dir)
            # A file, not a pipe: nobody reads stderr while the server runs, and a full pipe
            # would block a chatty server.
            with open(os.path.join(tmp, "stderr"), "w+b") as errlog, \
                    _follow(errlog.name, ctx.log):  # noqa: ASYNC230 - the step's log reads it too
                # The conversation runs in its own task: when this step is cancelled (a
                # timeout, a failed sibling, a cancel request) the server's whole process
                # group is killed at once, so the SDK's shutdown never waits on it.
                talk = asyncio.ensure_future(_converse(params, errlog, spec.tool,
                                                       prepared.payload["args"]))
                announcing = asyncio.ensure_future(_announce_server(ctx, tmp, talk))
                try:
                    result, error = await asyncio.shield(talk)
                except asyncio.CancelledError:
                    pgid = _read_int(os.path.join(tmp, "pid"))
                    if pgid is not None:
                        signal_group(pgid, signal.SIGKILL)
                    talk.cancel()
                    with contextlib.suppress(BaseException):
                        await asyncio.wait_for(asyncio.shield(talk), KILL_GRACE_SECONDS * 2)
                    prepared.stderr = _tail(errlog)
                    raise
                except Exception as exc:  # anyio task groups wrap what went wrong
                    leaf = innermost(exc)
                    prepared.stderr = _tail(errlog)
                    if isinstance(leaf, OSError):
                        raise StepFailed(f"cannot start the MCP server {program!r}: {leaf}",
                                         retryable=False, stderr=prepared.stderr) from None
                    if isinstance(leaf, RuntimeError):  # e.g. no common protocol version
                        raise StepFailed(f"the MCP server {program!r}: {leaf}",
                                         retryable=False, stderr=prepared.stderr) from None
                    raise leaf from None
                finally:
                    announcing.cancel()
                    # The SDK kills the server's group only when the server outlives its
                    # stdin; a server that exits at once may leave children: end them too.
                    pgid = _read_int(os.path.join(tmp, "pid"))
                    if pgid is not None:
                        await asyncio.shield(kill_group(pgid))
                stderr = _tail(errlog)
            code = _read_int(os.path.join(tmp, "exit"))
        return _answer(result, error, code, stderr)


def _check_program(program: str, path: str | None, workflow_dir: str) -> None:
    """:class:`StepFailed` (not worth retrying) unless ``program`` can be started."""
    import shutil

    if os.sep not in program and shutil.which(program, path=path) is None:
        raise StepFailed(f"cannot start the MCP server: {program!r} is not on PATH",
                         retryable=False)
    if os.sep in program and not os.access(os.path.join(workflow_dir, program), os.X_OK):
        raise StepFailed(f"cannot start the MCP server: {program!r} does not exist or is not "
                         f"executable", retryable=False)


def _answer(result: Any, error: Any, code: int | None, stderr: str | None) -> StepOutput:
    """The tool's output, or :class:`StepFailed` saying how the server or the tool failed."""
    import mcp_types as types

    if error is not None:
        closed = error.code == types.CONNECTION_CLOSED
        if closed or (result is None and code not in (None, 0)):
            last = (stderr or "").strip().splitlines()
            why = _exit_reason(code) if code is not None else "its connection closed"
            raise StepFailed(f"the MCP server exited before answering ({why})"
                             + (f": {cut(last[-1], 500)}" if last else ""), stderr=stderr)
        raise StepFailed(f"the MCP server answered with an error ({error.code}): "
                         f"{error.message}", stderr=stderr)
    if result.is_error:
        texts = [b.text for b in result.content if getattr(b, "type", None) == "text"]
        raise StepFailed(texts[0] if texts else f"the tool reported an error: {tool_output(result)}",
                         stderr=stderr)
    return StepOutput(output=tool_output(result), stderr=stderr)


async def _converse(params: Any, errlog: Any, tool: str,
                    args: dict[str, Any]) -> tuple[Any, Any]:
    """Spawn, initialize, one ``tools/call``, close: ``(result, None)`` or ``(None, MCPError)``."""
    import mcp_types as types
    from mcp import ClientSession, MCPError, stdio_client

    try:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            request = types.CallToolRequest(params=types.CallToolRequestParams(
                name=tool, arguments=args))
            return await session.send_request(request, types.CallToolResult), None
    except Exception as exc:
        leaf = innermost(exc)
        if isinstance(leaf, MCPError):
            return None, leaf
        raise


async def _announce_server(ctx: StepContext, tmp: str, talk: asyncio.Future[Any]) -> None:
    """Once the server's shell has written its pid, announce its process group to the
    runner and, when the record is committed, open the gate so the server starts (closed
    unopened, the shell exits without starting it)."""
    pgid = None
    while pgid is None:
        if talk.done():
            return
        pgid = _read_int(os.path.join(tmp, "pid"))
        if pgid is None:
            await asyncio.sleep(0.005)
    go = False
    try:
        await announce_group(ctx, pgid)
        go = True
    finally:
        await asyncio.shield(_open_fifo_gate(os.path.join(tmp, "gate"), go, talk))


async def _open_fifo_gate(path: str, go: bool, talk: asyncio.Future[Any]) -> None:
    """Open the FIFO gate for writing once its reader is there (the shell opens it right
    after its pid), then let the server start (``go``) or not."""
    while not talk.done():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                return
            await asyncio.sleep(0.002)
            continue
        open_gate(fd, go)
        return


@contextlib.contextmanager
def _follow(path: str, log: StepLog | None) -> Iterator[None]:
    """While the block runs, what the server writes to its stderr file goes to the step's
    log too (read a few times a second, and once more at the end)."""
    if log is None:
        yield
        return
    with open(path, "rb") as f:  # its own offset: the tail is read from the other handle

        def read_new() -> None:
            while data := f.read(1 << 20):
                log.feed("stderr", data)

        async def every_while() -> None:
            while True:
                await asyncio.sleep(_FOLLOW_SECONDS)
                read_new()

        task = asyncio.ensure_future(every_while())
        try:
            yield
        finally:
            task.cancel()
            read_new()


def _tail(errlog: Any) -> str | None:
    """The last 8 KiB the server wrote to stderr."""
    errlog.flush()
    errlog.seek(0, os.SEEK_END)
    size = errlog.tell()
    errlog.seek(max(0, size - STDERR_TAIL - tail_margin()))
    return tail_text(errlog.read(), STDERR_TAIL)


#: How often an MCP server's stderr is read into the step's log while it runs.
_FOLLOW_SECONDS = 0.2


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None
