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
