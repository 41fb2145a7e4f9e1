"""Attack (issue 31): ``brain.testing.run_workflow`` leaves nothing behind (no files, and no
threads or descriptors that grow with the runs), and two tests' in-memory stores never see
each other's runs.

What the process keeps on purpose, once, is measured after a first run and must not grow:
the main thread's event loop (its epoll and self-pipe socketpair, ``brain._sync``, closed at
exit) and the idle ``brain-step`` threads of sync ``@step`` functions
(``brain.executors.threads``, gone after a minute idle). Each check runs in a fresh
interpreter so that nothing an earlier test left counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_PROBE = r"""
import json, os, sys, threading, gc, time
from brain import shell, step, workflow
from brain.testing import run_workflow

def fds():
    out = {}
    for f in os.listdir("/proc/self/fd"):
        try:
            out[f] = os.readlink(f"/proc/self/fd/{f}")
        except OSError:
            pass
    return out

@step
def real() -> str:
    return "r"

@workflow(name="leftovers")
def leftovers():
    a = shell("a", argv=["echo", "a"])
    if sys.argv[1] == "real_step":
        real()

import brain.store, brain.executors  # imports are not what is measured
r = run_workflow(leftovers, mocks={"a": "A"})  # what the process keeps once
assert r.succeeded, r.error
gc.collect(); time.sleep(0.2)
threads0, fds0 = threading.active_count(), fds()
for _ in range(20):
    r = run_workflow(leftovers, mocks={"a": "A"})
    assert r.succeeded, r.error
gc.collect(); time.sleep(0.2)
print(json.dumps({"threads": ["thread"] * max(0, threading.active_count() - threads0),
                  "fds": sorted(v for k, v in fds().items() if k not in fds0),
                  "files": sorted(os.listdir("."))}))
"""


def _probe(tmp_path: Path, mode: str) -> dict[str, list[str]]:
    work = tmp_path / mode
    work.mkdir()
    script = tmp_path / "probe.py"
    script.write_text(_PROBE)
    env = {**os.environ, "PYTHONPATH": os.getcwd(),
           "BRAIN_DATABASE_URL": f"sqlite+aiosqlite:///{work / 'must-not-exist.db'}"}
    done = subprocess.run([sys.executable, str(script), mode], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    found["files"] = [f for f in found["files"] if f != "probe.py"]
    return found


def test_run_workflow_leaves_no_file(tmp_path: Path) -> None:
    assert _probe(tmp_path, "mocked")["files"] == []


def test_run_workflow_leaves_no_socket_or_descriptor(tmp_path: Path) -> None:
    assert _probe(tmp_path, "mocked")["fds"] == []


def test_run_workflow_with_a_real_step_leaves_no_thread(tmp_path: Path) -> None:
    assert _probe(tmp_path, "real_step")["threads"] == []


def test_two_in_memory_stores_never_see_each_others_runs() -> None:
    import threading

    from brain import shell, workflow
    from brain.testing import run_workflow

    @workflow(name="isolated")
    def isolated():
        shell("a", argv=["echo", "{previous.a}"])

    first = run_workflow(isolated, mocks={"a": "from-first"})
    second = run_workflow(isolated, mocks={"a": lambda call: call.inputs["argv"][-1]})
    assert first.succeeded and second.succeeded
    assert second.steps["a"].output == ""  # no {previous.a}: the first run is not there
    seen: dict[int, str | None] = {}

    def one(i: int) -> None:
        r = run_workflow(isolated, mocks={"a": lambda call, i=i: f"{i}:{call.inputs['argv'][-1]}"})
        seen[i] = r.steps["a"].output

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {i: f"{i}:" for i in range(6)}
