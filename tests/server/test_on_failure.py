"""``@workflow(on_failure=[...])`` (SPEC §14): a failed run queues each handler's run in the
same transaction as its failure, exactly once, even across a kill -9 of the server."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from serve_support import BrainServer, brain_argv, clean_env
from support import wait_for, write_source

from brain import WorkflowDefinitionError, shell, workflow
from brain.store import Store
from brain.testing import run_workflow

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


def handler_and_failing(tag: str) -> tuple[Any, Any]:
    @workflow(name=f"alert_{tag}")
    def alert() -> None:
        shell("tell", argv=["echo", "{trigger.event}: {trigger.body}"])
        shell("boom_too", command="exit 9")  # a failing handler triggers nothing further

    @workflow(name=f"job_{tag}", on_failure=[alert])
    def job() -> None:
        shell("fine", argv=["echo", "fine"])
        shell("boom", command="echo broke >&2; exit 3")

    return alert, job


def test_mocked_runs_show_which_handlers_a_failure_queues() -> None:
    alert, job = handler_and_failing("mocked")
    failed = run_workflow(job)
    assert failed.status == "failed"
    assert [r.workflow for r in failed.failure_runs] == ["alert_mocked"]
    queued = failed.failure_runs[0]
    assert queued.status == "queued" and queued.trigger.event == "failure"
    body = json.loads(queued.trigger.body)
    assert body["run_id"] == failed.run_id and body["workflow"] == "job_mocked"
    assert body["failed_step"] == "boom" and "exit code 3" in body["failed_step_error"]
    assert run_workflow(job, mocks={"boom": "ok"}).failure_runs == []
    handled = run_workflow(alert, trigger={"event": "failure", "body": queued.trigger.body})
    assert handled.status == "failed" and handled.failure_runs == []
    assert handled.steps["tell"].output.startswith("failure: {")  # type: ignore[union-attr]


def test_on_failure_takes_workflows() -> None:
    with pytest.raises(WorkflowDefinitionError, match="on_failure takes workflows"):
        workflow(name="bad_handlers", on_failure=["alert"])(lambda: None)  # type: ignore[list-item]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_handler_is_queued_with_the_failure(backend: str, tmp_path: Path,
                                                request: pytest.FixtureRequest) -> None:
    tag = uuid.uuid4().hex[:8]
    _, job = handler_and_failing(tag)
    url = (f"sqlite:///{tmp_path / 'f.db'}" if backend == "sqlite"
           else request.getfixturevalue("pg_url"))

    async def go() -> Any:
        store = Store(url)
        await store.upgrade_schema()
        try:
            failed = await job.arun(store=store)
            handlers = await store.list_runs(workflow=f"alert_{tag}", limit=10)
            return failed, handlers
        finally:
            await store.close()

    failed, handlers = asyncio.run(go())
    assert failed.status == "failed"
    assert len(handlers) == 1 and handlers[0].status == "queued"
    assert handlers[0].trigger.event == "failure"
    assert json.loads(handlers[0].trigger.body)["run_id"] == failed.run_id


FLOWS = """
    from brain import shell, workflow

    @workflow
    def handler():
        shell("record", command="echo {trigger.event} >> HANDLED")

    @workflow(on_failure=[handler])
    def failing():
        shell("boom", command="exit 3")
"""


def test_a_failure_queues_its_handler_exactly_once_across_a_kill(tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    handled = tmp_path / "handled.txt"
    write_source(folder, "flows.py", FLOWS.replace("HANDLED", str(handled)))
    db = tmp_path / "brain.db"
    env = clean_env(db)
    first = BrainServer(brain_argv(), folder, tmp_path, env)
    try:
        first.wait_healthy()
        r = first.client.post("/api/workflows/failing/runs", json={})
        assert r.status_code == 202
        failed_id = r.json()["run_id"]

        def failed() -> bool:
            with sqlite3.connect(db) as con:
                row = con.execute("SELECT status FROM brain_runs WHERE id = ?",
                                  (failed_id,)).fetchone()
            return bool(row and row[0] == "failed")

        wait_for(failed, 20, "the run to fail")
        first.proc.send_signal(signal.SIGKILL)  # right after the failure: the handler waits
        first.proc.wait(10)
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
        first.stop()
    second = BrainServer(brain_argv(), folder, tmp_path, env)
    try:
        second.wait_healthy()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            runs = second.client.get("/api/runs", params={"workflow": "handler"}).json()
            if runs and all(run["status"] == "succeeded" for run in runs):
                break
            time.sleep(0.2)
    finally:
        second.stop()
    assert len(runs) == 1, runs  # queued once, whatever the kill interrupted
    # The handler ran. Its step may have run twice: the first server can take the handler
    # at once (it is queued with the failure) and be killed while its step runs, and a step
    # whose process died runs again when its run resumes (at least once per step, §11).
    assert set(handled.read_text().splitlines()) == {"failure"}


def test_a_handler_named_twice_is_queued_once() -> None:
    alert, _ = handler_and_failing("twice")

    @workflow(name="job_twice_listed", on_failure=[alert, alert])
    def job() -> None:
        shell("boom", command="exit 3")

    assert [r.workflow for r in run_workflow(job).failure_runs] == ["alert_twice"]


NOTIFY = """
    from brain import shell, workflow

    @workflow
    def notify():
        shell("say", command="echo {version}")
"""
USERS = """
    from brain import shell, workflow
    from notify import notify

    @workflow(on_failure=[notify])
    def victim():
        shell("boom", command="exit 3")

    @workflow(on_failure=[notify], max_concurrent_runs=1)
    def doomed():
        shell("wait", command="sleep 60")
"""


def test_reloads_keep_failure_handlers_current_and_removed_workflows_queue_theirs(
        tmp_path: Path) -> None:
    """A handler whose file was reloaded runs as it is now (not as the failing workflow's
    stale import had it); queued runs failed because their workflow was removed queue their
    handlers too, and their steps end skipped."""
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "notify.py", NOTIFY.replace("{version}", "v1"))
    write_source(folder, "users.py", USERS)
    server = BrainServer([*brain_argv()], folder, tmp_path, clean_env(tmp_path / "brain.db"),
                         extra_args=["--reload"])
    try:
        server.wait_healthy()
        write_source(folder, "notify.py", NOTIFY.replace("{version}", "v2"))
        wait_for(lambda: "reloaded" in server.stderr() and "notify.py" in server.stderr(), 20,
                 "notify.py to be reloaded")
        failed = server.client.post("/api/workflows/victim/runs", json={}).json()["run_id"]
        assert server.wait_run(failed)["status"] == "failed"
        wait_for(lambda: len(server.run_ids("notify")) == 1, 20, "the handler's run")
        handled = server.wait_run(server.run_ids("notify")[0])
        assert handled["status"] == "succeeded", handled
        assert handled["steps"][0]["output"] == "v2"
        assert json.loads(handled["trigger"]["body"])["run_id"] == failed

        first = server.client.post("/api/workflows/doomed/runs", json={}).json()["run_id"]
        wait_for(lambda: server.run(first)["status"] == "running", 20, "the first run to start")
        queued = [server.client.post("/api/workflows/doomed/runs", json={}).json()["run_id"]
                  for _ in range(2)]
        assert {server.run(r)["status"] for r in queued} == {"queued"}
        write_source(folder, "users.py", "")  # victim and doomed are gone
        for run_id in queued:
            ended = server.wait_run(run_id)
            assert (ended["status"], ended["error"]) == ("failed", "workflow not loaded")
            assert [s["status"] for s in ended["steps"]] == ["skipped"]
        wait_for(lambda: len(server.run_ids("notify")) == 3, 20, "the removed runs' handlers")
        bodies = [json.loads(server.wait_run(r)["trigger"]["body"])
                  for r in server.run_ids("notify")]
        assert sorted(b["run_id"] for b in bodies if b["workflow"] == "doomed") == sorted(queued)
        assert {server.wait_run(r)["status"] for r in server.run_ids("notify")} == {"succeeded"}
        # Not left for the stop's grace period to wait on (its sleep is a minute long).
        assert server.client.post(f"/api/runs/{first}/cancel", json={}).status_code == 202
        server.wait_run(first)
    finally:
        server.stop()
    assert server.stderr().count("of doomed failed: workflow not loaded") == 2
