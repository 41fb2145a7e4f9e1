"""Starting the test MCP servers of this folder as real processes, and calling them with
the bare SDK client (for tests that prove the servers work before The Brain talks to them).

``tests/conftest.py`` puts ``tests/`` on ``sys.path``, so a test file imports this as
``from mcp_servers.fixtures import ...``. Plain context managers, not pytest fixtures: each
test module wraps them in fixtures of the scope it needs (importing fixture functions
into a module would shadow them with its test parameters).

Every server runs in its own session with a pipe on its stdin (``--watch-stdin``): it
exits when the test process ends, however that happens, and :func:`http_server` kills its
process group on the way out. What a server writes goes under the folder it is given.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PY = sys.executable
SERVERS = Path(__file__).resolve().parent
HTTP_SERVER = str(SERVERS / "http_server.py")
SSE_SERVER = str(SERVERS / "sse_server.py")
PID_SERVER = str(SERVERS / "pid_server.py")
TOOLS_SERVER = str(SERVERS / "tools_server.py")
START_SECONDS = 30.0


@dataclass
class HttpMcpServer:
    """A running ``http_server.py`` or ``sse_server.py``."""

    transport: str  # "streamable-http" or "sse"
    port: int
    folder: Path
    proc: subprocess.Popen[bytes]
    token_file: Path
    events_file: Path
    stderr_file: Path
    _stopped: bool = field(default=False, repr=False)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The MCP endpoint: ``/mcp`` (streamable HTTP) or ``/sse`` (legacy SSE)."""
        return f"{self.base}/sse" if self.transport == "sse" else f"{self.base}/mcp"

    def set_token(self, token: str | None) -> None:
        """The bearer token the server wants from now on (``None``: no check)."""
        if token is None:
            self.token_file.unlink(missing_ok=True)
        else:
            self.token_file.write_text(token)

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        """What the server recorded so far (see ``http_server.py``), optionally of one kind."""
        if not self.events_file.exists():
            return []
        found = [json.loads(line) for line in self.events_file.read_text().splitlines() if line]
        return [e for e in found if event is None or e["event"] == event]

    def calls_tagged(self, tag: str) -> list[dict[str, Any]]:
        """The ``tools/call`` events whose arguments carry ``tag`` as their ``tag`` or ``text``."""
        return [e for e in self.events("method")
                if e["method"] == "tools/call"
                and tag in ((e.get("params") or {}).get("arguments") or {}).values()]

    def wire_of_call(self, tag: str) -> list[dict[str, Any]]:
        """What arrived over HTTP in the session of the one ``tools/call`` carrying ``tag``
        (its ``http`` events: messages posted, the session's ``DELETE``), in order,
        starting with that call."""
        wire = self.events("http")
        calls = [i for i, e in enumerate(wire)
                 if e.get("method") == "tools/call"
                 and tag in ((e.get("params") or {}).get("arguments") or {}).values()]
        assert len(calls) == 1, f"{len(calls)} calls carry {tag!r}"
        sid = wire[calls[0]]["session_id"]
        return [e for e in wire[calls[0]:] if e["session_id"] == sid]

    def methods_of_session(self, session: str) -> list[str]:
        """The methods one MCP session sent, in order."""
        return [e["method"] for e in self.events("method") if e["session"] == session]

    def wait_for(self, check: Callable[[list[dict[str, Any]]], bool],
                 seconds: float = 15.0) -> bool:
        """Poll the events (bounded) until ``check`` holds for them."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if check(self.events()):
                return True
            time.sleep(0.05)
        return check(self.events())

    def stderr(self) -> str:
        return self.stderr_file.read_text(errors="replace") if self.stderr_file.exists() else ""

    def stop(self) -> None:
        """End the server and anything it started (its whole process group)."""
        if self._stopped:
            return
        self._stopped = True
        stop_group(self.proc)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group ``proc`` leads, SIGKILL it after 5 s, and reap ``proc``."""
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # whatever of the group is left
    if proc.stdout is not None:
        proc.stdout.close()


def _read_port(proc: subprocess.Popen[bytes], stderr_file: Path, seconds: float) -> int:
    """The port the server prints as its first line; fail with its stderr if it does not."""
    assert proc.stdout is not None
    deadline = time.monotonic() + seconds
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            raise AssertionError(f"the MCP test server printed no port (exit {proc.poll()}):\n"
                                 f"{stderr_file.read_text(errors='replace')}")
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.2))
        if ready:
            chunk = os.read(proc.stdout.fileno(), 64)
            if not chunk:
                continue  # closed: poll() tells at the next turn
            line += chunk
    return int(line.decode().split()[0])


def _wait_answering(base: str, proc: subprocess.Popen[bytes], stderr_file: Path,
                    seconds: float) -> None:
    """Wait until ``GET /health`` answers 200."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"the MCP test server at {base} does not answer (exit {proc.poll()}):\n"
                         f"{stderr_file.read_text(errors='replace')}")


@contextlib.contextmanager
def http_server(folder: Path, *, transport: str = "streamable-http", token: str | None = None,
                fail_status: int | None = None) -> Iterator[HttpMcpServer]:
    """Start ``http_server.py`` (or ``sse_server.py`` with ``transport="sse"``) on a free
    loopback port, wait until it answers, and stop it on the way out.

    ``token``: the bearer token it wants (changed later by ``set_token``); ``fail_status``:
    answer every MCP request with this HTTP status. Its events, stderr and token file are
    in ``folder``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    token_file, events_file = folder / "token", folder / "events.jsonl"
    stderr_file = folder / "stderr.txt"
    argv = [PY, SSE_SERVER if transport == "sse" else HTTP_SERVER, "--port", "0",
            "--watch-stdin", "--events", str(events_file), "--token-file", str(token_file)]
    if fail_status is not None:
        argv += ["--fail-status", str(fail_status)]
    if token is not None:
        token_file.write_text(token)
    with stderr_file.open("ab") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                cwd=folder, start_new_session=True)
    server = HttpMcpServer(transport=transport, port=0, folder=folder, proc=proc,
                           token_file=token_file, events_file=events_file,
                           stderr_file=stderr_file)
    try:
        server.port = _read_port(proc, stderr_file, START_SECONDS)
        _wait_answering(server.base, proc, stderr_file, START_SECONDS)
        yield server
    finally:
        server.stop()


# --- the bare SDK client ------------------------------------------------------------------------

Progress = list[tuple[float, float | None, str | None]]


async def sdk_session(url: str, *, transport: str = "streamable-http",
                      headers: dict[str, str] | None = None,
                      work: Callable[[Any], Awaitable[Any]]) -> Any:
    """Open one MCP session to ``url`` with the bare SDK client, initialize, and return
    what ``work(session)`` returns."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    async with contextlib.AsyncExitStack() as stack:
        if transport == "sse":
            read, write = await stack.enter_async_context(sse_client(url, headers=headers))
        else:
            client = await stack.enter_async_context(httpx2.AsyncClient(headers=headers))
            read, write = await stack.enter_async_context(
                streamable_http_client(url, http_client=client))
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        return await work(session)


async def sdk_stdio_session(argv: list[str], work: Callable[[Any], Awaitable[Any]],
                            env: dict[str, str] | None = None) -> Any:
    """Spawn ``argv`` on stdio with the bare SDK client, initialize, and return what
    ``work(session)`` returns (the server is stopped on the way out)."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await work(session)


async def sdk_call(session: Any, tool: str, args: dict[str, Any] | None = None,
                   progress: Progress | None = None) -> Any:
    """One ``tools/call`` on an open session (``send_request``, as the executor does: no
    ``tools/list``); progress notifications are appended to ``progress`` when given."""
    import mcp_types as types

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        if progress is not None:
            progress.append((done, total, message))

    request = types.CallToolRequest(params=types.CallToolRequestParams(name=tool,
                                                                       arguments=args or {}))
    return await session.send_request(request, types.CallToolResult,
                                      progress_callback=on_progress)


def text_of(result: Any) -> str:
    """The text blocks of a tool result, joined by newlines."""
    return "\n".join(block.text for block in result.content if block.type == "text")
