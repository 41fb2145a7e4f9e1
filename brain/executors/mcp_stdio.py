"""MCP servers started on stdio: the official SDK's stdio client spawns the server (in its
own session, with the SDK's minimal environment plus the step's ``env``) behind a small
shell that records its pid and exit status.

The server's process group is announced to the runner once the shell has written its pid
(``StepContext.on_process``); the shell waits at a gate (a FIFO) until that record is
committed (SPEC §4), so if the orchestrator dies first, the server never starts. Its
stderr goes to a file, read into the step's log as it grows, of which the last 8 KiB are
kept as the step's stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from brain._errors import StepFailed, innermost
from brain.executors.base import StepContext, run_marker, tail_margin, tail_text
from brain.executors.process import announce_group, kill_group, open_gate, signal_group
from brain.executors.steplog import StepLog

STDERR_TAIL = 8192
# sh runs the server and records its own pid (= the process group the SDK spawns) and the
# server's exit status, which the SDK's client does not expose. It waits at a gate (a FIFO)
# before it starts the server, until the runner has recorded its process group.
_RECORD_EXIT = ('dir="$1"; shift; printf %s "$$" > "$dir/pid"; '
                'IFS= read -r _ < "$dir/gate" || exit 125; "$@"; code=$?; '
                'printf %s "$code" > "$dir/exit"; exit "$code"')
#: How often an MCP server's stderr is read into the step's log while it runs.
_FOLLOW_SECONDS = 0.2


def check_program(program: str, path: str | None, workflow_dir: str) -> None:
    """:class:`StepFailed` (not worth retrying) unless ``program`` can be started."""
    import shutil

    if os.sep not in program and shutil.which(program, path=path) is None:
        raise StepFailed(f"cannot start the MCP server: {program!r} is not on PATH",
                         retryable=False)
    if os.sep in program and not os.access(os.path.join(workflow_dir, program), os.X_OK):
        raise StepFailed(f"cannot start the MCP server: {program!r} does not exist or is not "
                         f"executable", retryable=False)


class StdioServer:
    """One server process on stdio, from spawn to its end (see the module)."""

    def __init__(self, words: list[str], env: dict[str, str], ctx: StepContext) -> None:
        self.words = words
        self.env = env
        self.ctx = ctx
        self._tmp = tempfile.TemporaryDirectory(prefix="brain-mcp-")
        self.dir = self._tmp.name
        self._errlog: Any = None
        self.stderr: str | None = None
        self.refused: asyncio.Event | None = None

    def refusal(self) -> StepFailed | None:
        """A process has no HTTP status: always ``None``."""
        return None

    def expect_output(self, max_output_bytes: int) -> None:
        """Nothing to bound here: the SDK reads the server's lines itself."""

    @property
    def program(self) -> str:
        """The server's executable, as the workflow names it."""
        return self.words[0]

    def describe_failure(self, exc: BaseException) -> StepFailed | None:
        """A readable failure for what went wrong while starting the server, if known."""
        leaf = innermost(exc)
        if isinstance(leaf, OSError):
            return StepFailed(f"cannot start the MCP server {self.program!r}: {leaf}",
                              retryable=False, stderr=self.stderr)
        if isinstance(leaf, RuntimeError):  # e.g. no common protocol version
            return StepFailed(f"the MCP server {self.program!r}: {leaf}", retryable=False,
                              stderr=self.stderr)
        return None

    def exit_code(self) -> int | None:
        """The server's exit status, once it exited."""
        return _read_int(os.path.join(self.dir, "exit"))

    @contextlib.asynccontextmanager
    async def transport(self) -> AsyncIterator[tuple[Any, Any]]:
        """Spawn the server; yield its streams; stop it (stdin closed, then its whole process
        group killed) and keep its stderr's tail."""
        from mcp import StdioServerParameters, stdio_client
        from mcp.client.stdio import get_default_environment

        env = get_default_environment() | self.env | run_marker(self.ctx)
        check_program(self.program, env.get("PATH"), self.ctx.workflow_dir)
        os.mkfifo(os.path.join(self.dir, "gate"), 0o600)
        params = StdioServerParameters(
            command="/bin/sh", args=["-c", _RECORD_EXIT, "brain-mcp", self.dir, *self.words],
            env=self.env | run_marker(self.ctx), cwd=self.ctx.workflow_dir)
        # A file, not a pipe: nobody reads stderr while the server runs, and a full pipe
        # would block a chatty server.
        ended = asyncio.Event()
        errlog: Any
        with open(os.path.join(self.dir, "stderr"), "w+b") as errlog, \
                _follow(errlog.name, self.ctx.log):  # noqa: ASYNC230 - the step's log reads it
            self._errlog = errlog
            announcing = asyncio.ensure_future(_announce_server(self.ctx, self.dir, ended.is_set))
            try:
                async with stdio_client(params, errlog=errlog) as streams:
                    yield streams
            finally:
                ended.set()
                announcing.cancel()
                # The SDK kills the server's group only when the server outlives its
                # stdin; a server that exits at once may leave children: end them too.
                pgid = self.pgid()
                if pgid is not None:
                    await asyncio.shield(kill_group(pgid))
                self.stderr = _tail(errlog)

    def pgid(self) -> int | None:
        """The server's process group, once its shell has started."""
        return _read_int(os.path.join(self.dir, "pid"))

    def kill_now(self) -> None:
        """SIGKILL the server's whole process group (a cancel that could not wait)."""
        pgid = self.pgid()
        if pgid is not None:
            signal_group(pgid, signal.SIGKILL)

    def tail(self) -> str | None:
        """The last 8 KiB the server wrote to stderr so far."""
        if self.stderr is not None or self._errlog is None or self._errlog.closed:
            return self.stderr
        return _tail(self._errlog)

    def cleanup(self) -> None:
        """Remove the server's temporary folder."""
        self._tmp.cleanup()


async def _announce_server(ctx: StepContext, tmp: str, over: Callable[[], bool]) -> None:
    """Once the server's shell has written its pid, announce its process group to the
    runner and, when the record is committed, open the gate so the server starts (closed
    unopened, the shell exits without starting it)."""
    pgid = None
    while pgid is None:
        if over():
            return
        pgid = _read_int(os.path.join(tmp, "pid"))
        if pgid is None:
            await asyncio.sleep(0.005)
    go = False
    try:
        await announce_group(ctx, pgid)
        go = True
    finally:
        await asyncio.shield(_open_fifo_gate(os.path.join(tmp, "gate"), go, over))


async def _open_fifo_gate(path: str, go: bool, over: Callable[[], bool]) -> None:
    """Open the FIFO gate for writing once its reader is there (the shell opens it right
    after its pid), then let the server start (``go``) or not."""
    while not over():
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


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None
