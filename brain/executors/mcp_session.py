"""A live MCP session, kept by a task of its own from connect to close, that steps call
tools on: one step's alone (the default), or the steps of a run that share it
(``reuse="run"``, SPEC §17).

The SDK's transports are anyio contexts, which must end in the task that began them:
hence the keeper task. Steps make their calls from their own tasks, concurrently when
they run in parallel. A step cancelled mid-call lets the SDK send
``notifications/cancelled`` for it (its courtesy cancel) before the session is ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from brain._errors import StepFailed, innermost
from brain.executors.base import StepContext, StepOutput, cut
from brain.executors.process import KILL_GRACE_SECONDS

if TYPE_CHECKING:
    from brain.executors.traced import CallTrace

#: How long a session being closed may take to end by itself (its courtesy cancels sent,
#: a server leaving on end of input) before its process group is killed.
CLOSE_GRACE_SECONDS = 1.0


class Server(Protocol):
    """Where a session goes: a server process on stdio or a server reached over HTTP."""

    stderr: str | None
    #: Set when an HTTP response refused the session (401, 403, 5xx) or an answer was not
    #: read to its end (larger than the step may read); ``None`` on stdio.
    refused: asyncio.Event | None

    def refusal(self) -> StepFailed | None:
        """The failure a refusal (or an answer not read) says, if one came."""
        ...

    def expect_output(self, max_output_bytes: int) -> None:
        """A step on this session may output up to ``max_output_bytes`` (how much of an
        answer is read, over HTTP)."""
        ...

    def transport(self) -> contextlib.AbstractAsyncContextManager[tuple[Any, Any]]:
        """Connect (or spawn); yield the read and write streams; end it."""
        ...

    def describe_failure(self, exc: BaseException) -> StepFailed | None:
        """A readable failure for ``exc``, raised while connecting, if known."""
        ...

    def exit_code(self) -> int | None:
        """The server process's exit status, once it exited (stdio only)."""
        ...

    def kill_now(self) -> None:
        """End the server at once (stdio: SIGKILL its process group)."""
        ...

    def tail(self) -> str | None:
        """The last of the server's stderr (stdio only)."""
        ...

    def cleanup(self) -> None:
        """Remove what the server left (its temporary folder)."""
        ...


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


class LiveSession:
    """One server's session, started at once by a keeper task (see the module)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.session: Any = None
        self.error: BaseException | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self.ended = False
        self._task = asyncio.ensure_future(self._keep())

    async def _keep(self) -> None:
        from mcp import ClientSession

        try:
            async with self.server.transport() as (read, write), \
                    ClientSession(read, write) as session:
                await self._first_of(session.initialize())
                self.session = session
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # kept for the steps that use the session
            self.error = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            self.ended = True
            self._ready.set()

    async def _first_of(self, work: Any) -> Any:
        """``await work``, unless an HTTP response refuses the session first (over SSE a
        refused message leaves its request unanswered): then the refusal."""
        task = asyncio.ensure_future(work)
        waiting = {task}
        if self.server.refused is not None:
            waiting.add(asyncio.ensure_future(self.server.refused.wait()))
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()  # a request in flight: the SDK sends notifications/cancelled
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, CLOSE_GRACE_SECONDS)
            raise
        finally:
            for other in waiting - {task}:
                other.cancel()
        if not task.done():
            task.cancel()
            raise self.server.refusal() or StepFailed("the MCP server refused the session")
        return task.result()

    async def _opened(self) -> Any:
        """The initialized session, once connected: :class:`StepFailed` if it could not be."""
        await self._ready.wait()
        if self.session is not None and not self.ended:
            return self.session
        raise self._failure(self.error)

    def _failure(self, exc: BaseException | None) -> StepFailed:
        """What a step says when the session failed or ended (``exc``: why, if known)."""
        from mcp import MCPError

        if exc is not None:
            known = self.server.describe_failure(exc)
            if known is not None:
                return known
            leaf = innermost(exc)
            if isinstance(leaf, StepFailed):
                return leaf
            if isinstance(leaf, ValidationError):
                return _malformed(leaf)
            if isinstance(leaf, MCPError) and not _connection_closed(leaf):
                return StepFailed(f"the MCP server refused the session ({leaf.code}): "
                                  f"{_said(leaf.message)}", retryable=False,
                                  stderr=self.server.tail())
            if not isinstance(leaf, MCPError):
                return StepFailed(f"the MCP session failed: {type(leaf).__name__}: "
                                  f"{cut(str(leaf), 500)}", stderr=self.server.tail())
        code = self.server.exit_code()
        last = (self.server.tail() or "").strip().splitlines()
        why = _exit_reason(code) if code is not None else "its connection closed"
        return StepFailed(f"the MCP server exited before answering ({why})"
                          + (f": {cut(last[-1], 500)}" if last else ""), stderr=self.server.tail())

    async def call(self, tool: str, args: dict[str, Any], ctx: StepContext) -> StepOutput:
        """One ``tools/call``; the server's progress reports go to the step's log. With a
        trace, inside a ``tools/call TOOL`` span that is current while the request is sent,
        so the SDK passes its context to the server in ``params._meta`` (SPEC §25)."""
        if ctx.trace is None:
            return await self._call(tool, args, ctx)
        with ctx.trace.tool_call(tool) as span:
            return await self._call(tool, args, ctx, span)

    async def _call(self, tool: str, args: dict[str, Any], ctx: StepContext,
                    span: CallTrace | None = None) -> StepOutput:
        import mcp_types as types
        from mcp import MCPError

        session = await self._opened()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if ctx.log is not None:
                ctx.log.progress(progress, total, message)

        request = types.CallToolRequest(params=types.CallToolRequestParams(
            name=tool, arguments=args))
        try:
            result = await self._first_of(session.send_request(
                request, types.CallToolResult, progress_callback=on_progress))
        except MCPError as exc:
            if span is not None:
                span.failed(str(exc.code), exc.message)
            if _connection_closed(exc) or _session_gone(exc):
                self._break()  # the next step or try starts a fresh session
                await self._settled()
                if _connection_closed(exc):
                    raise self._failure(self.error) from None
            refusal = self.server.describe_failure(exc)
            raise (refusal or StepFailed(f"the MCP server answered with an error ({exc.code}): "
                                         f"{_said(exc.message)}", stderr=self.server.tail())
                   ) from None
        except StepFailed:  # refused (HTTP): the session is of no more use
            self._break()
            raise
        except ValidationError as exc:  # an answer of the wrong shape
            raise _malformed(exc) from None
        except Exception:
            self._break()
            raise
        if span is not None and result.is_error:
            span.failed("tool_error")
        return _answer(result, self.server.tail())

    def _break(self) -> None:
        """The session cannot be used any more: end it (its keeper leaves)."""
        self.ended = True
        self._stop.set()

    async def _settled(self) -> None:
        """Give a session whose server went away a moment to notice (its exit status)."""
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(self._task), KILL_GRACE_SECONDS)

    async def close(self) -> None:
        """End the session (and the server process): gracefully if it can within
        :data:`CLOSE_GRACE_SECONDS`, else its process group is killed."""
        self._stop.set()
        done, _ = await asyncio.wait({self._task}, timeout=CLOSE_GRACE_SECONDS)
        if not done:
            self.server.kill_now()
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self._task), KILL_GRACE_SECONDS * 2)
        self.server.cleanup()

    def stderr(self) -> str | None:
        """What the server left on stderr (stdio only)."""
        return self.server.stderr if self.ended else self.server.tail()


def _said(message: str) -> str:
    """An error's message as stored: its first line, without the SDK's quote of a malformed
    message (pydantic's ``input_value=``, cut short: a secret cut in two could not be
    scrubbed)."""
    first = (message or "").strip().split("\n", 1)[0]
    return cut(first.split("input_value=", 1)[0].rstrip(" ,[{("), 500)


def _connection_closed(exc: Any) -> bool:
    """Whether an error is the SDK's own "connection closed" (a server's error may use the
    same code, -32000, with a message of its own)."""
    import mcp_types as types

    return bool(exc.code == types.CONNECTION_CLOSED and exc.message == "Connection closed")


def _malformed(exc: ValidationError) -> StepFailed:
    """An answer of the wrong shape, said without quoting it (pydantic's text quotes the
    input cut short, and a secret cut in two could not be scrubbed)."""
    first = exc.errors(include_input=False, include_url=False)[:1]
    where = ".".join(str(p) for p in first[0]["loc"]) if first else ""
    why = first[0]["msg"] if first else "invalid"
    return StepFailed(f"the MCP server's answer has the wrong shape ({exc.error_count()} "
                      f"problem(s); first at {where or 'the top'}: {why})", retryable=False)


def _session_gone(exc: Any) -> bool:
    """Whether an error says the session itself is gone (rather than that one request
    failed): the transport's stand-ins for an HTTP 404 on a known session, or an HTTP
    error status."""
    import mcp_types as types

    return bool((exc.code == types.INVALID_REQUEST and exc.message == "Session terminated")
            or (exc.code == types.INTERNAL_ERROR
                and exc.message == "Server returned an error response"))


def _exit_reason(code: int) -> str:
    return f"killed by signal {code - 128}" if code > 128 else f"exit code {code}"


def _answer(result: Any, stderr: str | None) -> StepOutput:
    """The tool's output, or :class:`StepFailed` with the tool's own error text."""
    if result.is_error:
        texts = [b.text for b in result.content if getattr(b, "type", None) == "text"]
        raise StepFailed(texts[0] if texts else f"the tool reported an error: {tool_output(result)}",
                         stderr=stderr)
    return StepOutput(output=tool_output(result), stderr=stderr)
