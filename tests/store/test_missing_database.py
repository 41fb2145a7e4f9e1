"""``missing_database``: a command that only reads (``brain check``, ``brain runs --stale``)
asks it first, so a SQLite database it names must exist for real — in URI form too, and
through a symlink — and is never created by the asking."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from brain.store.urls import missing_database


@pytest.mark.parametrize("form", [
    "sqlite:///{path}",
    "sqlite+aiosqlite:///{path}",
    "sqlite:///file:{path}?uri=true",
    "sqlite:///file://{path}?uri=true&mode=rwc",
    "sqlite+aiosqlite:///file:{path}?uri=true&cache=shared",
])
def test_a_database_that_is_not_there_is_named_missing_and_not_created(
        tmp_path: Path, form: str) -> None:
    path = tmp_path / "new.db"
    why = missing_database(form.format(path=path))
    assert why is not None and str(path) in why and "nothing was created" in why
    assert not path.exists()


def test_a_dangling_symlink_is_missing_and_its_target_is_not_created(tmp_path: Path) -> None:
    (tmp_path / "brain.db").symlink_to(tmp_path / "elsewhere.db")
    for url in (f"sqlite:///{tmp_path / 'brain.db'}",
                f"sqlite:///file:{tmp_path / 'brain.db'}?uri=true"):
        assert missing_database(url) is not None
    assert not (tmp_path / "elsewhere.db").exists()


def test_an_empty_file_holds_no_database_and_a_linked_database_is_read(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "empty.db").close()
    assert "holds no Brain database" in (missing_database(
        f"sqlite:///file:{tmp_path / 'empty.db'}?uri=true") or "")
    real = tmp_path / "real.db"
    with sqlite3.connect(real) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num TEXT)")
        conn.execute("INSERT INTO alembic_version VALUES ('0001')")
    conn.close()
    (tmp_path / "link.db").symlink_to(real)
    assert missing_database(f"sqlite:///{tmp_path / 'link.db'}") is None
    assert missing_database(f"sqlite:///file:{tmp_path / 'link.db'}?uri=true") is None


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite://",
                                 "sqlite:///file::memory:?uri=true&cache=shared",
                                 "sqlite:///file:anything?uri=true&mode=memory",
                                 "postgresql://u@127.0.0.1/db"])
def test_memory_and_server_databases_are_never_missing(url: str) -> None:
    assert missing_database(url) is None
