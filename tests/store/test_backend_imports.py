"""The SQLite path of the store needs no SQLAlchemy: opening a file whose schema is current,
and every run, step and queue method on it, run on ``sqlite3`` alone (start-up time of
``brain run``). Creating or upgrading the schema may import it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from brain.store import Store

_SCRIPT = r'''
import asyncio, sys
from datetime import datetime, timedelta, timezone

from brain.results import RunStatus, StepStatus, TriggerData
from brain.store import Store
from brain.store.base import QueuedRun, StepProcess

URL = sys.argv[1]


async def main() -> None:
    async with Store(URL) as store:
        owner = "me:1:a"
        run_id = "a" * 32
        await store.create_run(run_id=run_id, workflow="wf", definition_hash="d" * 64,
                               trigger=TriggerData(event="webhook", body="b",
                                                   headers={"x": "y"}),
                               step_rows=[("one", "shell"), ("two", "llm")])
        assert await store.claim_run(run_id, owner, 30)
        assert await store.heartbeat(run_id, owner, 30) == (True, False)
        now = datetime.now(timezone.utc)
        await store.step_running(run_id, "one", inputs={"k": "v"}, tries=1, started_at=now,
                                 owner=owner)
        await store.step_process(run_id, StepProcess("one", 42, 7, "m"), owner=owner)
        await store.step_finished(run_id, "one", status=StepStatus.SUCCEEDED, tries=1,
                                  ended_at=now, output="out", owner=owner)
        await store.add_steps(run_id, [("two[0]", "llm", 1)], owner=owner)
        await store.steps_ended(run_id, ["two[0]"], StepStatus.SKIPPED, owner=owner)
        await store.end_unfinished_steps(run_id, pending=StepStatus.SKIPPED, owner=owner)
        handler = QueuedRun(run_id="b" * 32, workflow="on-failure", definition_hash="e" * 64,
                            trigger=TriggerData(event="failure"), step_rows=[("x", "shell")])
        await store.finish_run(run_id, RunStatus.FAILED, "boom", owner=owner,
                               then_queue=[handler])
        got = await store.get_run(run_id[:8])
        assert got.status == RunStatus.FAILED and got.steps["one"].output == "out"
        assert got.steps["one"].started_at == now and got.created_at.tzinfo is not None
        assert await store.step_outputs(run_id) == {"one": "out"}
        assert await store.step_processes(run_id) == [StepProcess("one", 42, 7, "m")]
        assert [r.run_id for r in await store.list_runs(workflow="wf")] == [run_id]
        assert (await store.run_row(run_id)).trigger.headers == {"x": "y"}
        retried = await store.retry_run(run_id)
        assert (await store.get_run(retried)).steps["one"].status == StepStatus.SUCCEEDED
        assert await store.enqueue_run(run_id="c" * 32, workflow="wf", definition_hash="d" * 64,
                                       trigger=TriggerData(), step_rows=[("one", "shell")],
                                       fire_time=now) == ("c" * 32, True)
        assert await store.last_fire("wf", "") == now
        assert await store.count_active(workflow="wf") >= 1
        assert await store.claim_next(["on-failure"], owner, 30) == "b" * 32
        assert await store.fail_queued("wf", "gone") != []
        await store.restamp_run("b" * 32, "f" * 64, [("y", "shell")], owner=owner)
        await store.request_cancel("b" * 32)
        await store.worker_heartbeat("w", host="h", pid=1, kind="worker", started_at=now,
                                     executing=0)
        assert [w["id"] for w in await store.list_workers()] == ["w"]
        await store.expired_runs()
        await store.recent_activity(now - timedelta(hours=1))
        await store.prune(now - timedelta(days=1))
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("sqlalchemy", "alembic"))
    assert not loaded, loaded
    assert "sqlalchemy" not in sys.modules


asyncio.run(main())
print("ok")
'''


def test_the_sqlite_path_imports_no_sqlalchemy(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'current.db'}"

    async def create() -> None:  # the schema, made here (that may import SQLAlchemy)
        async with Store(url):
            pass

    asyncio.run(create())
    result = subprocess.run([sys.executable, "-c", _SCRIPT, url], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
