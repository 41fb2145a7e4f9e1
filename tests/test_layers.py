"""The layers hold where a user can tell: ``brain worker`` runs without the web stack."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from support import wait_for, write_source


def test_brain_worker_never_imports_litestar(tmp_path: Path, brain_cmd: list[str]) -> None:
    blocked = tmp_path / "blocked"
    for name in ("litestar", "uvicorn"):
        (blocked / name).mkdir(parents=True)
        write_source(blocked / name, "__init__.py", f'raise ImportError("{name} was imported")\n')
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "hello.py", '''
        from brain import shell, workflow

        @workflow
        def hello():
            shell("hi", command="echo hi")
    ''')
    log = tmp_path / "worker.log"
    env = dict(os.environ, PYTHONPATH=str(blocked),
               BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}")
    with log.open("wb") as out:
        proc = subprocess.Popen([*brain_cmd, "worker", str(folder)], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "The Brain worker" in log.read_text() or proc.poll() is not None, 30,
                 "the worker to start")
        time.sleep(0.5)
        assert proc.poll() is None, log.read_text()
        assert "was imported" not in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


#: Imports that break the layers, one per hole the hand-listed contracts used to leave open:
#: (file to add it to, the module it imports).
FORBIDDEN = [
    ("brain/store/__init__.py", "brain.triggers.schedule"),
    ("brain/triggers/schedule.py", "brain.store"),
    ("brain/executors/shell.py", "brain.triggers.watch"),
    ("brain/_clock.py", "brain.crontab"),
    ("brain/placeholders.py", "brain.shell_check"),
    ("brain/results.py", "brain.metrics"),
    ("brain/store/base.py", "brain.runner"),
    ("brain/runner/engine.py", "brain.workflow"),
    ("brain/dsl/model.py", "brain.executors"),
]


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    import sys

    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint), "--no-cache"], cwd=tree, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(tree)), timeout=300)


def test_the_layers_contract_fails_on_each_forbidden_import(tmp_path: Path) -> None:
    """A copy of the tree passes the contracts as it is, and fails once each import above is
    added, naming every one of them."""
    import shutil

    repo = Path(__file__).resolve().parent.parent
    tree = tmp_path / "tree"
    shutil.copytree(repo / "brain", tree / "brain",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(repo / "pyproject.toml", tree / "pyproject.toml")
    clean = _lint_imports(tree)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    for file, module in FORBIDDEN:
        path = tree / file
        path.write_text(path.read_text() + f"\nimport {module}  # forbidden\n")
    broken = _lint_imports(tree)
    assert broken.returncode != 0, broken.stdout
    assert "the layers of brain" in broken.stdout and "BROKEN" in broken.stdout
    for file, module in FORBIDDEN:
        importer = file.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        assert f"{importer} -> {module}" in broken.stdout, (importer, module, broken.stdout)
