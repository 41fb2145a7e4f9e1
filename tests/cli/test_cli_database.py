"""A database that breaks in the middle of a command, or a URL no async driver serves: one
line and exit 2, never a traceback (SPEC §6). A command started with stdout closed ends
normally."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from pathlib import Path

from support import write_source


def _brain(brain_cmd: list[str], *args: str, url: str, cwd: Path,
           **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, BRAIN_DATABASE_URL=url)
    return subprocess.run([*brain_cmd, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=60, **kwargs)  # type: ignore[call-overload]


def _one_line_exit_2(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_corrupt_pages_inside_a_database_are_one_line(tmp_path: Path, brain_cmd: list[str]) -> None:
    db = tmp_path / "pages.db"
    url = f"sqlite+aiosqlite:///{db}"
    flow = write_source(tmp_path, "flow.py", '''
        from brain import shell, workflow

        @workflow
        def flow():
            shell("a", command="echo a")
    ''')
    for _ in range(3):
        assert _brain(brain_cmd, "run", str(flow), url=url, cwd=tmp_path).returncode == 0
    # Every page in the file itself (none left in the write-ahead log to read instead).
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    page = 4096
    for number in range(2, len(data) // page):  # every page but the header page
        data[number * page:(number + 1) * page] = bytes([0xA5]) * page
    db.write_bytes(bytes(data))
    for args in (["runs"], ["prune", "--older-than", "0s"], ["run", str(flow)]):
        line = _one_line_exit_2(_brain(brain_cmd, *args, url=url, cwd=tmp_path))
        assert "database" in line, line


def test_a_url_naming_another_driver_is_one_line(tmp_path: Path, brain_cmd: list[str]) -> None:
    line = _one_line_exit_2(_brain(brain_cmd, "runs",
                                   url="postgresql+psycopg2://postgres@127.0.0.1:5432/test",
                                   cwd=tmp_path))
    assert "postgresql+asyncpg://" in line and "sqlite+aiosqlite:///" in line
    line = _one_line_exit_2(_brain(brain_cmd, "runs", url="mysql://root@127.0.0.1/brain",
                                   cwd=tmp_path))
    assert "must be SQLite" in line


def test_sqlite_and_postgresql_urls_without_a_driver_work(tmp_path: Path, brain_cmd: list[str],
                                                         fresh_pg_url: str) -> None:
    """The store talks to sqlite3 itself and to PostgreSQL through asyncpg: a URL that names
    no driver means those."""
    plain_pg_url = fresh_pg_url.replace("postgresql+asyncpg://", "postgresql://", 1)
    assert plain_pg_url.startswith("postgresql://")
    for url in (f"sqlite:///{tmp_path / 'plain.db'}", plain_pg_url):
        # A shared PostgreSQL database is upgraded by hand (SPEC §9), which works without a
        # driver in the URL too.
        upgraded = _brain(brain_cmd, "db", "upgrade", url=url, cwd=tmp_path)
        assert upgraded.returncode == 0, upgraded.stderr
        result = _brain(brain_cmd, "runs", "--limit", "1", url=url, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
    assert (tmp_path / "plain.db").read_bytes().startswith(b"SQLite format 3")


def test_a_closed_stdout_is_no_error(tmp_path: Path, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "flow.py", '''
        from brain import shell, workflow

        @workflow
        def flow():
            shell("a", command="echo a")
    ''')
    url = f"sqlite+aiosqlite:///{tmp_path / 'closed.db'}"
    for args in (["run", str(flow)], ["runs"]):
        # The command starts with stdout closed for real (``>&-``), not merely a closed pipe.
        result = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *brain_cmd, *args],
                                env=dict(os.environ, BRAIN_DATABASE_URL=url), cwd=tmp_path,
                                stderr=subprocess.PIPE, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr, result.stderr


def test_a_url_option_the_driver_refuses_is_one_line(tmp_path: Path, brain_cmd: list[str],
                                                      pg_url: str) -> None:
    line = _one_line_exit_2(_brain(brain_cmd, "runs", url=f"{pg_url}?sslmode=require",
                                   cwd=tmp_path))
    assert "sslmode" in line
