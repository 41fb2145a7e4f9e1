"""One MCP server per run, opt-in (SPEC §17): ``mcp_tool(..., reuse="run")``.

Steps of one run that resolve to the same server (stdio: command words, ``env``, ``cwd``;
HTTP: ``url``, headers) share one server process or session, started by the first of them
and ended with the run; parallel steps call it concurrently; it is never shared between
runs; if it dies, the step in flight fails and a retry starts a fresh one. Without
``reuse``, every step has its own (SPEC §2).

``tests/mcp_servers/pid_server.py`` answers ``pid`` with its process id and how many
``pid`` calls it answered, and writes its id into ``--pids DIR`` when it starts, so a test
sees which processes served and that none is left.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_servers.fixtures import (
    PID_SERVER,
    PY,
    HttpMcpServer,
    http_server,
    sdk_call,
    sdk_stdio_session,
    text_of,
)
from support import kill_quietly, pid_gone, wait_gone

from brain import RunResult, mcp_tool, parallel, secret, shell, workflow
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

TOKEN = "reuse-bearer-8d6f4b2a0c"


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    """Where the servers write their ids; any left running afterwards are killed (after
    the test has failed on them)."""
    folder = tmp_path / "pids"
    folder.mkdir()
    yield folder
    for pid in started(folder):
        kill_quietly(pid)


def started(folder: Path) -> list[int]:
    """The ids of the servers that started, from their ``--pids`` files."""
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def server(pids: Path, *extra: str) -> list[str]:
    """``pid_server.py``'s command, writing its id into ``pids``."""
    return [PY, PID_SERVER, "--pids", str(pids), *extra]


def answer(run: RunResult, step: str) -> dict[str, Any]:
    output = run.steps[step].output
    assert output, f"{step}: {run.steps[step].status} {run.steps[step].error!r}"
    parsed: dict[str, Any] = json.loads(output)
    return parsed


def all_gone(folder: Path) -> bool:
    return all(wait_gone(pid, 15) for pid in started(folder))


# --- the server, with the bare SDK client --------------------------------------------------------


def test_the_pid_server_counts_calls_per_process_and_dies_on_request(pids: Path, tmp_path: Path):
    marker = tmp_path / "died-once"

    async def three(session: Any) -> list[dict[str, Any]]:
        return [json.loads(text_of(await sdk_call(session, "pid"))) for _ in range(3)]

    seen = asyncio.run(sdk_stdio_session(server(pids), three))
    assert len({s["pid"] for s in seen}) == 1
    assert [s["calls"] for s in seen] == [1, 2, 3]
    assert started(pids) == [seen[0]["pid"]]

    async def die(session: Any) -> Any:
        return await sdk_call(session, "die", {"marker": str(marker)})

    with pytest.raises(BaseException):  # noqa: B017 - the SDK's error for a closed connection
        asyncio.run(sdk_stdio_session(server(pids), die))
    assert marker.exists()  # a second die() with this marker answers instead
    again = asyncio.run(sdk_stdio_session(server(pids), die))
    assert json.loads(text_of(again))["calls"] == 1
    assert len(started(pids)) == 3
    assert all_gone(pids)


# --- one server per run --------------------------------------------------------------------------


def test_steps_with_reuse_run_share_one_server_process(pids: Path):
    command = server(pids)

    @workflow
    def mcp_reuse_three():
        a = mcp_tool("a", server_command=command, tool="pid", reuse="run")
        b = mcp_tool("b", server_command=command, tool="pid", reuse="run", after=[a])
        mcp_tool("c", server_command=command, tool="pid", reuse="run", after=[b])

    r = mcp_reuse_three()
    assert r.status == "succeeded", r.error
    seen = [answer(r, name) for name in "abc"]
    assert len({s["pid"] for s in seen}) == 1, seen
    assert [s["calls"] for s in seen] == [1, 2, 3]
    assert started(pids) == [seen[0]["pid"]], "one process started for the run"
    assert all_gone(pids), "the shared server ended with the run"


def test_without_reuse_each_step_has_its_own_process(pids: Path):
    command = server(pids)

    @workflow
    def mcp_no_reuse_three():
        a = mcp_tool("a", server_command=command, tool="pid")
        b = mcp_tool("b", server_command=command, tool="pid", after=[a])
        mcp_tool("c", server_command=command, tool="pid", after=[b])

    r = mcp_no_reuse_three()
    assert r.status == "succeeded", r.error
    seen = [answer(r, name) for name in "abc"]
    assert len({s["pid"] for s in seen}) == 3, seen
    assert [s["calls"] for s in seen] == [1, 1, 1]
    assert sorted(s["pid"] for s in seen) == started(pids)
    assert all_gone(pids)


def test_parallel_steps_share_the_server_and_call_it_concurrently(pids: Path):
    command = server(pids)

    @workflow
    def mcp_reuse_parallel():
        with parallel():
            mcp_tool("one", server_command=command, tool="slow", args={"seconds": 1.5},
                     reuse="run")
            mcp_tool("two", server_command=command, tool="slow", args={"seconds": 1.5},
                     reuse="run")

    r = mcp_reuse_parallel()
    assert r.status == "succeeded", r.error
    one, two = answer(r, "one"), answer(r, "two")
    assert one["pid"] == two["pid"]
    assert started(pids) == [one["pid"]]
    # The two calls overlapped on the server: concurrent requests on one session.
    assert max(one["start"], two["start"]) < min(one["end"], two["end"]), (one, two)
    assert all_gone(pids)


def test_steps_that_resolve_to_different_servers_do_not_share(pids: Path, tmp_path: Path):
    """Same program, different env, cwd or words: different servers."""
    command = server(pids)
    other = tmp_path / "elsewhere"
    other.mkdir()

    @workflow
    def mcp_reuse_keys():
        base = mcp_tool("base", server_command=command, tool="pid", reuse="run")
        same = mcp_tool("same", server_command=command, tool="pid", reuse="run", after=[base])
        env = mcp_tool("env", server_command=command, tool="pid", reuse="run",
                       env={"FLAVOUR": "other"}, after=[same])
        words = mcp_tool("words", server_command=[*command, "--delay", "0"], tool="pid",
                         reuse="run", after=[env])
        mcp_tool("mixed", server_command=command, tool="pid", after=[words])  # reuse="step"

    r = mcp_reuse_keys()
    assert r.status == "succeeded", r.error
    seen = {name: answer(r, name)["pid"] for name in ("base", "same", "env", "words", "mixed")}
    assert seen["base"] == seen["same"]
    assert len({seen["base"], seen["env"], seen["words"], seen["mixed"]}) == 4, seen
    assert all_gone(pids)


def test_placeholders_resolving_alike_share_and_resolving_apart_do_not(pids: Path):
    """The key is the resolved server: a word filled from an upstream step counts as what
    it resolves to."""

    @workflow
    def mcp_reuse_resolved():
        flavour = shell("flavour", command="printf red")
        a = mcp_tool("a", server_command=[*server(pids), "--flavour", flavour], tool="pid",
                     reuse="run")
        b = mcp_tool("b", server_command=[*server(pids), "--flavour", "red"], tool="pid",
                     reuse="run", after=[a])
        mcp_tool("c", server_command=[*server(pids), "--flavour", "blue"], tool="pid",
                 reuse="run", after=[b])

    r = mcp_reuse_resolved()
    assert r.status == "succeeded", r.error
    a, b, c = (answer(r, name)["pid"] for name in "abc")
    assert a == b != c
    assert all_gone(pids)


def test_runs_never_share_a_server(pids: Path, db_url: str):
    command = server(pids)

    @workflow
    def mcp_reuse_two_runs():
        a = mcp_tool("a", server_command=command, tool="pid", reuse="run")
        mcp_tool("b", server_command=command, tool="pid", reuse="run", after=[a])

    async def both() -> list[RunResult]:
        async with Store(db_url) as store:
            return list(await asyncio.gather(mcp_reuse_two_runs.arun(store=store),
                                             mcp_reuse_two_runs.arun(store=store)))

    first, second = asyncio.run(both())
    later = mcp_reuse_two_runs()
    runs = [first, second, later]
    for r in runs:
        assert r.status == "succeeded", r.error
        assert answer(r, "a")["pid"] == answer(r, "b")["pid"]
        assert answer(r, "b")["calls"] == 2
    assert len({answer(r, "a")["pid"] for r in runs}) == 3
    assert len(started(pids)) == 3
    assert all_gone(pids)


def test_the_shared_server_ends_when_the_run_fails(pids: Path):
    command = server(pids)

    @workflow
    def mcp_reuse_then_fail():
        a = mcp_tool("a", server_command=command, tool="pid", reuse="run")
        shell("boom", command="exit 3", after=[a])
        mcp_tool("never", server_command=command, tool="pid", reuse="run", after=["boom"])

    r = mcp_reuse_then_fail()
    assert r.status == "failed"
    assert r.steps["never"].status == "skipped"
    (pid,) = started(pids)
    assert answer(r, "a")["pid"] == pid
    assert wait_gone(pid, 15), "the shared server outlived its failed run"


# --- a shared server that dies --------------------------------------------------------------------


def test_a_dead_shared_server_fails_the_step_in_flight_and_a_retry_starts_a_fresh_one(
        pids: Path, tmp_path: Path):
    """``slow`` is in flight on the shared server when ``die`` ends it: that try of
    ``slow`` fails too. Both retry on a fresh server, and the step after them shares it."""
    command = server(pids)
    marker = tmp_path / f"died-{uuid.uuid4().hex[:8]}"

    @workflow
    def mcp_reuse_dies():
        first = mcp_tool("first", server_command=command, tool="pid", reuse="run")
        with parallel():
            slow = mcp_tool("slow", server_command=command, tool="slow", args={"seconds": 3},
                            reuse="run", retries=1, retry_delay_seconds=0, after=[first])
            die = mcp_tool("die", server_command=command, tool="die",
                           args={"marker": str(marker), "delay": 0.5}, reuse="run", retries=1,
                           retry_delay_seconds=0, after=[first])
        mcp_tool("after", server_command=command, tool="pid", reuse="run", after=[slow, die])

    r = mcp_reuse_dies()
    assert r.status == "succeeded", r.error
    old = answer(r, "first")["pid"]
    assert marker.read_text() == str(old)  # it was the shared server that died
    assert pid_gone(old)
    slow, die = r.steps["slow"], r.steps["die"]
    assert slow.tries == 2, f"the step in flight did not fail with its server: {slow}"
    assert die.tries == 2
    fresh = {answer(r, "slow")["pid"], answer(r, "die")["pid"], answer(r, "after")["pid"]}
    assert old not in fresh
    assert answer(r, "after")["pid"] in fresh
    assert all_gone(pids)


def test_a_dead_shared_server_fails_the_step_in_flight_without_retries(pids: Path,
                                                                       tmp_path: Path):
    command = server(pids)

    @workflow
    def mcp_reuse_dies_no_retry():
        first = mcp_tool("first", server_command=command, tool="pid", reuse="run")
        mcp_tool("die", server_command=command, tool="die", reuse="run", after=[first])
        mcp_tool("next", server_command=command, tool="pid", reuse="run", after=["die"])

    r = mcp_reuse_dies_no_retry()
    assert r.status == "failed"
    step = r.steps["die"]
    assert step.status == "failed" and step.tries == 1
    assert step.error
    assert r.steps["next"].status == "skipped"
    assert all_gone(pids)


# --- over HTTP: one session per run ---------------------------------------------------------------


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpMcpServer]:
    with http_server(tmp_path_factory.mktemp("mcp_http"), token=TOKEN) as running:
        yield running


@pytest.mark.parametrize("reuse", ["run", "step"])
def test_http_steps_with_reuse_run_share_one_session(http: HttpMcpServer, reuse: str,
                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MCP_TEST_BEARER", TOKEN)
    options = {"url": http.url, "bearer": secret("MCP_TEST_BEARER"), "tool": "pid",
               "reuse": reuse}

    @workflow(name=f"mcp_reuse_http_{reuse}")
    def sessions():
        a = mcp_tool("a", **options)
        b = mcp_tool("b", after=[a], **options)
        mcp_tool("c", after=[b], **options)

    r = sessions()
    assert r.status == "succeeded", r.error
    seen = [answer(r, name) for name in "abc"]
    assert {s["pid"] for s in seen} == {http.proc.pid}
    if reuse == "run":
        assert len({s["session"] for s in seen}) == 1, seen
        assert [s["calls"] for s in seen] == [1, 2, 3]
    else:
        assert len({s["session"] for s in seen}) == 3, seen
        assert [s["calls"] for s in seen] == [1, 1, 1]
