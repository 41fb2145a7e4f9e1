"""Attack (SPEC §17, §16, §4): ``mcp_tool(..., reuse="run")`` — one server (or session) per
run, never shared between runs, never left behind.

Promised: steps of one run that resolve to the same server share one process or session,
"started by the first of them and ended when the run ends, fails, is cancelled or waits
— never shared between runs or processes". Executors (and so the shared sessions) are
made per execution (``brain/runner/engine.py::RunExecution``: ``default_executors()``),
and the share key carries the run id (``brain/executors/mcp.py::_server_key``).

Attacks, all of which hold:

- three runs of one workflow started together in one event loop (as ``brain serve``
  executes them), each with parallel steps on one HTTP server: each run has exactly one
  session of its own;
- two runs side by side on one stdio server command, one of them cancelled mid-call:
  the other goes on with its own process, and neither process outlives its run;
- the step that starts a slow server times out before the server has answered: the run
  fails and the half-started server is gone;
- a cancel while the shared server is still starting, and one mid-call: nothing left;
- a run that waits for an approval: its server is ended while it waits, and the step
  after the approval gets a fresh one.

Run: ``.venv/bin/pytest tests/attack/test_attack_remote_mcp_reuse.py``
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_servers.fixtures import PID_SERVER, PY, HttpMcpServer, http_server
from support import kill_quietly, pid_gone, wait_gone

from brain import RunResult, approval, mcp_tool, parallel, workflow
from brain.runner import cancel_run
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "pids"
    folder.mkdir()
    yield folder
    for pid in started(folder):
        kill_quietly(pid)


def started(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def server(pids: Path, *extra: str) -> list[str]:
    return [PY, PID_SERVER, "--pids", str(pids), *extra]


def answer(run: RunResult, name: str) -> dict[str, Any]:
    output = run.steps[name].output
    assert output, f"{name}: {run.steps[name].status} {run.steps[name].error!r}"
    parsed: dict[str, Any] = json.loads(output)
    return parsed


def all_gone(folder: Path, seconds: float = 10.0) -> bool:
    return all(wait_gone(pid, seconds) for pid in started(folder))


async def run_id_of(store: Store, name: str, seen: set[str] = frozenset(),  # type: ignore[assignment]
                    seconds: float = 20.0) -> str:
    """The id of a run of ``name`` not in ``seen``, once it exists."""
    for _ in range(int(seconds / 0.05)):
        for run in await store.list_runs(workflow=name, limit=20):
            if run.run_id not in seen:
                return run.run_id
        await asyncio.sleep(0.05)
    raise AssertionError(f"no run of {name} appeared")


async def step_status(store: Store, run_id: str, name: str) -> str:
    return str((await store.get_run(run_id)).steps[name].status)


async def until(predicate: Any, seconds: float = 20.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition never held")


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpMcpServer]:
    with http_server(tmp_path_factory.mktemp("atk_reuse_http")) as running:
        yield running


def test_runs_started_together_never_share_an_http_session(http: HttpMcpServer, db_url: str):
    @workflow
    def atk_reuse_http_together() -> None:
        first = mcp_tool("first", url=http.url, tool="pid", reuse="run")
        with parallel():
            for name in ("b", "c", "d"):
                mcp_tool(name, url=http.url, tool="pid", reuse="run", after=[first])

    async def together() -> list[RunResult]:
        async with Store(db_url) as store:
            return list(await asyncio.gather(
                *(atk_reuse_http_together.arun(store=store) for _ in range(3))))

    runs = asyncio.run(together())
    sessions = []
    for r in runs:
        assert r.status == "succeeded", r.error
        seen = [answer(r, name) for name in ("first", "b", "c", "d")]
        assert len({s["session"] for s in seen}) == 1, seen  # one session in a run
        assert sorted(s["calls"] for s in seen) == [1, 2, 3, 4], seen  # nobody else's calls
        sessions.append(seen[0]["session"])
    assert len(set(sessions)) == 3, sessions  # never one between runs


def test_a_cancelled_run_beside_another_leaves_the_other_its_own_server(pids: Path,
                                                                       db_url: str):
    command = server(pids)

    @workflow
    def atk_reuse_side_by_side() -> None:
        first = mcp_tool("first", server_command=command, tool="pid", reuse="run")
        mcp_tool("slow", server_command=command, tool="slow", args={"seconds": 2.5},
                 reuse="run", after=[first])
        mcp_tool("last", server_command=command, tool="pid", reuse="run", after=["slow"])

    async def both() -> tuple[RunResult, RunResult]:
        async with Store(db_url) as store:
            doomed = asyncio.ensure_future(atk_reuse_side_by_side.arun(store=store))
            doomed_id = await run_id_of(store, "atk_reuse_side_by_side")
            kept = asyncio.ensure_future(atk_reuse_side_by_side.arun(store=store))
            await until(lambda: _is(store, doomed_id, "slow", "running"))
            await cancel_run(store, doomed_id)
            return await doomed, await kept

    doomed, kept = asyncio.run(both())
    assert doomed.status == "cancelled", doomed.error
    assert kept.status == "succeeded", kept.error
    assert answer(kept, "first")["pid"] == answer(kept, "last")["pid"]
    assert answer(kept, "last")["calls"] == 2  # the cancelled run's calls were not on it
    assert answer(doomed, "first")["pid"] != answer(kept, "first")["pid"]
    assert len(started(pids)) == 2
    assert all_gone(pids)


async def _is(store: Store, run_id: str, step: str, status: str) -> bool:
    return await step_status(store, run_id, step) == status


def test_a_server_still_starting_when_its_step_times_out_is_ended_with_the_run(pids: Path):
    @workflow
    def atk_reuse_slow_start() -> None:
        mcp_tool("a", server_command=server(pids, "--delay", "3"), tool="pid", reuse="run",
                 timeout_seconds=1)

    r = atk_reuse_slow_start()
    assert r.status == "failed"
    assert r.steps["a"].error == "timed out after 1 s"
    assert len(started(pids)) == 1
    assert all_gone(pids, 5), "the half-started shared server outlived its run"


@pytest.mark.parametrize("moment", ["while starting", "mid-call"])
def test_a_cancel_leaves_no_shared_server(pids: Path, db_url: str, moment: str):
    slow_start = ["--delay", "5"] if moment == "while starting" else []
    command = server(pids, *slow_start)

    @workflow(name=f"atk_reuse_cancel_{moment.replace(' ', '_').replace('-', '_')}")
    def flow() -> None:
        first = mcp_tool("first", server_command=command, tool="pid", reuse="run")
        mcp_tool("slow", server_command=command, tool="slow", args={"seconds": 30},
                 reuse="run", after=[first])

    async def cancelled() -> RunResult:
        async with Store(db_url) as store:
            task = asyncio.ensure_future(flow.arun(store=store))
            run_id = await run_id_of(store, flow.name)
            if moment == "mid-call":
                await until(lambda: _is(store, run_id, "slow", "running"))
            else:
                await until(lambda: asyncio.sleep(0, bool(started(pids))))
            await cancel_run(store, run_id)
            return await asyncio.wait_for(task, 20)

    r = asyncio.run(cancelled())
    assert r.status == "cancelled"
    assert len(started(pids)) == 1
    assert all_gone(pids, 5), f"a server outlived its cancelled run ({moment})"


def test_a_run_that_waits_ends_its_server_and_gets_a_fresh_one_after(pids: Path, db_url: str):
    command = server(pids)

    @workflow
    def atk_reuse_waits() -> None:
        before = mcp_tool("before", server_command=command, tool="pid", reuse="run")
        go = approval("go", prompt="Go on?", after=[before])
        mcp_tool("after", server_command=command, tool="pid", reuse="run", after=[go])

    async def waits() -> tuple[RunResult, bool]:
        async with Store(db_url) as store:
            task = asyncio.ensure_future(atk_reuse_waits.arun(store=store))
            run_id = await run_id_of(store, "atk_reuse_waits")
            await until(lambda: _is(store, run_id, "go", "waiting"))
            (first,) = started(pids)
            gone_while_waiting = await asyncio.to_thread(wait_gone, first, 5)
            await store.decide(run_id, "go", approved=True)
            return await asyncio.wait_for(task, 20), gone_while_waiting

    r, gone_while_waiting = asyncio.run(waits())
    assert r.status == "succeeded", r.error
    assert gone_while_waiting, "the shared server kept running while its run waited"
    assert answer(r, "before")["pid"] != answer(r, "after")["pid"]
    assert pid_gone(answer(r, "before")["pid"])
    assert all_gone(pids)
