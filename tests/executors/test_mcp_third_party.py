"""Third-party stdio servers from PyPI (SPEC §2, §17): ``mcp-server-git`` on a real
repository, one server per step and one shared by the run (``reuse="run"``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from brain import mcp_tool, workflow

GIT_SERVER = os.path.join(os.path.dirname(sys.executable), "mcp-server-git")

pytestmark = pytest.mark.skipif(not os.access(GIT_SERVER, os.X_OK),
                                reason="mcp-server-git is not installed (the dev extras have it)")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit and one file changed since."""
    folder = tmp_path / "repo"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "init", "-q", str(folder)], check=True, env=env)
    (folder / "notes.txt").write_text("first\n")
    subprocess.run(["git", "-C", str(folder), "add", "notes.txt"], check=True, env=env)
    subprocess.run(["git", "-C", str(folder), "commit", "-qm", "the first commit"], check=True,
                   env=env)
    (folder / "notes.txt").write_text("first\nsecond\n")
    return folder


@pytest.mark.parametrize("reuse", ["step", "run"])
def test_git_server_reads_a_repository(repo: Path, tmp_path: Path, reuse: str) -> None:
    @workflow
    def git_look() -> None:
        status = mcp_tool("status", server_command=[GIT_SERVER], tool="git_status",
                          args={"repo_path": str(repo)}, reuse=reuse)
        mcp_tool("log", server_command=[GIT_SERVER], tool="git_log",
                 args={"repo_path": str(repo), "max_count": 5}, reuse=reuse, after=[status])
        mcp_tool("diff", server_command=[GIT_SERVER], tool="git_diff_unstaged",
                 args={"repo_path": str(repo)}, reuse=reuse, after=[status])

    run = git_look(store=f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}")
    assert run.succeeded, run.error
    assert "notes.txt" in (run.steps["status"].output or "")
    assert "the first commit" in (run.steps["log"].output or "")
    assert "+second" in (run.steps["diff"].output or "")
