"""Attack (issue 31): ``for_each`` with ``parallel()`` inside, max_parallel instances at once,
a ``brain worker`` killed with SIGKILL in the middle, another started: the run ends once,
with lists in item order, no instance step that succeeded runs again, and no more than
``max_parallel`` instances ever run at once (counted from the steps' own marks)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import write_source

from brain.loader import load_file
from brain.results import TriggerData
from brain.runner.queueing import enqueue, new_run
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOW = r'''
from pathlib import Path
from brain import for_each, parallel, shell, workflow
LOG = Path(__file__).parent / "marks.log"

def body(tag, pause):
    return (f'echo "begin $(date +%s.%N) {tag}-$X $$" >> {LOG}; sleep {pause}; '
            f'echo "end $(date +%s.%N) {tag}-$X $$" >> {LOG}; echo {tag}-$X')

@workflow(name="fancrash")
def fancrash():
    with for_each(["i0", "i1", "i2", "i3", "i4", "i5"], max_parallel=2) as x:
        first = shell("first", command=body("first", 0.4), env={"X": f"{x}"})
        with parallel():
            left = shell("left", command=body("left", 0.6), env={"X": f"{x}"})
            right = shell("right", command=body("right", 0.3), env={"X": f"{x}"})
        shell("join", argv=["echo", f"{first}/{left}/{right}"])
    shell("after", argv=["echo", f"{left}"])
'''


def _marks(log: Path) -> list[tuple[str, float, str, str]]:
    rows = []
    for line in log.read_text().splitlines():
        kind, ts, tag, pid = line.split()
        rows.append((kind, float(ts), tag, pid))
    return rows


@pytest.mark.parametrize("kill_after", [1.3, 2.2, 3.1])
def test_worker_killed_mid_block_then_another(kill_after: float, tmp_path: Path,
                                              db_url: str, brain_cmd: list[str]) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    path = write_source(flows, "fancrash.py", FLOW)
    wf = load_file(path)["fancrash"]

    async def queue() -> str:
        async with Store(db_url) as store:
            run_id, _ = await enqueue(store, new_run(wf, TriggerData(event="manual")),
                                      trigger_key="manual", max_queued=10)
            assert run_id is not None
            return run_id

    run_id = asyncio.run(queue())
    env = {**os.environ, "BRAIN_DATABASE_URL": db_url, "BRAIN_LEASE_SECONDS": "2"}
    first = subprocess.Popen([*brain_cmd, "worker", str(flows)], env=env, cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = flows / "marks.log"
    deadline = time.monotonic() + 60
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(kill_after)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)

    async def before() -> dict[str, tuple[str, int]]:
        async with Store(db_url) as store:
            run = await store.get_run(run_id)
            return {n: (str(s.status), s.tries) for n, s in run.steps.items()}
    done_before = {n for n, (status, _) in asyncio.run(before()).items()
                   if status == "succeeded"}
    second = subprocess.Popen([*brain_cmd, "worker", str(flows)], env=env, cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async def ended() -> object:
            async with Store(db_url) as store:
                for _ in range(600):
                    run = await store.get_run(run_id)
                    if run.status in ("succeeded", "failed", "cancelled"):
                        return run
                    await asyncio.sleep(0.1)
            raise AssertionError("the run never ended")
        run = asyncio.run(ended())
    finally:
        second.terminate()
        second.wait(timeout=30)
    assert run.status == "succeeded", run.error  # type: ignore[attr-defined]
    steps = run.steps  # type: ignore[attr-defined]
    # lists in item order
    assert json.loads(steps["join"].output) == [
        f"first-i{i}/left-i{i}/right-i{i}" for i in range(6)]
    assert json.loads(steps["after"].output) == json.loads(steps["left"].output)
    marks = _marks(log)
    # a step that had succeeded before the crash never began again
    for name in done_before:
        if "[" not in name or name.startswith("join["):
            continue
        base, index = name.rstrip("]").split("[")
        begins = [m for m in marks if m[0] == "begin" and m[2] == f"{base}-i{index}"]
        assert len(begins) == 1, (name, begins)
        assert steps[name].tries == 1
    # at most max_parallel instances at once, and one step never twice at once
    spans: dict[str, list[tuple[float, float, str]]] = {}
    starts = {(m[2], m[3]): m[1] for m in marks if m[0] == "begin"}
    for kind, ts, tag, pid in marks:
        if kind == "end":
            spans.setdefault(tag, []).append((starts[(tag, pid)], ts, tag))
    for tag, tries in spans.items():
        # a try may be repeated (its success not recorded before the kill) but never overlap
        ordered = sorted(tries)
        for (_, end1, _), (begin2, _, _) in itertools.pairwise(ordered):
            assert end1 <= begin2, (tag, tries)
    # distinct instances with a step running, at each moment
    events = sorted([(b, 1, tag.split("-")[1]) for t in spans.values() for b, _, tag in t]
                    + [(e, -1, tag.split("-")[1]) for t in spans.values() for _, e, tag in t],
                    key=lambda p: (p[0], p[1]))
    running: dict[str, int] = {}
    peak = 0
    for _, delta, inst in events:
        running[inst] = running.get(inst, 0) + delta
        peak = max(peak, sum(1 for n in running.values() if n > 0))
    assert peak <= 2, spans
