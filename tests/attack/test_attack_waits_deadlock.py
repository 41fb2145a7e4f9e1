"""Attack (SPEC §16, §4, §7): on PostgreSQL, a cancel racing a decision on a waiting run.

A decision (``Store.decide``: ``POST .../decision``, ``brain approve``) ends a waiting
step by locking its timer, then its step, then its run. A cancel
(``Store.request_cancel``: ``POST .../cancel``, ``brain cancel``) locks the run first,
then its steps, then its timers: the opposite order. When the two meet, PostgreSQL
detects a deadlock and rolls one back; "deadlock detected" is not taken as a transient
error (SQLAlchemy's asyncpg adapter turns ``DeadlockDetectedError`` into a plain
``Error``), so it is not retried and reaches the caller as ``DatabaseError`` -- a 500
from the API, a failed cancel or decision.

Promised: a decision is committed before its 200, or answered 409; a waiting run can be
cancelled at once; no 500. Seen: one of the two fails with ``the database cannot be used:
deadlock detected`` (over HTTP: ``500 Internal Server Error`` for the decision or the
cancel, with the traceback in the server's log).

Run: ``.venv/bin/pytest tests/attack/test_attack_waits_deadlock.py -n 0``
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from support import upgraded_schema

from brain._clock import utcnow
from brain._errors import RunConflict
from brain.results import TriggerData, WaitEnd, WaitTimer
from brain.store import Store

ATTEMPTS = 40


async def waiting_run(store: Store) -> str:
    """A run parked with its approval step ``go`` waiting (with a timeout timer), as an
    executor leaves it."""
    run_id = uuid.uuid4().hex
    await store.create_run(run_id=run_id, workflow="gate", definition_hash="h",
                           trigger=TriggerData(), step_rows=[("go", "approval"),
                                                             ("after", "shell")],
                           owner="executor", lease_seconds=30)
    await store.step_waiting(
        run_id, "go", inputs={"prompt": "Go?"}, tries=1, started_at=utcnow(),
        waiting_for={"kind": "approval", "prompt": "Go?"},
        timer=WaitTimer(utcnow() + timedelta(hours=1),
                        WaitEnd("succeeded", "false", {"by": "timeout"})),
        owner="executor")
    assert await store.park_run(run_id, "executor", 0)
    return run_id


async def test_a_cancel_racing_a_decision_never_fails_with_a_database_error(
        fresh_pg_url: str) -> None:
    await upgraded_schema(fresh_pg_url)
    async with Store(fresh_pg_url) as deciding, Store(fresh_pg_url) as cancelling:
        failures: list[str] = []
        for attempt in range(ATTEMPTS):
            run_id = await waiting_run(deciding)
            lag = (attempt % 40) * 0.0002  # the decision starts 0 to 8 ms after the cancel

            async def decide(run_id: str = run_id, lag: float = lag) -> None:
                await asyncio.sleep(lag)
                try:
                    await deciding.decide(run_id, "go", approved=True)
                except RunConflict:
                    pass  # 409: the cancel came first -- as promised
                except Exception as exc:
                    failures.append(f"decision: {type(exc).__name__}: {exc}")

            async def cancel(run_id: str = run_id) -> None:
                try:
                    await cancelling.request_cancel(run_id)
                except Exception as exc:
                    failures.append(f"cancel: {type(exc).__name__}: {exc}")

            await asyncio.gather(decide(), cancel())
            if failures:
                break
        assert not failures, (f"after {attempt + 1} races of a cancel and a decision on a "
                              f"waiting run: {failures}")


FLOWS = '''
from brain import approval, shell, trigger, workflow


@workflow
def gate():
    approval("go", prompt="Go?")
    shell("mark", argv=["sh", "-c", 'echo x >> "$1"', "sh", trigger.body])
'''


@pytest.mark.usefixtures("collect_garbage_first")
def test_over_http_a_decision_or_cancel_racing_the_other_never_answers_500(
        tmp_path: Path, fresh_pg_url: str) -> None:
    import concurrent.futures
    import time

    import httpx
    from serve_support import BrainServer, brain_argv, clean_env
    from support import wait_for, write_source

    asyncio.run(upgraded_schema(fresh_pg_url))
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    server = BrainServer(brain_argv(), folder, tmp_path,
                         clean_env(tmp_path / "unused.db", {"BRAIN_DATABASE_URL": fresh_pg_url}))
    try:
        server.wait_healthy()
        run_ids = []
        for i in range(30):
            r = server.client.post("/api/workflows/gate/runs",
                                   json={"body": str(tmp_path / f"mark-{i}")})
            assert r.status_code == 202, r.text
            run_ids.append(r.json()["run_id"])
        wait_for(lambda: all(server.client.get(f"/api/runs/{r}").json()["status"] == "waiting"
                             for r in run_ids), 60, "every run to wait")

        def race(i: int, run_id: str) -> list[tuple[str, int, str]]:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                def decide() -> tuple[str, int, str]:
                    time.sleep((i % 40) * 0.001)
                    r = client.post(f"/api/runs/{run_id}/steps/go/decision",
                                    json={"approve": True})
                    return "decision", r.status_code, r.text
                def cancel() -> tuple[str, int, str]:
                    r = client.post(f"/api/runs/{run_id}/cancel", json={})
                    return "cancel", r.status_code, r.text
                with concurrent.futures.ThreadPoolExecutor(2) as pool:
                    return [f.result() for f in (pool.submit(decide), pool.submit(cancel))]

        errors = []
        for i, run_id in enumerate(run_ids):
            errors += [a for a in race(i, run_id) if a[1] >= 500]
            if errors:
                break
        assert not errors, (f"{errors}\n--- server log ---\n"
                            + "\n".join(line for line in server.output().splitlines()
                                        if "deadlock" in line or "failed with" in line)[:3000])
    finally:
        server.kill()
        server.stop()
