"""Shared by the issue-33 attack tests (SPEC §24): one workflow file per edit, each run to
a signal wait after its ``@step`` ran, the file edited and loaded again (as ``brain serve
--reload`` does), the signal sent, and every run's end collected."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

from brain.loader import load_file
from brain.results import RunResult, RunStatus
from brain.service import BrainService
from brain.store import Store

SECONDS = 30.0

HEAD = """\
import dataclasses
import functools

from brain import shell, step, wait_for, workflow

"""

FLOW = """

@workflow
def flow_{key}():
    n = shell("n", command="echo 21")
    out = s(n)
    wait_for("wait", signal="go")
    shell("after", command=f"echo after-{key} {{out}} >> {log}")
"""


def source(key: str, body: str, log: Path) -> str:
    """A workflow file: ``body`` (which defines the ``@step`` ``s(n)``) and ``flow_KEY``."""
    return HEAD + textwrap.dedent(body).strip() + "\n" + FLOW.format(key=key, log=log)


def run_edits(tmp_path: Path, edits: dict[str, tuple[str, str]]) -> dict[str, RunResult]:
    """Start ``flow_KEY`` of each edit's first text, let every run wait, write each file's
    second text, reload, send the signal: each run's result by key."""
    log = tmp_path / "log"
    paths = {}
    for key, (before, _) in edits.items():
        folder = tmp_path / key
        folder.mkdir()
        paths[key] = folder / f"flows_{key}.py"
        paths[key].write_text(source(key, before, log))
    first = {}
    for path in paths.values():
        first.update(load_file(path))
    url = f"sqlite:///{tmp_path / 'brain.db'}"

    async def scenario() -> dict[str, RunResult]:
        service = BrainService(first, store=Store(url), concurrency=16, triggers=False)
        await service.start()
        try:
            api = service.api
            ids = {key: (await api.start(f"flow_{key}"))[0] for key in edits}
            for _ in range(int(SECONDS / 0.05)):
                runs = [await service.store.get_run(i, with_steps=False) for i in ids.values()]
                if all(r.status != RunStatus.RUNNING and r.status != RunStatus.QUEUED
                       for r in runs):
                    break
                await asyncio.sleep(0.05)
            for key, (_, after) in edits.items():
                paths[key].write_text(source(key, after, log))
            second = {}
            for path in paths.values():
                second.update(load_file(path))
            await service.replace_workflows(second)
            await api.signal("go")
            for _ in range(int(SECONDS / 0.05)):
                runs = [await service.store.get_run(i, with_steps=False) for i in ids.values()]
                if all(r.status in (RunStatus.SUCCEEDED, RunStatus.FAILED) for r in runs):
                    break
                await asyncio.sleep(0.05)
            return {key: await service.store.get_run(run_id) for key, run_id in ids.items()}
        finally:
            await service.stop(grace_seconds=1)

    return asyncio.run(scenario())
