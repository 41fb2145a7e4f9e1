"""Attack 36 (SPEC §26): secrets of cached steps never reach the database (SQLite file bytes,
PostgreSQL tables), the run JSON or /metrics; a rotated MCP token misses; swapped MCP
header secrets are a stale hit; ``brain cache clear [--workflow W] [--step S]`` removes
exactly what it says (a ``for_each`` step's instances included), and bad input is a clear
error that changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_servers.fixtures import http_server
from prometheus_client import generate_latest
from support import write_source

from brain import llm, mcp_tool, secret, shell, step, workflow
from brain.metrics import Metrics
from brain.testing import FakeChatServer

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

# A prefix no stored text has: Hypothesis draws strings from the constants of the code under
# test (column names such as "process_started", metric names such as "brain_cache_"), which
# the database and /metrics hold anyway; such a "secret" failed the test, and shrinking it
# took minutes (the one-off 120 s "hang" inside a cached step was pytest-timeout firing then).
SECRETS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.",
                  min_size=8, max_size=36).filter(lambda s: len(set(s)) > 4).map(
                      lambda s: "Zq7X" + s)

_VARS = ("ATK36_KEY", "ATK36_ENV", "ATK36_ARG")


@step(cache="1h")
def measure(value: str) -> int:
    return len(value)


def _secretive(url: str) -> object:
    @workflow(name="secretive36")
    def secretive36() -> None:
        llm("ask", prompt="hello", model="m", provider_url=url, api_key=secret("ATK36_KEY"),
            cache="1h")
        shell("use", command='echo "${#TOKEN}"', env={"TOKEN": secret("ATK36_ENV")},
              cache="1h")
        measure(secret("ATK36_ARG"))
    return secretive36


def _pg_text(url: str) -> str:
    """Every row of every table of the database at ``url``, as text."""
    from sqlalchemy import text

    from brain.store import Store

    async def dump() -> str:
        async with Store(url) as store, store.engine.connect() as conn:
            tables = (await conn.execute(text(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public'"))).scalars().all()
            rows = []
            for table in tables:
                rows += (await conn.execute(text(f'SELECT CAST(t AS text) FROM "{table}" t'))
                         ).scalars().all()
            return "\n".join(rows)

    return asyncio.run(dump())


@pytest.fixture(scope="module")
def chat() -> Iterator[FakeChatServer]:
    with FakeChatServer(reply="the answer") as s:
        yield s


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_secrets_never_reach_the_database_json_or_metrics(
        chat: FakeChatServer, backend: str, request: pytest.FixtureRequest) -> None:
    pg = request.getfixturevalue("schema_pg_url") if backend == "postgresql" else None
    used: list[str] = []

    @settings(max_examples=5, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(values=st.tuples(SECRETS, SECRETS, SECRETS).filter(lambda v: len(set(v)) == 3))
    def example(values: tuple[str, str, str]) -> None:
        folder = Path(tempfile.mkdtemp())
        store = pg or f"sqlite:///{folder / 'brain.db'}"
        old = {k: os.environ.get(k) for k in _VARS}
        os.environ.update(dict(zip(_VARS, values, strict=True)))
        try:
            metrics = Metrics()
            wf = _secretive(chat.url)
            first = wf.run(store=store, observers=[metrics])  # type: ignore[attr-defined]
            hit = wf.run(store=store, observers=[metrics])  # type: ignore[attr-defined]
            assert first.succeeded and hit.succeeded, first.error or hit.error
            assert all(s.cached for s in hit.steps.values())
            assert hit.steps["use"].output == str(len(values[1]))
            shown = json.dumps([first.to_json_dict(), hit.to_json_dict()])
            shown += generate_latest(metrics.registry).decode()
            stored = (_pg_text(pg) if pg else "\n".join(
                p.read_bytes().decode("latin-1") for p in folder.iterdir()))
            used.extend(values)
            for value in values:
                assert value not in shown
                assert value not in stored
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    example()
    if pg:  # every example's secrets, in the one database at the end
        everything = _pg_text(pg)
        assert not [v for v in used if v in everything]


# --- MCP: tokens and headers ---------------------------------------------------------------


@pytest.fixture
def mcp_server(tmp_path: Path) -> Iterator[object]:
    with http_server(tmp_path / "mcp", token="first-token-value-36") as server:
        yield server


def test_a_rotated_mcp_bearer_token_misses(mcp_server: object,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    url = mcp_server.url  # type: ignore[attr-defined]

    @workflow
    def tooled() -> None:
        mcp_tool("call", url=url, transport="streamable-http", tool="echo",
                 args={"text": "hi"}, bearer=secret("ATK36_MCP"), cache="1h")

    monkeypatch.setenv("ATK36_MCP", "first-token-value-36")
    assert tooled().succeeded
    assert tooled().steps["call"].cached
    mcp_server.set_token("second-token-value-36")  # type: ignore[attr-defined]
    monkeypatch.setenv("ATK36_MCP", "second-token-value-36")
    rotated = tooled()
    assert rotated.succeeded and not rotated.steps["call"].cached


def test_swapped_mcp_header_secrets_miss(mcp_server: object,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    url = mcp_server.url  # type: ignore[attr-defined]
    mcp_server.set_token(None)  # type: ignore[attr-defined]

    @workflow
    def headed() -> None:
        mcp_tool("call", url=url, transport="streamable-http", tool="header_digests",
                 headers={"X-One": secret("ATK36_H1"), "X-Two": secret("ATK36_H2")},
                 cache="1h")

    monkeypatch.setenv("ATK36_H1", "header-value-one-36")
    monkeypatch.setenv("ATK36_H2", "header-value-two-36")
    first = json.loads(headed().steps["call"].output or "{}")
    monkeypatch.setenv("ATK36_H1", "header-value-two-36")
    monkeypatch.setenv("ATK36_H2", "header-value-one-36")
    second = json.loads(headed().steps["call"].output or "{}")
    assert second["x-one"] == first["x-two"] and second["x-two"] == first["x-one"]


# --- brain cache clear ----------------------------------------------------------------------

FLOWS = '''
from brain import for_each, shell, workflow


@workflow
def alpha():
    shell("one", command="echo a1 >> {marks}; echo a1", cache="1h")
    shell("two", command="echo a2 >> {marks}; echo a2", cache="1h")


@workflow
def beta():
    shell("one", command="echo b1 >> {marks}; echo b1", cache="1h")
    with for_each(["x", "y"]) as item:
        shell("each", command=f"echo {{item}} >> {marks}; echo {{item}}", cache="1h")
'''


def _brain(brain_cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*brain_cmd, *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ))


def _entries(db: Path) -> list[tuple[str, str]]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return sorted(conn.execute("SELECT workflow, step FROM brain_cache").fetchall())


@pytest.fixture
def flows(tmp_path: Path, brain_cmd: list[str]) -> tuple[Path, Path]:
    marks = tmp_path / "marks"
    write_source(tmp_path, "flows.py", FLOWS.format(marks=marks))
    for name in ("alpha", "beta"):
        ran = _brain(brain_cmd, "run", f"{tmp_path / 'flows.py'}:{name}")
        assert ran.returncode == 0, ran.stderr
    return tmp_path / "flows.py", marks


def test_cache_clear_removes_exactly_what_it_says(flows: tuple[Path, Path], tmp_path: Path,
                                                  brain_cmd: list[str]) -> None:
    db = tmp_path / "brain.db"
    before = _entries(db)
    assert ("alpha", "one") in before and ("beta", "one") in before
    for bad in (["cache", "clear", "--step", "one"], ["cache"], ["cache", "clear", "--workflow"],
                ["cache", "drop"], ["cache", "clear", "--everything"]):
        answer = _brain(brain_cmd, *bad)
        assert answer.returncode == 2 and "Traceback" not in answer.stderr, bad
        assert _entries(db) == before, bad
    cleared = _brain(brain_cmd, "cache", "clear", "--workflow", "alpha", "--step", "one")
    assert cleared.returncode == 0 and "cleared 1 cached output" in cleared.stderr
    assert _entries(db) == [e for e in before if e != ("alpha", "one")]
    cleared = _brain(brain_cmd, "cache", "clear", "--workflow", "%")
    assert "cleared 0 cached outputs" in cleared.stderr
    cleared = _brain(brain_cmd, "cache", "clear", "--workflow", "alpha")
    assert "cleared 1 cached output" in cleared.stderr
    assert all(w == "beta" for w, _ in _entries(db))


def test_cache_clear_of_a_for_each_step_clears_its_instances(
        flows: tuple[Path, Path], tmp_path: Path, brain_cmd: list[str]) -> None:
    path, marks = flows
    cleared = _brain(brain_cmd, "cache", "clear", "--workflow", "beta", "--step", "each")
    assert cleared.returncode == 0, cleared.stderr
    before = marks.read_text().split()
    assert _brain(brain_cmd, "run", f"{path}:beta").returncode == 0
    after = marks.read_text().split()
    assert sorted(after[len(before):]) == ["x", "y"], "the step's instances ran again"

