"""A step's program waits at a gate until its process group is recorded (SPEC §4).

An executor that froze or died between starting a step's process and recording its
group would leave a process nobody can find (a step may drop ``BRAIN_RUN_ID`` with
``env -i``), and a resume would run the step beside it. So the program runs only once
the runner has recorded the group; if the record fails (the lease is lost), it never runs.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from brain import StepFailed, mcp_tool, shell, workflow
from brain._errors import LeaseLost
from brain.executors.base import ProcessGroup, StepContext
from brain.executors.mcp import McpExecutor
from brain.executors.process import still_runs
from brain.executors.shell import ShellExecutor

TOOLS = str(Path(__file__).resolve().parent.parent / "mcp_servers" / "tools_server.py")


def _spec(tmp_path: Path, kind: str) -> object:
    marker = tmp_path / "RAN"

    @workflow(name=f"gate-{kind}")
    def gate():
        if kind == "shell":
            shell("s", command=f"exec env -i /bin/sh -c 'touch {marker}; echo ran'")
        else:
            mcp_tool("s", server_command=["/bin/sh", "-c", f"touch {marker}; exec \"$0\" \"$1\"",
                                          sys.executable, TOOLS], tool="echo",
                     args={"text": "hi"})

    return gate.spec.steps[0]


@pytest.mark.parametrize("kind", ["shell", "mcp_tool"])
def test_the_program_runs_only_once_its_group_is_recorded(tmp_path: Path, kind: str) -> None:
    spec = _spec(tmp_path, kind)
    executor = ShellExecutor() if kind == "shell" else McpExecutor()
    marker = tmp_path / "RAN"

    async def go() -> tuple[str | None, bool, ProcessGroup]:
        release, asked = asyncio.Event(), asyncio.Event()
        seen: list[ProcessGroup] = []

        async def record(group: ProcessGroup) -> None:
            seen.append(group)
            asked.set()
            await release.wait()  # the store is slow to commit

        ctx = StepContext(workflow_dir=str(tmp_path), on_process=record)
        prepared = executor.prepare(spec, lambda text, quote: text)  # type: ignore[arg-type]
        task = asyncio.ensure_future(executor.execute(spec, prepared, ctx))  # type: ignore[arg-type]
        await asked.wait()
        await asyncio.sleep(0.5)  # time enough for a program that was not held to run
        ran_before = marker.exists()
        alive = still_runs(seen[0])
        release.set()
        output = await task
        return output.output, ran_before or not alive, seen[0]

    output, ran_too_early, group = asyncio.run(go())
    assert not ran_too_early, "the program ran (or was gone) before its group was recorded"
    assert marker.exists()
    assert output == ("ran" if kind == "shell" else "hi")
    assert group.pgid > 1 and group.started > 0


@pytest.mark.parametrize("kind", ["shell", "mcp_tool"])
def test_a_record_refused_for_a_lost_lease_means_the_program_never_runs(
        tmp_path: Path, kind: str) -> None:
    spec = _spec(tmp_path, kind)
    executor = ShellExecutor() if kind == "shell" else McpExecutor()

    async def go() -> BaseException | None:
        async def record(group: ProcessGroup) -> None:
            raise LeaseLost("this executor no longer holds the run's lease")

        ctx = StepContext(workflow_dir=str(tmp_path), on_process=record)
        prepared = executor.prepare(spec, lambda text, quote: text)  # type: ignore[arg-type]
        try:
            await asyncio.wait_for(executor.execute(spec, prepared, ctx), 60)  # type: ignore[arg-type]
        except (LeaseLost, StepFailed) as exc:
            return exc
        return None

    raised = asyncio.run(go())
    assert raised is not None
    if kind == "shell":
        assert isinstance(raised, LeaseLost)
    assert not (tmp_path / "RAN").exists(), "the program ran although its record failed"
