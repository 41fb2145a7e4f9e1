"""SPEC §24 end to end: a workflow file edited while its runs wait or crash.

For each wait kind (sleep, approval, signal, child run) a service on a SQLite file starts a
run of four workflows of one file; while they wait, the file is edited (each workflow gets
one edit) and loaded again (as ``brain serve --reload`` does); then the waits end:

- ``later``: a step after the wait changed → the run goes on with the new code;
- ``ran``: the step before the wait (already run) changed → it fails at once, naming it;
- ``added``: a step added after the wait → it runs;
- ``removed``: a step after the wait removed → it does not run (its row ends skipped).

Then the same four edits under a crash: ``brain worker`` is killed with ``kill -9`` while
the runs' middle step runs, the file changes, and this process resumes them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import pytest
from support import kill_group_quietly, resume_once_expired, wait_for, write_source

from brain.loader import load_file
from brain.results import RunResult, RunStatus, StepStatus
from brain.runner import WORKFLOW_CHANGED
from brain.service import BrainService
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

SECONDS = 30.0
EDITS = ("later", "ran", "added", "removed")
WAITS = {
    "sleep": 'sleep("wait", "3s")',
    "approval": 'approval("wait", prompt="deploy?")',
    "signal": 'wait_for("wait", signal="go")',
    "child": 'held.with_options(name="wait")()',
    "crash": 'shell("wait", command="echo mid-{name} >> {log}; [ -f {go} ] || sleep 60")',
}
HEAD = '''
    from brain import approval, shell, sleep, wait_for, workflow


    @workflow
    def held():
        wait_for("hold", signal="child-go")
'''
BODY = '''

    @workflow
    def {name}():
        shell("before", command="echo before-{name}-{v_before} >> {log}")
        {wait}
        shell("after", command="echo after-{name}-{v_after} >> {log}")
        {extra}shell("last", command="echo last-{name} >> {log}")
'''


def flow_source(kind: str, log: Path, go: Path, *, edited: bool) -> str:
    """The file: the child workflow ``held`` and one workflow per edit, as first written
    or with each one's edit."""
    text = HEAD
    for name in EDITS:
        v_before = "2" if edited and name == "ran" else "1"
        v_after = "2" if edited and name == "later" else "1"
        extra = (f'shell("extra", command="echo extra-{name} >> {log}")\n        '
                 if edited and name == "added" else "")
        body = BODY.format(name=name, v_before=v_before, v_after=v_after, log=log, extra=extra,
                           wait=WAITS[kind].format(name=name, log=log, go=go))
        if edited and name == "removed":
            body = "\n".join(line for line in body.splitlines() if '"last"' not in line)
        text += body
    return text


def check_outcomes(results: dict[str, RunResult], log: Path, versions: tuple[str, str],
                   mid: list[str] | None = None) -> None:
    """Each edit's run ended as the rule says, with its log lines and versions."""
    lines = log.read_text().split()
    first, second = versions
    later, ran, added, removed = (results[n] for n in EDITS)
    assert later.status == RunStatus.SUCCEEDED, later.error
    assert "after-later-2" in lines and "after-later-1" not in lines
    assert "last-later" in lines
    assert (later.version, later.continued_on) == (first, [second])

    assert ran.status == RunStatus.FAILED
    assert ran.error == f"{WORKFLOW_CHANGED}: step 'before' (command changed)"
    assert not any(line.endswith("-ran") or "-ran-" in line for line in lines
                   if not line.startswith(("before-ran", "mid-ran")))
    assert ran.steps["after"].status == StepStatus.SKIPPED
    assert (ran.version, ran.continued_on) == (first, [])

    assert added.status == RunStatus.SUCCEEDED, added.error
    assert list(added.steps) == ["before", "wait", "after", "extra", "last"]
    assert added.steps["extra"].status == StepStatus.SUCCEEDED
    assert lines.index("after-added-1") < lines.index("extra-added") < lines.index("last-added")

    assert removed.status == RunStatus.SUCCEEDED, removed.error
    assert "last-removed" not in lines
    assert removed.steps["last"].status == StepStatus.SKIPPED
    assert removed.steps["last"].error == "removed from the workflow"
    for name in EDITS:  # every step before the wait ran once
        assert lines.count(f"before-{name}-1") == 1
    if mid is not None:
        assert sorted(line for line in lines if line.startswith("mid-")) == sorted(mid)


async def _all_ended(store: Store, ids: dict[str, str]) -> dict[str, RunResult]:
    async def ended() -> bool:
        runs = [await store.get_run(i, with_steps=False) for i in ids.values()]
        return all(r.status in (RunStatus.SUCCEEDED, RunStatus.FAILED) for r in runs)

    for _ in range(int(SECONDS / 0.1)):
        if await ended():
            break
        await asyncio.sleep(0.1)
    return {name: await store.get_run(run_id) for name, run_id in ids.items()}


async def _all_waiting(store: Store, ids: dict[str, str]) -> None:
    for _ in range(int(SECONDS / 0.05)):
        runs = [await store.get_run(i, with_steps=False) for i in ids.values()]
        if all(r.status == RunStatus.WAITING for r in runs):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the runs did not all wait: {[r.status for r in runs]}")


@pytest.mark.parametrize("kind", ["sleep", "approval", "signal", "child"])
def test_a_waiting_run_goes_on_with_the_new_code_when_what_it_ran_is_unchanged(
        tmp_path: Path, kind: str) -> None:
    log, go = tmp_path / "log", tmp_path / "go"
    path = write_source(tmp_path, "flows.py", flow_source(kind, log, go, edited=False))
    first = load_file(path)
    url = f"sqlite:///{tmp_path / 'brain.db'}"

    async def scenario() -> tuple[dict[str, RunResult], tuple[str, str]]:
        service = BrainService(first, store=Store(url), concurrency=8, triggers=False)
        await service.start()
        try:
            api = service.api
            ids = {name: (await api.start(name))[0] for name in EDITS}
            await _all_waiting(service.store, ids)
            write_source(tmp_path, "flows.py", flow_source(kind, log, go, edited=True))
            second = load_file(path)
            await service.replace_workflows(second)  # as --reload does
            if kind == "approval":
                for run_id in ids.values():
                    await api.decide(run_id, "wait", approved=True)
            elif kind == "signal":
                assert len(await api.signal("go")) == len(EDITS)
            elif kind == "child":  # (a parent waits on its child before the child waits)
                for _ in range(int(SECONDS / 0.05)):
                    held = await service.store.list_runs(workflow="held", status="waiting")
                    if len(held) == len(EDITS):
                        break
                    await asyncio.sleep(0.05)
                assert len(await api.signal("child-go")) == len(EDITS)
            results = await _all_ended(service.store, ids)
            return results, (first[EDITS[0]].version or "", second[EDITS[0]].version or "")
        finally:
            await service.stop(grace_seconds=1)

    results, versions = asyncio.run(scenario())
    assert versions[0] != versions[1]
    check_outcomes(results, log, versions)


def test_a_run_resumed_after_a_crash_goes_on_with_the_new_code_when_what_it_ran_is_unchanged(
        tmp_path: Path, brain_cmd: list[str]) -> None:
    log, go = tmp_path / "log", tmp_path / "go"
    folder = tmp_path / "flows"
    folder.mkdir()
    path = write_source(folder, "flows.py", flow_source("crash", log, go, edited=False))
    first = load_file(path)
    url = f"sqlite:///{tmp_path / 'brain.db'}"

    async def queue() -> dict[str, str]:
        async with Store(url) as store:
            from brain.service.api import BrainApi

            return {name: (await BrainApi(store).start(first[name]))[0] for name in EDITS}

    ids = asyncio.run(queue())
    env = {**os.environ, "BRAIN_DATABASE_URL": url, "BRAIN_LEASE_SECONDS": "2"}
    worker = subprocess.Popen([*brain_cmd, "worker", str(path), "--concurrency", "8"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        wait_for(lambda: log.exists() and sum(line.startswith("mid-") for line in
                                              log.read_text().split()) == len(EDITS),
                 SECONDS, "every run's middle step to run")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        kill_group_quietly(worker.pid)
    write_source(folder, "flows.py", flow_source("crash", log, go, edited=True))
    second = load_file(path)
    go.touch()  # the middle step, run again, ends at once

    async def resume() -> dict[str, RunResult]:
        async with Store(url) as store:
            for name, run_id in ids.items():
                assert await resume_once_expired(second[name], store, run_id) is not None
            return {name: await store.get_run(run_id) for name, run_id in ids.items()}

    results = asyncio.run(resume())
    versions = (first["later"].version or "", second["later"].version or "")
    # the middle step ran again where the run went on (steps are at-least-once)
    check_outcomes(results, log, versions,
                   mid=[f"mid-{n}" for n in EDITS] + [f"mid-{n}" for n in EDITS if n != "ran"])
