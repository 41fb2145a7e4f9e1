"""``parallel()`` inside ``for_each``: each instance's steps are units of the run's one
plan, siblings run together within an instance, ``max_parallel`` counts instances, and a
run killed in the middle of the block resumes without running a finished instance step
again. Real shell steps on a SQLite file; the crash is a real ``brain run`` killed with
SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import kill_group_quietly, resume_once_expired, wait_for, write_source

from brain import for_each, parallel, shell, workflow
from brain.loader import load_file
from brain.results import RunStatus, StepStatus
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

# Each sibling waits (bounded) for the other's mark: it ends well only if both ran at once.
_MEET = ('touch "{me}-$X"; i=0; while [ ! -e "{other}-$X" ] && [ $i -lt 200 ]; do '
         'sleep 0.05; i=$((i+1)); done; test -e "{other}-$X" && echo {me}')


def _meet(me: str, other: str) -> str:
    return _MEET.format(me=me, other=other)


def test_parallel_siblings_inside_an_instance_run_together_between_its_steps(
        db_url: str, tmp_path: Path) -> None:
    @workflow(name="fanpar")
    def fanpar():
        with for_each(["a", "b", "c"], max_parallel=1) as x:
            first = shell("first", argv=["echo", f"first-{x}"])
            with parallel():
                left = shell("left", command=_meet("left", "right"), cwd=str(tmp_path),
                             env={"X": f"{x}"})
                right = shell("right", command=_meet("right", "left"), cwd=str(tmp_path),
                              env={"X": f"{x}"})
            shell("join", argv=["echo", f"{first}+{left}+{right}"])
        shell("after", argv=["echo", f"{right}"])

    assert set(fanpar.graph.edges) == {("first", "left"), ("first", "right"),
                                       ("left", "join"), ("right", "join"),
                                       ("first", "join"), ("join", "after"), ("first", "after"),
                                       ("left", "after"), ("right", "after")}
    r = fanpar.run(store=db_url)
    assert r.status == RunStatus.SUCCEEDED, r.error
    assert [r.steps[f"join[{i}]"].output for i in range(3)] == [
        f"first-{x}+left+right" for x in "abc"]
    assert json.loads(r.steps["right"].output or "") == ["right"] * 3
    assert r.steps["after"].output == '["right","right","right"]'
    assert r.steps["join"].inputs == {"instances": 3}
    members = ("first", "left", "right", "join")
    assert list(r.steps) == [name for m in members for name in (m, *(f"{m}[{i}]" for i in range(3)))
                             ] + ["after"]
    steps = r.steps
    for i in range(3):
        first, left, right, join = (steps[f"{m}[{i}]"] for m in members)
        assert first.ended_at <= left.started_at and first.ended_at <= right.started_at
        assert max(left.ended_at, right.ended_at) <= join.started_at
        if i:  # max_parallel=1: an instance starts once the one before it ended
            assert steps[f"join[{i - 1}]"].ended_at <= first.started_at
    assert steps["join"].ended_at <= steps["after"].started_at


def test_a_failing_sibling_halts_the_run_and_cancels_the_other(db_url: str,
                                                               tmp_path: Path) -> None:
    @workflow(name="fanfail")
    def fanfail():
        with for_each(["a", "b"], max_parallel=2) as x:
            with parallel():
                shell("slow", timeout_seconds=60, cwd=str(tmp_path), env={"X": f"{x}"},
                      command='touch "started-$X"; sleep 30; touch finished')
                shell("bad", cwd=str(tmp_path), env={"X": f"{x}"},
                      command='while [ ! -e "started-$X" ]; do sleep 0.05; done; '
                              'test "$X" = a && exit 4; echo ok')
            shell("never", argv=["echo", "never"])

    r = fanfail.run(store=db_url)
    assert r.status == RunStatus.FAILED
    assert "'bad[0]' failed" in (r.error or "")
    assert r.steps["bad"].status == StepStatus.FAILED
    assert (r.steps["bad"].error or "").startswith("bad[0] failed: ")
    assert r.steps["slow[0]"].status == StepStatus.CANCELLED
    assert r.steps["never[0]"].status == StepStatus.SKIPPED
    assert not (tmp_path / "finished").exists()
    assert all(s.status not in (StepStatus.PENDING, StepStatus.RUNNING, StepStatus.WAITING)
               for s in r.steps.values())


def test_for_each_inside_parallel_keeps_each_instances_call_order() -> None:
    @workflow(name="blockinpar")
    def blockinpar():
        src = shell("src", argv=["echo", "s"])
        with parallel():
            shell("beside", argv=["echo", f"{src}"])
            with for_each(["a"]):
                shell("one", argv=["echo", "1"])
                shell("two", argv=["echo", "2"])
        shell("end", argv=["echo", "end"])

    assert set(blockinpar.graph.edges) == {
        ("src", "beside"), ("src", "one"), ("one", "two"),
        ("beside", "end"), ("one", "end"), ("two", "end")}


def _status(db_file: Path, step: str) -> str | None:
    """A step's stored status, read-only (the run's process may be writing)."""
    with contextlib.closing(sqlite3.connect(f"file:{db_file}?mode=ro", uri=True,
                                            timeout=5)) as conn:
        row = conn.execute("SELECT status FROM brain_steps WHERE name = ?", (step,)).fetchone()
    return row[0] if row else None


CRASHY = """
    from brain import for_each, parallel, shell, workflow

    @workflow
    def fanpar():
        with for_each(["a", "b", "c", "d"], max_parallel=2) as x:
            first = shell("first", command=f"echo {x} >> first-{x}.txt; echo first-{x}")
            with parallel():
                shell("left", command=f"echo {x} >> left-{x}.txt; echo left-{x}")
                right = shell("right", timeout_seconds=300,
                              command=f"if [ {x} = c ] && [ ! -e marker ]; then "
                                      f"echo $$ > slow.pid; touch marker; sleep 60; fi; "
                                      f"echo {x} >> right-{x}.txt; echo right-{x}")
            shell("join", command=f"echo {x} >> join-{x}.txt; echo {first}/{right}")
"""


def test_kill_9_inside_a_block_with_parallel_steps_then_resume(
        tmp_path: Path, db_url: str, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "fanpar.py", CRASHY)
    env = {**os.environ, "BRAIN_LEASE_SECONDS": "2"}
    proc = subprocess.Popen([*brain_cmd, "run", str(flow)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid_file = tmp_path / "slow.pid"
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 30,
                 "instance c to start its slow sibling")
        # c's other sibling ended and its end is written (its file alone comes before that),
        # and so did instance d (it runs beside c): a step the kill cuts runs again, once
        # more, on resume, so only right[2] may be running when it comes
        for name in ("left[2]", "join[3]"):
            wait_for(lambda name=name: _status(tmp_path / "brain.db", name) == "succeeded", 60,
                     f"the end of {name}")
        wait_for(lambda: _status(tmp_path / "brain.db", "right[2]") == "running", 60,
                 "the slow sibling's running mark")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        wf = load_file(flow)["fanpar"]

        async def resume() -> Any:
            async with Store(db_url) as store:
                run_id = (await store.list_runs(limit=1))[0].run_id
                before = await store.get_run(run_id)
                return before, await resume_once_expired(wf, store, run_id)

        before, result = asyncio.run(resume())
        assert before.status == RunStatus.RUNNING
        assert before.steps["right[2]"].status == StepStatus.RUNNING
        assert before.steps["join[2]"].status == StepStatus.PENDING
        finished_before = {n for n, s in before.steps.items()
                           if "[" in n and s.status == StepStatus.SUCCEEDED}
        assert {"first[2]", "left[2]"} <= finished_before
        assert result is not None and result.status == RunStatus.SUCCEEDED, result
        # every instance step ran to its end exactly once, however the crash split them
        for step in ("first", "left", "right", "join"):
            for x in "abcd":
                assert (tmp_path / f"{step}-{x}.txt").read_text().splitlines() == [x], (step, x)
        assert all(result.steps[n].tries == 1 for n in finished_before)
        assert result.steps["right[2]"].tries == 2
        assert json.loads(result.steps["join"].output or "") == [
            f"first-{x}/right-{x}" for x in "abcd"]
        assert all(s.status == StepStatus.SUCCEEDED for s in result.steps.values())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pid_file.exists() and pid_file.read_text().strip():
            kill_group_quietly(int(pid_file.read_text()))


def test_parallel_siblings_per_instance_on_postgresql(pg_url: str) -> None:
    """The same plan on PostgreSQL: instance rows, siblings and the block's lists."""
    import uuid

    @workflow(name=f"pgfanpar_{uuid.uuid4().hex[:8]}")
    def pgfanpar():
        with for_each(["a", "b", "c"], max_parallel=2) as x:
            with parallel():
                up = shell("up", argv=["echo", f"up-{x}"])
                down = shell("down", argv=["echo", f"down-{x}"])
            shell("both", argv=["echo", f"{up}/{down}"])

    async def go() -> Any:
        store = Store(pg_url)
        await store.upgrade_schema()
        try:
            return await pgfanpar.arun(store=store)
        finally:
            await store.close()

    r = asyncio.run(go())
    assert r.status == RunStatus.SUCCEEDED, r.error
    assert json.loads(r.steps["both"].output or "") == [f"up-{x}/down-{x}" for x in "abc"]
    for i in range(3):
        assert max(r.steps[f"up[{i}]"].ended_at, r.steps[f"down[{i}]"].ended_at) \
            <= r.steps[f"both[{i}]"].started_at
