"""Commands that only read the record (``runs``, ``show``, ``logs``, ``workers``,
``prune --dry-run``) never create a database, a file or tables: finding none, each says
which database it looked for and exits 2. A database with no runs is named too. Commands
that write still create the database as before.

Each through the real ``brain`` command, from an empty temporary folder.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import write_source

READ_ONLY = [["runs"], ["runs", "--json"], ["show", "abc123"], ["show", "abc123", "--json"],
             ["logs", "abc123"], ["workers"], ["workers", "--json"],
             ["prune", "--older-than", "1d", "--dry-run"]]
FLOW = """
    from brain import shell, workflow

    @workflow
    def flow():
        shell("a", argv=["echo", "a"])
"""


def brain(brain_cmd: list[str], *args: str, cwd: Path,
          url: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real ``brain`` in ``cwd``; ``BRAIN_DATABASE_URL`` is ``url`` (unset for none)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRAIN_")}
    if url is not None:
        env["BRAIN_DATABASE_URL"] = url
    return subprocess.run([*brain_cmd, *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=60, check=False)


def one_error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize("args", READ_ONLY, ids=" ".join)
def test_a_read_in_an_empty_folder_creates_nothing_and_names_the_file(
        tmp_path: Path, brain_cmd: list[str], args: list[str]) -> None:
    proc = brain(brain_cmd, *args, cwd=tmp_path)
    assert proc.returncode == 2
    line = one_error(proc)
    assert f"no database at {tmp_path / 'brain.db'} " in line, line
    assert "BRAIN_DATABASE_URL" in line  # how to point it at the right one
    assert os.listdir(tmp_path) == []


# File names as people write them: spaces, dots, dashes, quotes, non-ASCII letters. (A URL's
# own syntax, ``?``, ``#`` and ``%``, is not a file name's.)
_NAMES = st.text(st.characters(categories=("L", "N"), include_characters=" -_.'",
                               exclude_characters="\x00/"), min_size=1, max_size=20).filter(
    lambda s: s.strip(" .") == s and s not in (".", ".."))


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_NAMES, args=st.sampled_from(READ_ONLY), empty_file=st.booleans(),
       nested=st.booleans())
def test_a_read_of_any_named_file_creates_nothing(tmp_path: Path, brain_cmd: list[str],
                                                  name: str, args: list[str], empty_file: bool,
                                                  nested: bool) -> None:
    """A missing file is not created; an empty file (no tables) is left as it was, and no
    ``-wal`` or ``-shm`` file appears beside it."""
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    folder = root / "sub folder" if nested else root
    if empty_file:
        folder.mkdir(exist_ok=True)
        (folder / f"{name}.db").touch()
    target = folder / f"{name}.db"
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    proc = brain(brain_cmd, *args, cwd=root, url=f"sqlite+aiosqlite:///{target}")
    assert proc.returncode == 2
    line = one_error(proc)
    assert str(target) in line, line
    assert ("holds no Brain database" if empty_file else "no database at") in line, line
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    if empty_file:
        assert target.stat().st_size == 0


def test_a_database_without_runs_is_named(tmp_path: Path, brain_cmd: list[str]) -> None:
    assert brain(brain_cmd, "db", "upgrade", cwd=tmp_path).returncode == 0
    db = tmp_path / "brain.db"
    proc = brain(brain_cmd, "runs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == f"no runs in {db}"
    proc = brain(brain_cmd, "runs", "--workflow", "flow", "--status", "failed", cwd=tmp_path)
    assert proc.stderr.strip() == f"no runs matching --workflow flow --status failed in {db}"
    as_json = brain(brain_cmd, "runs", "--json", cwd=tmp_path)
    assert (as_json.returncode, as_json.stdout) == (0, "[]\n")
    assert brain(brain_cmd, "workers", "--json", cwd=tmp_path).stdout == "[]\n"


@pytest.mark.parametrize("args", [["run", "flow.py"], ["db", "upgrade"], ["signal", "go"],
                                  ["prune", "--older-than", "1d"]], ids=" ".join)
def test_commands_that_write_still_create_the_database(tmp_path: Path, brain_cmd: list[str],
                                                       args: list[str]) -> None:
    write_source(tmp_path, "flow.py", FLOW)
    proc = brain(brain_cmd, *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(tmp_path / "brain.db") as conn:
        assert conn.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)
    assert brain(brain_cmd, "runs", "--json", cwd=tmp_path).returncode == 0


def test_a_postgresql_database_without_tables_is_named_masked_and_left_empty(
        tmp_path: Path, brain_cmd: list[str], fresh_pg_url: str) -> None:
    from sqlalchemy.engine import make_url

    password = "not-a-real-pass-4711"
    url = make_url(fresh_pg_url).set(password=password).render_as_string(hide_password=False)
    for args in (["runs"], ["show", "abc123"], ["workers", "--json"]):
        proc = brain(brain_cmd, *args, cwd=tmp_path, url=url)
        assert proc.returncode == 2
        line = one_error(proc)
        assert password not in line and ":***@" in line, line
        assert str(make_url(fresh_pg_url).database) in line, line

    async def tables() -> list[str]:
        import asyncpg

        conn = await asyncpg.connect(make_url(fresh_pg_url).set(drivername="postgresql")
                                     .render_as_string(hide_password=False))
        try:
            return [r[0] for r in await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        finally:
            await conn.close()

    assert asyncio.run(tables()) == []
    assert os.listdir(tmp_path) == []
