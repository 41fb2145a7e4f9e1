"""The root warning (SPEC §11): ``serve``, ``worker`` and ``run`` started as root warn once,
in one line, at start-up; a serving process warns once however often it reloads its files;
no other command warns (``runs``, ``show``, ``logs``, ``check``...).

Each command is a real subprocess that takes itself for root (its effective uid is all the
warning depends on), so the test means the same whichever user runs it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from serve_support import BrainServer, clean_env
from support import wait_for, write_source

WARNING = "running as root"
#: ``brain ARGS`` as root: the process's effective uid is 0 whatever the test's user.
AS_ROOT = [sys.executable, "-c", "import os, sys; os.geteuid = lambda: 0; "
                                 "from brain.cli import main; main(sys.argv[1:])"]
FLOWS = """
    from brain import shell, workflow

    @workflow
    def hello():
        shell("hi", argv=["echo", "hi"])
"""


def as_root(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AS_ROOT, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)


def test_only_run_warns_of_the_commands_that_end(tmp_path: Path) -> None:
    flows = write_source(tmp_path, "flows.py", FLOWS)
    env = clean_env(tmp_path / "brain.db")
    run = as_root("run", str(flows), "--json", env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count(WARNING) == 1 and WARNING not in run.stdout
    run_id = run.stdout.split('"run_id": "', 1)[1][:12]
    quiet = [["runs"], ["runs", "--json"], ["show", run_id], ["logs", run_id], ["workers"],
             ["check", str(flows)], ["graph", str(flows)], ["db", "upgrade"],
             ["prune", "--older-than", "1d", "--dry-run"], ["prune", "--older-than", "1d"],
             ["signal", "go"], ["cancel", run_id], ["retry", run_id],
             ["approve", run_id, "hi"], ["--version"]]
    for args in quiet:
        proc = as_root(*args, env=env, cwd=tmp_path)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        assert WARNING not in proc.stdout + proc.stderr, (args, proc.stderr)


def _count_when(output: Callable[[], str], marker: str, times: int) -> int:
    """Wait (bounded) until ``marker`` appears ``times`` times in ``output()``; then how
    often the root warning appears there."""
    wait_for(lambda: output().count(marker) >= times, 60, f"{times} x {marker!r}")
    return int(output().count(WARNING))


@pytest.mark.usefixtures("collect_garbage_first")
def test_a_serving_process_warns_once_however_often_it_reloads(tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    flows = write_source(folder, "flows.py", FLOWS)
    env = clean_env(tmp_path / "serve.db")
    with BrainServer(AS_ROOT, folder, tmp_path, env, extra_args=["--reload"]) as server:
        server.wait_healthy()
        for n in (1, 2):
            # A longer file each time: the reloader sees it (size and mtime are polled).
            flows.write_text(flows.read_text() + f"\n# edit {n}\n")
            assert _count_when(server.output, "reloaded", n) == 1, server.output()

    worker_log = tmp_path / "worker.log"
    with worker_log.open("wb") as out:
        worker = subprocess.Popen([*AS_ROOT, "worker", str(folder)],
                                  env=clean_env(tmp_path / "worker.db"), stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        assert _count_when(worker_log.read_text, "The Brain worker", 1) == 1, \
            worker_log.read_text()
    finally:
        worker.terminate()
        worker.wait(30)
    assert worker_log.read_text().count(WARNING) == 1
