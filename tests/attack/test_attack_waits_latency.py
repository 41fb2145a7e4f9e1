"""Attack (SPEC §16, §19): how soon a run continues after a decision or signal committed by
another process (``brain approve``, ``brain signal``, a script with a ``Store``), on
PostgreSQL.

§16: "A decision or signal is committed before its 200 and continues the run as a queued
run would be taken (§19)"; §19: on PostgreSQL, a run "continued by any process (... a
decision, a signal) starts on an idle executor of any process within 50 ms at the
median (e.g. LISTEN/NOTIFY on commit, polling kept as the fallback)".

Nothing in the code listens or notifies: an executor only hears of a continued run from its
own process, or by polling once a second. With a ``brain serve`` and a ``brain worker``
idle, a decision or signal from another process is followed by the next step after about
0.5 s at the median (up to 1 s), ten times the promise. (A decision through the server's
own API is fast: the server wakes its own takers.)

Run: ``.venv/bin/pytest tests/attack/test_attack_waits_latency.py -n 0``
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import time
from pathlib import Path

import pytest
from serve_support import BrainServer, brain_argv, clean_env
from support import upgraded_schema, wait_for, write_source

from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOWS = '''
from brain import approval, shell, wait_for, workflow


@workflow
def gate():
    approval("go", prompt="Go?")
    shell("next", argv=["true"])


@workflow
def ci():
    wait_for("ci", signal="ci-done", key="{trigger.body}")
    shell("next", argv=["true"])
'''

RUNS = 8
#: Four times what §19 promises, so a loaded machine does not fail it by chance.
BOUND = 0.2


@pytest.mark.parametrize("how", ["decision", "signal"])
@pytest.mark.xfail(strict=True, reason=(
    "SPEC §19 (issue 23): an idle executor notices a run queued by another process within "
    "a second (it polls); LISTEN/NOTIFY comes with the queue-latency work"))
def test_a_run_continued_by_another_process_starts_within_50_ms_at_the_median(
        tmp_path: Path, fresh_pg_url: str, how: str) -> None:
    asyncio.run(upgraded_schema(fresh_pg_url))
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    env = clean_env(tmp_path / "unused.db", {"BRAIN_DATABASE_URL": fresh_pg_url})
    server = BrainServer(brain_argv(), folder, tmp_path, env)
    with (tmp_path / "worker.out").open("wb") as out:
        worker = subprocess.Popen([*brain_argv(), "worker", str(folder)], env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        server.wait_healthy()
        wait_for(lambda: {w["kind"] for w in server.client.get("/api/workers").json()}
                 == {"serve", "worker"}, 30, "the worker to start")
        workflow = "gate" if how == "decision" else "ci"
        delays = []
        for i in range(RUNS):
            r = server.client.post(f"/api/workflows/{workflow}/runs", json={"body": f"k{i}"})
            run_id = r.json()["run_id"]
            wait_for(lambda run_id=run_id: server.client.get(f"/api/runs/{run_id}").json()[
                "status"] == "waiting", 30, "the run to wait")
            time.sleep(0.2)

            async def continue_it(run_id: str = run_id, key: str = f"k{i}") -> float:
                async with Store(fresh_pg_url) as store:  # another process's view: the CLI's
                    if how == "decision":
                        await store.decide(run_id, "go", approved=True, by="cli")
                    else:
                        assert await store.send_signal("ci-done", key, "b", by="cli")
                    committed = time.time()
                    while True:
                        run = await store.get_run(run_id)
                        started = run.steps["next"].started_at
                        if started is not None:
                            return started.timestamp() - committed
                        await asyncio.sleep(0.005)

            delays.append(asyncio.run(continue_it()))
        median = statistics.median(delays)
        assert median <= BOUND, (f"after a {how} committed by another process, the next step "
                                 f"started after {[round(d, 3) for d in delays]} s "
                                 f"(median {median:.3f} s; §19 promises 50 ms)")
    finally:
        if worker.poll() is None:
            worker.terminate()
            worker.wait(20)
        server.stop()
