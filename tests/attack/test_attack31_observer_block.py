"""Attack (issue 31): a user-supplied observer that blocks never breaks or loses a run.

An observer given to ``wf.run(observers=[...])`` is called synchronously on the run's event
loop. One that blocks longer than the lease stalls the whole execution; when a serving
process shares the database it takes the run over (its lease ran out). The run itself
ends well over there — but the in-process call that the user is waiting on returns at once
with the run still ``running``, as if that were its result.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from support import write_source

from brain.loader import load_file
from brain.runner.observe import RunObserver

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOW = """
from pathlib import Path
from brain import shell, workflow
here = Path(__file__).parent

@workflow(name="obsblock")
def obsblock():
    shell("a", command=f"echo start $$ >> {here}/a.txt; sleep 3; echo end $$ >> {here}/a.txt; echo a")
    shell("b", command=f"echo b >> {here}/b.txt; echo b")
"""


class BlocksUntilTakenOver(RunObserver):
    """Blocks the loop (as a slow synchronous call would) in ``run_started`` until another
    process has run step ``a`` (bounded)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker
        self.blocked = 0

    def run_started(self, run: object) -> None:
        if self.blocked:
            return
        self.blocked += 1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "start" not in (
                self.marker.read_text() if self.marker.exists() else ""):
            time.sleep(0.1)


def test_a_blocking_observer_does_not_make_wf_run_return_a_running_run(
        tmp_path: Path, db_url: str, brain_cmd: list[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    path = write_source(flows, "obsblock.py", FLOW)
    env = {**os.environ, "BRAIN_DATABASE_URL": db_url, "BRAIN_LEASE_SECONDS": "1"}
    worker = subprocess.Popen([*brain_cmd, "worker", str(flows)], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)  # the worker is up
        monkeypatch.setenv("BRAIN_LEASE_SECONDS", "1")
        wf = load_file(path)["obsblock"]
        observer = BlocksUntilTakenOver(flows / "a.txt")
        result = wf.run(store=db_url, observers=[observer])
        assert observer.blocked == 1
        assert (flows / "a.txt").exists(), "the worker never took the run over"
        # What a caller of wf.run relies on: the run's end, not a snapshot mid-way.
        assert result.status == "succeeded", (result.status, {
            n: str(s.status) for n, s in result.steps.items()})
    finally:
        worker.terminate()
        worker.wait(timeout=30)
