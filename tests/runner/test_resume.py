"""Crash and resume: a `brain run` killed with SIGKILL is finished by `resume_run` once its lease
expires, without re-running the steps that already succeeded."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import kill_group_quietly, resume_once_expired, running_step, wait_for, write_source

from brain.loader import load_file
from brain.results import RunStatus, StepStatus, TriggerData
from brain.runner import WORKFLOW_CHANGED, resume_run
from brain.store import Store

# Spawns subprocesses in-process: finalise earlier tests' leftovers first (see the conftest).
pytestmark = pytest.mark.usefixtures("collect_garbage_first")

CRASHY = """
    from brain import shell, workflow

    @workflow
    def crashy():
        shell("count", command="echo run >> counter.txt; echo counted")
        shell("slow", timeout_seconds=300,
              command="if [ ! -e marker ]; then echo $$ > slow.pid; touch marker; sleep 60; fi; "
                      "echo slow-done")
        shell("last", command="echo ran >> last.txt; echo last-done")
"""


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def kill_group_from(pid_file: Path) -> None:
    """End the orphaned step process (it runs in its own process group)."""
    if pid_file.exists() and pid_file.read_text().strip():
        kill_group_quietly(int(pid_file.read_text()))


def test_killed_run_is_resumed_without_rerunning_finished_steps(
        tmp_path: Path, db_url: str, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "crashy.py", CRASHY)
    env = {**os.environ, "BRAIN_LEASE_SECONDS": "2"}
    proc = subprocess.Popen([*brain_cmd, "run", str(flow)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (tmp_path / "marker").exists() and (tmp_path / "slow.pid").exists()
                 and (tmp_path / "slow.pid").read_text().strip(), 30, "step 'slow' to start")
        run_id, step = wait_for(lambda: running_step(tmp_path / "brain.db"), 30, "a running step")
        assert step == "slow"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL

        wf = load_file(flow)["crashy"]

        async def resume() -> tuple[object, object]:
            async with Store(db_url) as store:
                before = await store.get_run(run_id)
                result = await resume_once_expired(wf, store, run_id)
                row = await store.run_row(run_id)
                return before, (result, row)

        before, (result, row) = asyncio.run(resume())
        # the crash left the run running, step 1 done and step 2 started
        assert before.status == RunStatus.RUNNING
        assert {n: s.status for n, s in before.steps.items()} == {
            "count": StepStatus.SUCCEEDED, "slow": StepStatus.RUNNING, "last": StepStatus.PENDING}

        assert result is not None, "the run was never resumed after its lease expired"
        assert result.status == RunStatus.SUCCEEDED, result.error
        assert result.error is None
        assert {n: s.status for n, s in result.steps.items()} == {
            "count": StepStatus.SUCCEEDED, "slow": StepStatus.SUCCEEDED, "last": StepStatus.SUCCEEDED}
        # step 1 kept its stored result and did not run again; steps 2 and 3 ran
        assert lines(tmp_path / "counter.txt") == ["run"]
        assert result.steps["count"].output == "counted"
        assert result.steps["count"].tries == 1
        assert result.steps["slow"].output == "slow-done"
        assert result.steps["slow"].tries == 2
        assert result.steps["last"].output == "last-done"
        assert lines(tmp_path / "last.txt") == ["ran"]
        assert result.ended_at is not None
        assert row.lease_owner is None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_group_from(tmp_path / "slow.pid")


SIMPLE = """
    from brain import shell, workflow

    @workflow
    def simple():
        shell("mark", command="echo x >> ran.txt; echo marked")
        shell("done", command="echo WORD")
"""


def simple_flow(folder: Path, word: str = "one") -> Path:
    return write_source(folder, "simple.py", SIMPLE.replace("WORD", word))


async def _dead_run(store: Store, wf, *, lease_seconds: float) -> str:  # type: ignore[no-untyped-def]
    """A run recorded as running under another executor's lease, as a crash leaves it."""
    import uuid

    run_id = uuid.uuid4().hex
    await store.create_run(run_id=run_id, workflow=wf.name, definition_hash=wf.definition_hash,
                           trigger=TriggerData(), owner="elsewhere:1:dead",
                           step_rows=[(s.name, s.kind) for s in wf.spec.steps],
                           lease_seconds=lease_seconds, step_prints=wf.fingerprint.text,
                           version=wf.version)
    return run_id


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_queued_run_runs_the_workflow_as_its_executor_has_it_now(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    """Queued under one definition (before a reload or a deploy, or by a process with
    another version), never started: it runs the definition loaded when it is taken."""
    import uuid

    before = load_file(simple_flow(tmp_path, "one"))["simple"]
    write_source(tmp_path, "simple.py", SIMPLE.replace("WORD", "two").replace(
        '        shell("done"', '        shell("added", command="echo added")\n        shell("done"'))
    now = load_file(tmp_path / "simple.py")["simple"]
    assert before.definition_hash != now.definition_hash
    url = (f"sqlite:///{tmp_path / 'q.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_url"))

    async def go():  # type: ignore[no-untyped-def]
        async with Store(url) as store:
            await store.upgrade_schema()
            run_id, _ = await store.enqueue_run(
                run_id=uuid.uuid4().hex, workflow="simple",
                definition_hash=before.definition_hash, trigger=TriggerData(),
                step_rows=[(s.name, s.kind) for s in before.spec.steps])
            return await resume_run(now, store, run_id), await store.run_row(run_id)

    result, row = asyncio.run(go())
    assert result is not None and result.status == RunStatus.SUCCEEDED, result
    assert list(result.steps) == ["mark", "added", "done"]
    assert result.steps["done"].output == "two"
    assert row.definition_hash == now.definition_hash


async def _dead_run_past(store: Store, wf, step: str) -> str:  # type: ignore[no-untyped-def]
    """A dead run (its lease expired) whose ``step`` succeeded before its executor died."""
    from brain._clock import utcnow

    run_id = await _dead_run(store, wf, lease_seconds=-1)
    await store.step_finished(run_id, step, status=StepStatus.SUCCEEDED, tries=1,
                              ended_at=utcnow(), output="marked", inputs={},
                              started_at=utcnow())
    return run_id


def test_resume_fails_a_run_whose_step_that_ran_changed(tmp_path: Path, db_url: str) -> None:
    """SPEC §24: a step it already ran changed, so the run cannot go on; nothing runs."""
    original = load_file(simple_flow(tmp_path, "one"))["simple"]
    changed = load_file(write_source(tmp_path, "simple.py", SIMPLE.replace(
        "echo x >> ran.txt", "echo y >> ran.txt")))["simple"]
    assert original.definition_hash != changed.definition_hash

    async def go():  # type: ignore[no-untyped-def]
        async with Store(db_url) as store:
            run_id = await _dead_run_past(store, original, "mark")
            return await resume_run(changed, store, run_id), await store.get_run(run_id)

    result, stored = asyncio.run(go())
    assert result is not None
    assert result.status == RunStatus.FAILED
    assert result.error == f"{WORKFLOW_CHANGED}: step 'mark' (command changed)"
    assert WORKFLOW_CHANGED == "workflow changed since the run started"
    assert stored.status == RunStatus.FAILED and stored.error == result.error
    assert stored.steps["done"].status == StepStatus.SKIPPED
    assert stored.ended_at is not None
    assert not (tmp_path / "ran.txt").exists()  # no step of the new definition ran


def test_resume_goes_on_with_the_new_definition_when_what_ran_is_unchanged(
        tmp_path: Path, db_url: str) -> None:
    original = load_file(simple_flow(tmp_path, "one"))["simple"]
    changed = load_file(simple_flow(tmp_path, "two"))["simple"]

    async def go():  # type: ignore[no-untyped-def]
        async with Store(db_url) as store:
            run_id = await _dead_run_past(store, original, "mark")
            return await resume_run(changed, store, run_id), await store.run_row(run_id)

    result, row = asyncio.run(go())
    assert result is not None and result.status == RunStatus.SUCCEEDED, result
    assert result.steps["mark"].output == "marked"  # kept: not run again
    assert result.steps["done"].output == "two"  # the new code
    assert not (tmp_path / "ran.txt").exists()
    assert row.definition_hash == changed.definition_hash
    assert row.step_prints == changed.fingerprint.text
    assert (row.version, row.continued_on) == (original.version, (changed.version,))


def test_a_run_recorded_before_fingerprints_were_kept_fails_on_any_change(
        tmp_path: Path, db_url: str) -> None:
    original = load_file(simple_flow(tmp_path, "one"))["simple"]
    changed = load_file(simple_flow(tmp_path, "two"))["simple"]

    async def go():  # type: ignore[no-untyped-def]
        import uuid

        async with Store(db_url) as store:
            run_id = uuid.uuid4().hex
            await store.create_run(run_id=run_id, workflow="simple",
                                   definition_hash=original.definition_hash,
                                   trigger=TriggerData(), owner="elsewhere:1:dead",
                                   step_rows=[(s.name, s.kind) for s in original.spec.steps],
                                   lease_seconds=-1)
            return await resume_run(changed, store, run_id)

    result = asyncio.run(go())
    assert result is not None and result.error == WORKFLOW_CHANGED


def test_resume_leaves_a_run_with_a_live_lease_alone(tmp_path: Path, db_url: str) -> None:
    wf = load_file(simple_flow(tmp_path))["simple"]

    async def go():  # type: ignore[no-untyped-def]
        async with Store(db_url) as store:
            run_id = await _dead_run(store, wf, lease_seconds=300)
            result = await resume_run(wf, store, run_id[:12])
            return result, await store.get_run(run_id), await store.run_row(run_id)

    result, stored, row = asyncio.run(go())
    assert result is None
    assert stored.status == RunStatus.RUNNING
    assert row.lease_owner == "elsewhere:1:dead"
    assert {s.status for s in stored.steps.values()} == {StepStatus.PENDING}
    assert not (tmp_path / "ran.txt").exists()


@pytest.mark.parametrize("fail", [False, True], ids=["succeeded", "failed"])
def test_resume_of_a_finished_run_returns_none(tmp_path: Path, db_url: str, fail: bool) -> None:
    flow = simple_flow(tmp_path, "one; exit 4" if fail else "one")
    wf = load_file(flow)["simple"]

    async def go():  # type: ignore[no-untyped-def]
        async with Store(db_url) as store:
            first = await wf.arun(store=store)
            again = await resume_run(wf, store, first.run_id)
            return first, again, await store.get_run(first.run_id)

    first, again, stored = asyncio.run(go())
    assert first.status == (RunStatus.FAILED if fail else RunStatus.SUCCEEDED)
    assert again is None
    assert stored.status == first.status
    assert stored.ended_at == first.ended_at
    assert lines(tmp_path / "ran.txt") == ["x"]  # nothing ran a second time


def test_a_run_with_a_step_begun_keeps_its_definition(tmp_path: Path) -> None:
    """The store re-stamps a taken run only while none of its steps has begun."""
    import uuid

    async def go() -> tuple[bool, str]:
        async with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
            run_id = uuid.uuid4().hex
            await store.create_run(run_id=run_id, workflow="w", definition_hash="old",
                                   trigger=TriggerData(), owner="me:1:x",
                                   step_rows=[("a", "shell"), ("b", "shell")])
            await store.steps_ended(run_id, ["a"], StepStatus.SKIPPED, owner="me:1:x")
            done = await store.restamp_run(run_id, "new", [("c", "shell")], owner="me:1:x")
            row = await store.run_row(run_id)
            return done, row.definition_hash

    assert asyncio.run(go()) == (False, "old")


THREE = """
    from brain import shell, workflow

    @workflow
    def three():
        shell("a", command="echo a")
        shell("b", command="echo b")
        shell("c", command="echo c")
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_resume_ends_the_groups_recorded_on_this_machine_and_only_those(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    """Leftover processes are found by the process group and start time recorded for their
    step, not by their environment: these have none (no ``BRAIN_RUN_ID``). A group whose
    leader's start time differs (its pid was given to another process since), or recorded
    on another machine, is left alone."""
    from brain._owners import this_machine
    from brain.executors.process import start_ticks
    from brain.store.base import StepProcess

    wf = load_file(write_source(tmp_path, "three.py", THREE))["three"]
    left = [subprocess.Popen(["sleep", "60"], env={}, start_new_session=True)
            for _ in range(3)]
    try:
        ticks = [start_ticks(p.pid) for p in left]
        assert None not in ticks
        recorded = [StepProcess("a", left[0].pid, ticks[0], this_machine()),
                    StepProcess("b", left[1].pid, ticks[1] - 1, this_machine()),  # not it
                    StepProcess("c", left[2].pid, ticks[2], "elsewhere+0000")]
        url = (f"sqlite:///{tmp_path / 'r.db'}" if backend != "postgresql"
               else request.getfixturevalue("pg_url"))

        async def go() -> Any:
            async with Store(url) as store:
                if backend == "postgresql":
                    await store.upgrade_schema()
                run_id = await _dead_run(store, wf, lease_seconds=-1)  # lease expired
                for process in recorded:
                    await store.step_process(run_id, process, owner="elsewhere:1:dead")
                found = await store.step_processes(run_id)
                assert sorted(found, key=lambda p: p.step) == recorded
                return await resume_run(wf, store, run_id)

        result = asyncio.run(go())
        assert result is not None and result.status == RunStatus.SUCCEEDED, result
        assert left[0].wait(timeout=10) == -signal.SIGKILL
        assert left[1].poll() is None, "a process whose start time differs was killed"
        assert left[2].poll() is None, "a process recorded on another machine was killed"
    finally:
        for proc in left:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def test_a_resume_ends_a_recorded_group_whose_leader_has_exited(tmp_path: Path) -> None:
    """The step's shell is gone, but a child it started in the background still runs in
    its group (and has dropped its environment): the group is ended all the same."""
    from brain._owners import this_machine
    from brain.executors.process import group_alive, start_ticks
    from brain.store.base import StepProcess

    wf = load_file(write_source(tmp_path, "three.py", THREE))["three"]
    leader = subprocess.Popen(["sh", "-c", "env -i sleep 60 & read line"], env={},
                              stdin=subprocess.PIPE, start_new_session=True)
    try:
        ticks = start_ticks(leader.pid)
        assert ticks is not None
        assert leader.stdin is not None
        leader.stdin.close()  # the shell exits; its background sleep lives on
        leader.wait(timeout=10)
        assert group_alive(leader.pid)

        async def go() -> Any:
            async with Store(f"sqlite:///{tmp_path / 'r.db'}") as store:
                run_id = await _dead_run(store, wf, lease_seconds=-1)
                await store.step_process(run_id, StepProcess("a", leader.pid, ticks,
                                                             this_machine()),
                                         owner="elsewhere:1:dead")
                return await resume_run(wf, store, run_id)

        result = asyncio.run(go())
        assert result is not None and result.status == RunStatus.SUCCEEDED, result
        assert not group_alive(leader.pid), "the leftover child of the step still runs"
    finally:
        signal_group_quietly(leader.pid)


def signal_group_quietly(pgid: int) -> None:
    import contextlib
    import os

    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


def test_cancelling_a_run_whose_executor_died_ends_the_steps_it_left(tmp_path: Path) -> None:
    """The cancel itself ends the run (nobody executes it any more): the process group its
    dead executor recorded, environment dropped and all, is ended too."""
    from brain._owners import this_machine
    from brain.executors.process import group_alive, start_ticks
    from brain.runner import cancel_run
    from brain.store.base import StepProcess

    wf = load_file(write_source(tmp_path, "three.py", THREE))["three"]
    left = subprocess.Popen(["sleep", "60"], env={}, start_new_session=True)
    try:
        ticks = start_ticks(left.pid)
        assert ticks is not None

        async def go() -> Any:
            async with Store(f"sqlite:///{tmp_path / 'c.db'}") as store:
                run_id = await _dead_run(store, wf, lease_seconds=-1)
                await store.step_process(run_id, StepProcess("a", left.pid, ticks, this_machine()),
                                         owner="elsewhere:1:dead")
                return await cancel_run(store, run_id)

        result, active = asyncio.run(go())
        assert active and result.status == RunStatus.CANCELLED
        assert left.wait(timeout=10) == -signal.SIGKILL
        assert not group_alive(left.pid)
    finally:
        signal_group_quietly(left.pid)
