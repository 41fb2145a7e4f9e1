"""``brain cancel`` on a run nobody executes any more (SPEC §4): its process was killed, or its
lease ran out. The cancel itself marks it ``cancelled``, instead of waiting for an executor that
will never come."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from support import kill_group_quietly, read_pid, running_step, wait_for, write_source

from brain._owners import local_owner_gone, new_owner
from brain.results import RunStatus, StepStatus, TriggerData
from brain.store import Store
from brain.store.urls import MEMORY_URL

LONG = """
    from brain import shell, workflow

    @workflow
    def longrun():
        shell("before", command="echo start; sleep 1")
        shell("wait", command="echo $$ > step.pid; sleep 60", timeout_seconds=120)
        shell("after", command="echo done")
"""


def brain(brain_cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*brain_cmd, *args], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=60, check=False)


@pytest.mark.parametrize("reaped", [False, True], ids=["zombie", "reaped"])
def test_cancel_a_run_whose_process_was_killed(tmp_path: Path, brain_cmd: list[str],
                                               reaped: bool) -> None:
    flow = write_source(tmp_path, "long.py", LONG)
    said = tmp_path / "run.stderr"
    with said.open("wb") as err:
        proc = subprocess.Popen([*brain_cmd, "run", str(flow)], env=os.environ.copy(),
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err)
    pgid = None
    try:
        # The step that runs first ("before", slowed down here as a busy machine slows it)
        # is running for a while too: wait for the one the cancel is about, however long
        # the steps before it take.
        run_id, _ = wait_for(lambda: _running(tmp_path / "brain.db", "wait", proc, said), 60,
                             "the step 'wait' to run")
        pgid = read_pid(tmp_path / "step.pid", 60)
        os.kill(proc.pid, signal.SIGKILL)
        if reaped:
            proc.wait(10)
        else:  # killed but not yet reaped by its parent (this test): a zombie counts as dead
            wait_for(lambda: _state(proc.pid) == "Z", 30, "the killed process to be a zombie")

        cancel = brain(brain_cmd, "cancel", run_id[:12])
        assert cancel.returncode == 0, cancel.stderr
        assert f"run {run_id} cancelled" in cancel.stderr
        assert "stops within a second" not in cancel.stderr

        shown = json.loads(brain(brain_cmd, "show", run_id, "--json").stdout)
        assert shown["status"] == "cancelled"
        assert shown["ended_at"] is not None
        assert {s["name"]: s["status"] for s in shown["steps"]} == {
            "before": "succeeded", "wait": "cancelled", "after": "cancelled"}

        again = brain(brain_cmd, "cancel", run_id)
        assert again.returncode == 1
        assert "already ended (cancelled)" in again.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if pgid is not None:
            kill_group_quietly(pgid)  # the step's own group outlives a kill -9 of brain run


def _running(db_file: Path, step: str, proc: subprocess.Popen[bytes],
             said: Path) -> tuple[str, str] | None:
    """``(run id, step)`` once ``step`` is the running step of a running run, else ``None``;
    fails at once, with what ``brain run`` said, if it exited first."""
    found = running_step(db_file)
    if found is not None and found[1] == step:
        return found
    if proc.poll() is not None:
        raise AssertionError(f"brain run exited {proc.returncode} before step {step!r} ran: "
                             f"{said.read_text(errors='replace')}")
    return None


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[0]


def test_local_owner_gone() -> None:
    host = new_owner().split(":")[0]
    assert local_owner_gone(f"{host}:{os.getpid()}:abc") is False  # this process
    assert local_owner_gone(f"{host}:{os.getppid()}:abc") is False  # alive
    child = subprocess.Popen(["true"])
    child.wait()
    assert local_owner_gone(f"{host}:{child.pid}:abc") is True  # exited and reaped
    zombie = subprocess.Popen(["true"])
    wait_for(lambda: _state(zombie.pid) == "Z", 30, "a zombie")
    try:
        assert local_owner_gone(f"{host}:{zombie.pid}:abc") is True
    finally:
        zombie.wait()
    # Another machine's process, or an id of another form, cannot be judged from here.
    assert local_owner_gone(f"other-{host}:{child.pid}:abc") is False
    for odd in (None, "", "nonsense", f"{host}:x:abc", f"{host}:0:abc", f"{host}:1"):
        assert local_owner_gone(odd) is False


async def _make_run(store: Store, owner: str, lease_seconds: float) -> str:
    run_id = uuid.uuid4().hex
    await store.create_run(run_id=run_id, workflow="wf", definition_hash="h",
                           trigger=TriggerData(event="manual", body=""),
                           step_rows=[("a", "shell"), ("b", "shell")], owner=owner,
                           lease_seconds=lease_seconds)
    return run_id


@pytest.mark.parametrize("kind", ["sqlite", "sqlite-memory"])
def test_request_cancel_judges_whether_anyone_executes_the_run(kind: str, db_url: str) -> None:
    host = new_owner().split(":")[0]
    dead = subprocess.Popen(["true"])
    dead.wait()

    async def body() -> None:
        async with Store(db_url if kind == "sqlite" else MEMORY_URL) as store:
            # Cancelled at once: a dead local owner (lease still valid), an expired lease
            # of another machine.
            for owner, lease in ((f"{host}:{dead.pid}:a", 60.0), (f"elsewhere:{dead.pid}:b", -1.0)):
                run_id = await _make_run(store, owner, lease)
                await store.step_running(run_id, "a", inputs={}, tries=1,
                                         started_at=(await store.get_run(run_id)).created_at)
                result, active = await store.request_cancel(run_id)
                assert active is True
                assert result.status == RunStatus.CANCELLED, owner
                got = await store.get_run(run_id)
                assert {s.status for s in got.steps.values()} == {StepStatus.CANCELLED}
                row = await store.run_row(run_id)
                assert row is not None and row.lease_owner is None and row.ended_at is not None
                # No executor can take it back afterwards.
                assert await store.claim_run(run_id, "new:1:c", 60) is False

            # Left to their executor: a live local owner, a live lease on another machine.
            for owner in (f"{host}:{os.getpid()}:c", f"elsewhere:{dead.pid}:d"):
                run_id = await _make_run(store, owner, 60.0)
                result, active = await store.request_cancel(run_id)
                assert active is True
                assert result.status == RunStatus.RUNNING, owner
                assert await store.heartbeat(run_id, owner, None) == (True, True)
                got = await store.get_run(run_id)
                assert {s.status for s in got.steps.values()} == {StepStatus.PENDING}

    asyncio.run(body())
