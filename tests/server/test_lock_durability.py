"""Nothing accepted is lost when the database stalls (SPEC §4, §11).

500 signed webhooks go to a real ``brain serve`` while another process holds
SQLite's write lock for 12 s in the middle of the burst (longer than the busy
timeout): every delivery answered 202 ends ``succeeded``, none ``cancelled``,
and no step is left ``running``.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
from serve_support import BrainServer
from support import sql_rows, wait_for, write_source

from brain.server.webhooks import sign

SECRET = "lock-test-secret-value"
DELIVERIES = 500
LOCK_AFTER = 120
#: Longer than SQLite's busy timeout (10 s): writers give up waiting and must retry.
LOCK_SECONDS = 12


def test_webhooks_accepted_during_a_long_write_lock_all_succeed(tmp_path: Path,
                                                               brain_cmd: list[str]) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "locky.py", '''
        from brain import step, trigger, webhook, workflow

        @step
        def record(body: str) -> str:
            return body.upper()

        @workflow(triggers=[webhook(secret_env="LOCK_HOOK_SECRET")])
        def locky():
            record(trigger.body)
    ''')
    db = tmp_path / "brain.db"
    env = dict(os.environ, LOCK_HOOK_SECRET=SECRET,
               BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{db}")
    server = BrainServer(brain_cmd, folder, tmp_path, env, start_new_session=True)
    holder: subprocess.Popen[str] | None = None
    try:
        server.wait_healthy()
        url = server.url
        accepted: dict[int, str] = {}
        answers: dict[int, int] = {}
        lock = threading.Lock()
        enough = threading.Event()

        def deliver(client: httpx.Client, index: int) -> None:
            body = f"delivery {index:03d}".encode()
            try:
                response = client.post(f"{url}/hooks/locky", content=body, timeout=120, headers={
                    "X-Brain-Signature": sign(SECRET, body),
                    "X-Brain-Delivery": f"lock-{index:03d}",
                    "Content-Type": "text/plain"})
            except httpx.HTTPError:
                return
            with lock:
                answers[index] = response.status_code
                if response.status_code == 202:
                    accepted[index] = response.json()["run_id"]
                    if len(accepted) >= LOCK_AFTER:
                        enough.set()

        with httpx.Client(limits=httpx.Limits(max_connections=16)) as client, \
                concurrent.futures.ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(deliver, client, i) for i in range(DELIVERIES)]
            assert enough.wait(60), f"only {len(accepted)} answers:\n{server.output()[-3000:]}"
            holder = subprocess.Popen(
                [sys.executable, "-c",
                 "import sqlite3, sys, time\n"
                 "c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n"
                 "c.execute('BEGIN IMMEDIATE')\n"
                 "print('held', flush=True)\n"
                 f"time.sleep({LOCK_SECONDS})\n"
                 "c.execute('ROLLBACK')\n", str(db)],
                stdout=subprocess.PIPE, text=True)
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            locked_at = len(accepted)
            concurrent.futures.wait(futures, timeout=240)
        assert holder.wait(60) == 0
        assert locked_at < DELIVERIES, "the lock should fall in the middle of the burst"
        assert len(accepted) >= DELIVERIES * 0.9, (
            f"{len(accepted)} of {DELIVERIES} accepted; answers: "
            f"{sorted(set(answers.values()))}\n{server.output()[-3000:]}")

        def all_ended() -> bool:
            rows = sql_rows(tmp_path, "SELECT count(*) FROM brain_runs "
                                      "WHERE status IN ('queued', 'running')")
            return rows[0][0] == 0

        wait_for(all_ended, 180, "every accepted run to end")
        statuses = {r["id"]: r["status"] for r in sql_rows(
            tmp_path, "SELECT id, status FROM brain_runs")}
        not_succeeded = {i: statuses.get(run_id) for i, run_id in accepted.items()
                         if statuses.get(run_id) != "succeeded"}
        assert not not_succeeded, f"accepted runs that did not succeed: {not_succeeded}"
        assert sql_rows(tmp_path, "SELECT count(*) FROM brain_runs WHERE status = 'cancelled'")[0][0] == 0
        assert sql_rows(tmp_path, "SELECT count(*) FROM brain_steps WHERE status = 'running'")[0][0] == 0
        outputs = {r["output"] for r in sql_rows(tmp_path, "SELECT output FROM brain_steps")}
        assert {f"DELIVERY {i:03d}" for i in accepted} <= outputs
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
        server.kill()
        server.stop()
