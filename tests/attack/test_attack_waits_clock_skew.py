"""Attack (SPEC §16, §9): timers on several machines whose clocks differ, on PostgreSQL.

Leases are timed by the database server's clock (so machines' clocks do not matter to
them), but a timer's due time is written with the clock of the process that recorded the
wait, and a timer is taken as due by the clock of whichever process looks. A ``brain
worker`` on a machine whose clock runs 4 s ahead (simulated here by a wrapper that shifts
``brain._clock.utcnow`` only, in the worker's process) ends another server's 6 s sleep
after about 2 s of real time -- and the run's records say it slept 6 s.

Promised: each timer continues its run "whichever serve or worker is up when it falls
due ... within 1 s of its due time"; any number of serve/worker processes "on any number of
machines share one database" (§9).

Run: ``.venv/bin/pytest tests/attack/test_attack_waits_clock_skew.py -n 0``
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from serve_support import BrainServer, brain_argv, clean_env
from support import upgraded_schema, wait_for, write_source

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOWS = '''
from brain import shell, sleep, workflow


@workflow
def nap():
    sleep("nap", 6)
    shell("after", argv=["true"])
'''

SKEWED_BRAIN = '''
"""`brain` on a machine whose clock is SKEW seconds ahead (The Brain's clock only)."""
import os
import sys
from datetime import timedelta

import brain._clock as clock

_real = clock.utcnow
clock.utcnow = lambda: _real() + timedelta(seconds=float(os.environ["SKEW"]))

from brain.cli import main  # noqa: E402

sys.exit(main())
'''

SLEEP_SECONDS = 6.0
SKEW_SECONDS = 4.0


def test_a_worker_whose_clock_runs_ahead_does_not_end_sleeps_early(
        tmp_path: Path, fresh_pg_url: str) -> None:
    asyncio.run(upgraded_schema(fresh_pg_url))
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    wrapper = tmp_path / "skewed_brain.py"
    wrapper.write_text(SKEWED_BRAIN)
    env = clean_env(tmp_path / "unused.db", {"BRAIN_DATABASE_URL": fresh_pg_url})
    server = BrainServer(brain_argv(), folder, tmp_path, env)
    worker = None
    try:
        server.wait_healthy()
        run_id = server.client.post("/api/workflows/nap/runs", json={}).json()["run_id"]
        wait_for(lambda: server.client.get(f"/api/runs/{run_id}").json()["status"] == "waiting",
                 30, "the run to sleep")
        slept_from = time.monotonic()
        with (tmp_path / "worker.out").open("wb") as out:
            worker = subprocess.Popen([sys.executable, str(wrapper), "worker", str(folder)],
                                      env={**env, "SKEW": str(SKEW_SECONDS)}, stdout=out,
                                      stderr=subprocess.STDOUT)

        def nap_status() -> str:
            run = server.client.get(f"/api/runs/{run_id}").json()
            return str(next(s for s in run["steps"] if s["name"] == "nap")["status"])

        wait_for(lambda: nap_status() != "waiting", 30, "the sleep to end")
        slept = time.monotonic() - slept_from
        assert slept >= SLEEP_SECONDS - 1.5, (
            f"a {SLEEP_SECONDS:g} s sleep ended after {slept:.1f} s of real time: a worker "
            f"whose clock is {SKEW_SECONDS:g} s ahead fired its timer early")
    finally:
        if worker is not None and worker.poll() is None:
            worker.terminate()
            worker.wait(20)
        server.stop()
