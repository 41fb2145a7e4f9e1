"""Attack (issue 31): a decision or a signal is taken once, even when several processes send
it at the same moment, on SQLite and PostgreSQL; the run then continues once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brain import approval, shell, wait_for, workflow
from brain.results import TriggerData
from brain.runner import execute_run
from brain.runner.queueing import enqueue, new_run
from brain.store import Store

_RACER = r"""
import asyncio, sys, time
from brain.store import Store
from brain._errors import RunConflict

async def main(url, what, run_id, start, me):
    async with Store(url) as store:
        while time.time() < start:
            await asyncio.sleep(0.001)
        if what == "signal":
            print("RESUMED", len(await store.send_signal("go-sig", "k1", f"body-{me}")))
        else:
            try:
                await store.decide(run_id, "go", approved=True, comment=f"c-{me}")
                print("DECIDED")
            except RunConflict:
                print("REFUSED")

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]))
"""


@workflow(name="waitrace")
def waitrace():
    ok = approval("go", prompt="go?")
    sig = wait_for("sig", signal="go-sig", key="k1", after=[ok])
    shell("after", argv=["echo", f"{sig}"])


async def _parked(url: str) -> str:
    async with Store(url) as store:
        run_id, _ = await enqueue(store, new_run(waitrace, TriggerData(event="manual")),
                                  trigger_key="manual", max_queued=100)
        assert run_id is not None
        result = await execute_run(waitrace, store, run_id)
        assert result is not None and result.status == "waiting", result
        return run_id


async def _continue(url: str, run_id: str) -> str:
    async with Store(url) as store:
        result = await execute_run(waitrace, store, run_id)
        assert result is not None
        return str(result.status)


def _race(url: str, what: str, run_id: str, tmp_path: Path, n: int = 6) -> list[str]:
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    start = time.time() + 4.0
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    procs = [subprocess.Popen([sys.executable, str(script), url, what, run_id, str(start),
                               str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for i in range(n)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outs.append(out.strip())
    return outs


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_racing_decisions_and_signals_are_each_taken_once(
        backend: str, db_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    url = db_url if backend == "sqlite" else request.getfixturevalue("fresh_pg_url")
    if backend == "postgres":
        from support import upgraded_schema
        asyncio.run(upgraded_schema(url))
    run_id = asyncio.run(_parked(url))
    outs = _race(url, "decision", run_id, tmp_path)
    assert sorted(outs) == ["DECIDED"] + ["REFUSED"] * 5, outs
    assert asyncio.run(_continue(url, run_id)) == "waiting"  # now waits for the signal
    outs = _race(url, "signal", run_id, tmp_path)
    assert sorted(outs) == ["RESUMED 0"] * 5 + ["RESUMED 1"], outs
    assert asyncio.run(_continue(url, run_id)) == "succeeded"

    async def steps() -> dict[str, tuple[str, int, str | None]]:
        async with Store(url) as store:
            run = await store.get_run(run_id)
            return {n: (str(s.status), s.tries, s.output) for n, s in run.steps.items()}
    got = asyncio.run(steps())
    assert got["after"][:2] == ("succeeded", 1)
    assert got["sig"][2] == got["after"][2] and (got["sig"][2] or "").startswith("body-")


def test_cancelling_a_waiting_run_ends_it_at_once_and_a_late_decision_is_refused(
        db_url: str) -> None:
    from brain._errors import RunConflict
    from brain.runner import cancel_run

    run_id = asyncio.run(_parked(db_url))

    async def cancel_then_decide() -> tuple[str, dict[str, str]]:
        async with Store(db_url) as store:
            result, active = await cancel_run(store, run_id)
            assert active
            with pytest.raises(RunConflict):
                await store.decide(run_id, "go", approved=True)
            run = await store.get_run(run_id)
            return str(result.status), {n: str(s.status) for n, s in run.steps.items()}

    status, steps = asyncio.run(cancel_then_decide())
    assert status == "cancelled"
    assert "waiting" not in steps.values() and "succeeded" not in steps.values(), steps

    async def take_again() -> object:
        async with Store(db_url) as store:
            return await execute_run(waitrace, store, run_id)
    assert asyncio.run(take_again()) is None  # an ended run is never taken again
