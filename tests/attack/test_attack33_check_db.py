"""Attack (issue 33, SPEC §24 / docs/runs.md): ``brain check`` warns about waiting runs a
change would fail "when a database is at hand", and never creates one; ``brain runs
--stale`` only reads. A SQLite URL in URI form (``sqlite:///file:PATH?uri=true``) or a
dangling symlink at the database's path is taken for an existing database, and opening it
creates the file and its tables."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

FLOW = "from brain import shell, workflow\n\n\n@workflow\ndef flow():\n    shell('a', command='echo hi')\n"


def _run(brain_cmd: list[str], folder: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BRAIN_DATABASE_URL": url}
    return subprocess.run([*brain_cmd, *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("args", [("check", "flows.py"), ("runs", "--stale", "flows.py")],
                         ids=["check", "runs-stale"])
def test_a_missing_plain_sqlite_file_is_not_created(tmp_path: Path, brain_cmd: list[str],
                                                     args: tuple[str, ...]) -> None:
    (tmp_path / "flows.py").write_text(FLOW)
    _run(brain_cmd, tmp_path, f"sqlite:///{tmp_path / 'new.db'}", *args)
    assert not (tmp_path / "new.db").exists()


@pytest.mark.parametrize("args", [("check", "flows.py"), ("runs", "--stale", "flows.py")],
                         ids=["check", "runs-stale"])
def test_a_missing_sqlite_uri_database_is_not_created(tmp_path: Path, brain_cmd: list[str],
                                                       args: tuple[str, ...]) -> None:
    (tmp_path / "flows.py").write_text(FLOW)
    _run(brain_cmd, tmp_path, f"sqlite:///file:{tmp_path / 'new.db'}?uri=true", *args)
    assert not (tmp_path / "new.db").exists()


@pytest.mark.parametrize("args", [("check", "flows.py"), ("runs", "--stale", "flows.py")],
                         ids=["check", "runs-stale"])
def test_a_dangling_symlink_database_is_not_created(tmp_path: Path, brain_cmd: list[str],
                                                    args: tuple[str, ...]) -> None:
    (tmp_path / "flows.py").write_text(FLOW)
    (tmp_path / "brain.db").symlink_to(tmp_path / "elsewhere.db")
    _run(brain_cmd, tmp_path, f"sqlite:///{tmp_path / 'brain.db'}", *args)
    assert not (tmp_path / "elsewhere.db").exists()
