"""MCP step cost, measured against the bare SDK doing the same work in the same run.

1. 20 mcp_tool() steps against one small stdio server, and 20 bare SDK spawn + initialize +
   call + close cycles on the same server (target, issue 4: median step / median bare
   cycle ≤ 1.15).
2. SPEC §17, a run of three calls, side by side with the bare SDK:
   (a) a stdio server that takes 2 s to start (``_mcp_slow_start.py``): one server per step
       (the default) against ``reuse="run"``; bare: three spawns, and one spawn + three calls;
   (b) a server that starts at once: stdio (``_mcp_server.py``) against streamable HTTP
       (``_mcp_http.py``, started once by this bench), per step and ``reuse="run"``; bare:
       three sessions, and one session + three calls.
   A run's time is from its first step's recorded start to its last step's end (the
   store's own work around the run is not counted); ratios are to the bare figure on the
   same row. Parts that need SPEC §17 (``url=``, ``reuse=``) print what failed instead.

Prints figures; asserts nothing.   .venv/bin/python bench/mcp_step.py
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from brain import mcp_tool, workflow

N = 20
HERE = Path(__file__).resolve().parent
SERVER = HERE / "_mcp_server.py"
SLOW_SERVER = HERE / "_mcp_slow_start.py"
HTTP_SERVER = HERE / "_mcp_http.py"
SLOW_REPEATS = 3  # a per-step run of the slow server takes three starts: ~8 s
FAST_REPEATS = 7
CALLS = 3


# --- part 1: one step against one bare cycle ---------------------------------------------------


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


def per_step(store: str) -> None:
    def chain() -> None:
        for i in range(N):
            mcp_tool(f"s{i}", server_command=f"{sys.executable} {SERVER}", tool="echo",
                     args={"text": "hi"})

    wf = workflow(name="mcp_bench")(chain)
    bare: list[float] = []
    for _ in range(N // 2):
        bare.append(asyncio.run(bare_cycle()))
    result = wf(store=store)
    for _ in range(N - N // 2):
        bare.append(asyncio.run(bare_cycle()))
    assert result.succeeded, result.error
    steps = [(s.ended_at - s.started_at).total_seconds() for s in result.steps.values()
             if s.ended_at and s.started_at]
    b, s = statistics.median(bare), statistics.median(steps)
    print(f"bare SDK cycle (spawn, initialize, tools/call, close): median {b * 1000:.0f} ms over {N}")
    print(f"mcp_tool() step (recorded start → end): median {s * 1000:.0f} ms over {N}; "
          f"ratio {s / b:.2f} (target ≤ 1.15)")


# --- part 2: three calls, per step and reuse="run", stdio and HTTP -------------------------------


async def _three_calls(open_session: Callable[[], Any], sessions: int) -> float:
    """``CALLS`` tools/call over ``sessions`` sessions (1: all on one; CALLS: one each),
    each session opened and closed by ``open_session()``; seconds from the start to the
    last answer (the last session's close is not counted, as a run's last step's end does
    not count its shared server's)."""
    import mcp_types as types
    from mcp import ClientSession

    request = types.CallToolRequest(params=types.CallToolRequestParams(
        name="echo", arguments={"text": "hi"}))
    t0 = time.perf_counter()
    answered = t0
    for calls in ([CALLS] if sessions == 1 else [1] * CALLS):
        async with open_session() as streams, ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            for _ in range(calls):
                await session.send_request(request, types.CallToolResult)
            answered = time.perf_counter()
    return answered - t0


def bare_stdio(argv: list[str], sessions: int) -> float:
    from mcp import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=argv[0], args=argv[1:])
    return asyncio.run(_three_calls(lambda: stdio_client(params), sessions))


def bare_http(url: str, sessions: int) -> float:
    from mcp.client.streamable_http import streamable_http_client

    return asyncio.run(_three_calls(lambda: streamable_http_client(url), sessions))


def brain_three(store: str, name: str, **place: Any) -> float:
    """A run of ``CALLS`` mcp_tool() steps one after another; seconds from the first step's
    recorded start to the last one's end. Raises when the run does not succeed."""
    def chain() -> None:
        last = None
        for i in range(CALLS):
            last = mcp_tool(f"call{i}", tool="echo", args={"text": "hi"},
                            after=[last] if last is not None else None, timeout_seconds=60,
                            **place)

    result = workflow(name=name)(chain)(store=store)
    if not result.succeeded:
        raise RuntimeError(result.error)
    starts = [s.started_at for s in result.steps.values() if s.started_at]
    ends = [s.ended_at for s in result.steps.values() if s.ended_at]
    return (max(ends) - min(starts)).total_seconds()


class Row:
    """One line of the table: The Brain's runs and the bare SDK's, measured in turns."""

    def __init__(self, label: str, brain: Callable[[], float], bare: Callable[[], float],
                 bare_label: str) -> None:
        self.label, self.brain, self.bare, self.bare_label = label, brain, bare, bare_label
        self.brain_times: list[float] = []
        self.bare_times: list[float] = []
        self.problem: str | None = None

    def measure_once(self) -> None:
        self.bare_times.append(self.bare())
        if self.problem is None:
            try:
                self.brain_times.append(self.brain())
            except Exception as exc:  # the feature is missing, or the run failed
                self.problem = f"{type(exc).__name__}: {exc}".splitlines()[0][:90]

    def line(self) -> str:
        bare = statistics.median(self.bare_times)
        bare_text = f"{bare:7.2f} s  {self.bare_label}"
        if self.problem is not None or not self.brain_times:
            return f"  {self.label:<30} {'n/a':>9}  {bare_text}\n      needs SPEC §17: {self.problem}"
        brain = statistics.median(self.brain_times)
        return f"  {self.label:<30} {brain:7.2f} s  {bare_text:<42} ratio {brain / bare:5.2f}"

    def median(self) -> float | None:
        return statistics.median(self.brain_times) if self.brain_times and not self.problem else None


@contextlib.contextmanager
def http_server() -> Iterator[str]:
    """``_mcp_http.py`` on a free port, for as long as the block runs; its URL."""
    proc = subprocess.Popen([sys.executable, str(HTTP_SERVER)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        url = f"http://127.0.0.1:{port}/mcp"
        _wait_answering(url)
        yield url
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_answering(url: str) -> None:
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(url, timeout=1)  # any answer will do (a GET without a session is refused)
            return
        time.sleep(0.05)
    raise RuntimeError(f"the bench's HTTP server at {url} does not answer")


def _table(title: str, rows: list[Row], repeats: int,
           gains: list[tuple[str, Row, Row]]) -> None:
    for _ in range(repeats):
        for row in rows:
            row.measure_once()
    print(f"\n{title} (median of {repeats})")
    print(f"  {'':<30} {'The Brain':>9}  {'bare SDK':<42} brain/bare")
    for row in rows:
        print(row.line())
    for label, slow, fast in gains:
        s, f = slow.median(), fast.median()
        bare = statistics.median(slow.bare_times) / statistics.median(fast.bare_times)
        brain = f"{s / f:.2f}x" if s is not None and f is not None else "n/a"
        print(f"  {label}: The Brain {brain}, bare SDK {bare:.2f}x")


def three_calls(tmp: str) -> None:
    store = f"sqlite+aiosqlite:///{tmp}/bench3.db"
    slow_cmd = [sys.executable, str(SLOW_SERVER)]
    fast_cmd = [sys.executable, str(SERVER)]

    slow_step = Row("(a) slow start, per step",
                    lambda: brain_three(store, "mcp_bench_slow_step", server_command=slow_cmd),
                    lambda: bare_stdio(slow_cmd, CALLS), "3 spawns")
    slow_run = Row('(a) slow start, reuse="run"',
                   lambda: brain_three(store, "mcp_bench_slow_run", server_command=slow_cmd,
                                       reuse="run"),
                   lambda: bare_stdio(slow_cmd, 1), "1 spawn + 3 calls")
    _table("three calls to a stdio server that takes 2 s to start", [slow_step, slow_run],
           SLOW_REPEATS, [("per step / reuse", slow_step, slow_run)])

    with http_server() as url:
        rows = [
            Row("(b) stdio, per step",
                lambda: brain_three(store, "mcp_bench_stdio_step", server_command=fast_cmd),
                lambda: bare_stdio(fast_cmd, CALLS), "3 spawns"),
            Row('(b) stdio, reuse="run"',
                lambda: brain_three(store, "mcp_bench_stdio_run", server_command=fast_cmd,
                                    reuse="run"),
                lambda: bare_stdio(fast_cmd, 1), "1 spawn + 3 calls"),
            Row("(b) HTTP, per step",
                lambda: brain_three(store, "mcp_bench_http_step", url=url),
                lambda: bare_http(url, CALLS), "3 sessions"),
            Row('(b) HTTP, reuse="run"',
                lambda: brain_three(store, "mcp_bench_http_run", url=url, reuse="run"),
                lambda: bare_http(url, 1), "1 session + 3 calls"),
        ]
        _table("three calls to a server that starts at once", rows, FAST_REPEATS,
               [("stdio per step / HTTP per step", rows[0], rows[2]),
                ('stdio reuse / HTTP reuse', rows[1], rows[3])])


def _run_part(label: str, part: Callable[[], None]) -> None:
    try:
        part()
    except Exception as exc:  # print what the other parts measure all the same
        print(f"{label} could not be measured: {type(exc).__name__}: {exc}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _run_part("per-step cost", lambda: per_step(f"sqlite+aiosqlite:///{tmp}/bench.db"))
        _run_part("three calls", lambda: three_calls(tmp))


if __name__ == "__main__":
    main()
