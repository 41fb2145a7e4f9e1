"""The compose recipe keeps its generated values in ``.env``, which Compose reads by itself:
a second terminal (``docker-compose logs``, ``exec``) needs nothing exported."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from support import compose_command

ROOT = Path(__file__).resolve().parents[2]


def _recipe_line() -> str:
    """The documented line that writes ``.env`` (docs/deploy.md; compose.yaml says the same)."""
    found = [line for line in (ROOT / "docs" / "deploy.md").read_text().splitlines()
             if line.startswith("[ -f .env ]")]
    assert len(found) == 1, "docs/deploy.md's compose recipe lost its .env line"
    assert f"#   {found[0]}" in (ROOT / "compose.yaml").read_text(), \
        "compose.yaml's comment and docs/deploy.md give different recipes"
    return found[0]


def _values(env_file: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in env_file.read_text().splitlines() if line)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("BRAIN_", "POSTGRES_", "COMPOSE_"))}


def test_the_recipe_writes_env_once_private_and_keeps_it(tmp_path: Path) -> None:
    line = _recipe_line()
    subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True, timeout=60)
    env_file = tmp_path / ".env"
    first = _values(env_file)
    assert set(first) == {"BRAIN_API_TOKEN", "POSTGRES_PASSWORD"}
    assert re.fullmatch(r"[0-9a-f]{64}", first["BRAIN_API_TOKEN"])
    assert re.fullmatch(r"[0-9a-f]{32}", first["POSTGRES_PASSWORD"])
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True, timeout=60)
    assert _values(env_file) == first  # never regenerated: the database keeps its password


def test_a_second_terminal_needs_nothing_exported(tmp_path: Path) -> None:
    compose = compose_command()
    if compose is None:
        pytest.skip("no Compose client (docker-compose or docker compose) is installed")
    shutil.copy(ROOT / "compose.yaml", tmp_path / "compose.yaml")
    shutil.copy(ROOT / "brain.env.example", tmp_path / "brain.env")
    command = [*compose, "-f", str(tmp_path / "compose.yaml"), "config"]
    before = subprocess.run(command, cwd=tmp_path, env=_clean_env(), capture_output=True,
                            text=True, timeout=60)
    assert before.returncode != 0 and "POSTGRES_PASSWORD" in before.stderr
    subprocess.run(["bash", "-c", _recipe_line()], cwd=tmp_path, check=True, timeout=60)
    after = subprocess.run(command, cwd=tmp_path, env=_clean_env(), capture_output=True,
                           text=True, timeout=60)
    assert after.returncode == 0, after.stderr
    assert _values(tmp_path / ".env")["POSTGRES_PASSWORD"] in after.stdout
