"""A schedule's fire queues its run with the trigger's ``params=`` (the workflow's
defaults filling the rest); a file event queues it with the defaults. Through the serving
process's own trigger loop (``BrainService.firing``) on a real SQLite file."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from brain import cron, every, shell, watch, workflow
from brain.results import RunResult
from brain.service import BrainService
from brain.service.triggering import fire_params
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


def test_a_schedule_fire_queues_its_run_with_the_triggers_params(db_url: str) -> None:
    nightly = every(seconds=3600, params={"service": "api", "replicas": 3})

    @workflow(name="scaled", triggers=[nightly, cron("0 6 * * *", params={"service": "db"})])
    def scaled(service: str, replicas: int = 1):
        shell("say", argv=["echo", f"{service} x{replicas}"])

    assert fire_params(nightly) == {"service": "api", "replicas": 3}

    async def scenario() -> list[RunResult]:
        service = BrainService({"scaled": scaled}, store=Store(db_url), concurrency=1,
                               triggers=False, execute=False)
        await service.start()
        try:
            for _, key, trig in service.firing.schedules():
                await service.firing.fire("scaled", key, trig,
                                          datetime(2026, 1, 1, 6, 0, tzinfo=UTC))
            return await service.store.list_runs(workflow="scaled", limit=10)
        finally:
            await service.stop(grace_seconds=1)

    runs = asyncio.run(scenario())
    assert sorted((r.params for r in runs), key=str) == [
        {"service": "api", "replicas": 3}, {"service": "db", "replicas": 1}]
    assert {r.trigger.event for r in runs} == {"schedule"}


def test_a_file_event_queues_its_run_with_the_defaults(tmp_path: Path, db_url: str) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()

    @workflow(name="filed", triggers=[watch(str(inbox), debounce_seconds=0.1)])
    def filed(label: str = "incoming", limit: int = 5):
        shell("say", argv=["echo", f"{label} {limit}"])

    async def scenario() -> list[RunResult]:
        service = BrainService({"filed": filed}, store=Store(db_url), concurrency=1,
                               execute=False)
        await service.start()
        try:
            await asyncio.sleep(0.3)  # the watcher is up
            (inbox / "a.txt").write_text("hello")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                runs = await service.store.list_runs(workflow="filed", limit=10)
                if runs:
                    return runs
                await asyncio.sleep(0.1)
            return []
        finally:
            await service.stop(grace_seconds=1)

    runs = asyncio.run(scenario())
    assert runs, "the file event queued no run"
    assert runs[0].params == {"label": "incoming", "limit": 5}
    assert runs[0].trigger.event == "file" and runs[0].trigger.path.endswith("a.txt")
