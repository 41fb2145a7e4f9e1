"""``compose.yaml`` as Compose itself reads it (``docker-compose config``, or ``docker compose
config``): no engine needed, so these run wherever a Compose client is installed and are
skipped elsewhere. ``test_images.py`` starts the real thing.

``brain.env`` (the ``env_file``) reaches every container of The Brain, so webhook secrets
and ``LLM_*`` reach ``serve`` and ``worker`` alike; the settings compose.yaml sets itself
win over it; ``brain.env.example`` is a valid file to start from; and the database image
can be swapped for a locally built one (``BRAIN_POSTGRES_IMAGE``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import compose_command

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
BRAIN_SERVICES = ("migrate", "serve", "worker")


COMPOSE = compose_command()
pytestmark = pytest.mark.skipif(COMPOSE is None, reason="no Compose client (docker-compose or "
                                                        "docker compose) is installed")


def config(folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``compose config`` of a copy of compose.yaml in ``folder`` (so a developer's own
    brain.env beside the real one plays no part)."""
    assert COMPOSE is not None
    shutil.copy(ROOT / "compose.yaml", folder / "compose.yaml")
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("BRAIN_", "POSTGRES_", "COMPOSE_"))}
    full |= {"POSTGRES_PASSWORD": "pw-for-the-test", "BRAIN_API_TOKEN": "token-for-the-test",
             **env}
    return subprocess.run([*COMPOSE, "-f", str(folder / "compose.yaml"), "config"],
                          capture_output=True, text=True, cwd=folder, env=full, timeout=60)


def services(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    return dict(yaml.safe_load(proc.stdout)["services"])


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the "KEY=value" form
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_brain_env_reaches_serve_and_worker_and_compose_settings_win(tmp_path: Path) -> None:
    (tmp_path / "brain.env").write_text(
        "# a comment\nLLM_BASE_URL=http://models:1234/v1\nLLM_MODEL=tiny\n"
        "GITHUB_WEBHOOK_SECRET=hook-secret-for-the-test\n"
        "BRAIN_DATABASE_URL=sqlite+aiosqlite:///not-this.db\n")
    found = services(config(tmp_path))
    for name in BRAIN_SERVICES:
        env = environment(found[name])
        assert env["LLM_BASE_URL"] == "http://models:1234/v1", name
        assert env["LLM_MODEL"] == "tiny", name
        assert env["GITHUB_WEBHOOK_SECRET"] == "hook-secret-for-the-test", name
        assert env["BRAIN_DATABASE_URL"] == (
            "postgresql+asyncpg://brain:pw-for-the-test@postgres:5432/brain"), name
        assert env["BRAIN_API_TOKEN"] == "token-for-the-test", name
    assert "GITHUB_WEBHOOK_SECRET" not in environment(found["postgres"])


def test_without_brain_env_compose_says_which_file_is_missing(tmp_path: Path) -> None:
    proc = config(tmp_path)
    assert proc.returncode != 0
    assert "brain.env" in proc.stderr

    elsewhere = tmp_path / "etc" / "brain.env"
    elsewhere.parent.mkdir()
    elsewhere.write_text("LLM_MODEL=from-elsewhere\n")
    found = services(config(tmp_path, BRAIN_ENV_FILE=str(elsewhere)))
    assert environment(found["worker"])["LLM_MODEL"] == "from-elsewhere"


def test_the_example_env_file_is_a_valid_start(tmp_path: Path) -> None:
    shutil.copy(ROOT / "brain.env.example", tmp_path / "brain.env")
    found = services(config(tmp_path))
    assert set(environment(found["serve"])) == {"BRAIN_DATABASE_URL", "BRAIN_API_TOKEN",
                                                 "BRAIN_LOG_FORMAT"}  # every line a comment
    assert environment(found["serve"]) == environment(found["worker"])


def test_a_local_postgres_image_stands_in_for_postgres_16(tmp_path: Path) -> None:
    (tmp_path / "brain.env").write_text("")
    assert services(config(tmp_path))["postgres"]["image"] == "postgres:16"
    found = services(config(tmp_path, BRAIN_POSTGRES_IMAGE="local/postgres:16"))
    assert found["postgres"]["image"] == "local/postgres:16"
