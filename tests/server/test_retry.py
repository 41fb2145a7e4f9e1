"""SPEC §13 retry: ``POST /api/runs/{id}/retry`` and ``brain retry`` queue the run again;
steps that succeeded keep their outputs and do not run again, the others run."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from serve_support import wait_run
from support import write_source

from brain import for_each, shell, workflow
from brain.server import create_app

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


@asynccontextmanager
async def client_for(workflows: list[Any]) -> AsyncIterator[Any]:
    app = create_app(workflows)
    async with AsyncTestClient(app, base_url="http://127.0.0.1", timeout=60) as client:
        yield client


def flaky(tmp_path: Path) -> Any:
    """``count`` always succeeds (and counts its runs); ``check`` fails until ``fixed`` exists."""
    @workflow(name="flaky")
    def flaky_wf() -> None:
        counted = shell("count", command=f"echo x >> {tmp_path}/count.txt; echo counted")
        with for_each(["a", "b", "c"], name="part") as part:
            shell("each", command=f"echo {part} >> {tmp_path}/each.txt; "
                                  f"if [ {part} = b ] && [ ! -e {tmp_path}/fixed ]; then "
                                  f"sleep 1; exit 4; fi; echo done-{part}")  # a, c end first
        shell("check", argv=["sh", "-c", f"test -e {tmp_path}/fixed && echo ok-$0", f"{counted}"])
    return flaky_wf


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_retry_runs_only_what_did_not_succeed(tmp_path: Path) -> None:
    wf = flaky(tmp_path)
    async with client_for([wf]) as client:
        first = (await client.post("/api/workflows/flaky/runs", json={"body": "payload",
                                                                      "wait": True})).json()
        assert first["status"] == "failed"
        (tmp_path / "fixed").touch()
        r = await client.post(f"/api/runs/{first['run_id'][:10]}/retry")
        assert r.status_code == 202, r.text
        assert r.json()["retry_of"] == first["run_id"]
        again = await wait_run(client, r.json()["run_id"])
        original = (await client.get(f"/api/runs/{first['run_id']}")).json()
        second_retry = await client.post(f"/api/runs/{again['run_id']}/retry")
    assert again["status"] == "succeeded", again
    assert again["retry_of"] == first["run_id"]
    assert again["trigger"]["body"] == "payload"
    steps = {s["name"]: s for s in again["steps"]}
    # count succeeded in the original: same output, same record, not run again
    assert lines(tmp_path / "count.txt") == ["x"]
    assert steps["count"]["output"] == "counted" and steps["count"]["tries"] == 1
    assert steps["count"]["started_at"] == {s["name"]: s for s in original["steps"]}["count"][
        "started_at"]
    # only the failed instance ran again; the others kept their outputs
    assert sorted(lines(tmp_path / "each.txt")) == ["a", "b", "b", "c"]
    assert [steps[f"each[{i}]"]["output"] for i in range(3)] == ["done-a", "done-b", "done-c"]
    assert steps["check"]["output"] == "ok-counted"
    assert original["status"] == "failed" and original["retry_of"] is None
    assert second_retry.status_code == 409
    assert "succeeded" in second_retry.json()["detail"]


async def test_retry_of_a_changed_workflow_is_409_and_unknown_runs_404(tmp_path: Path) -> None:
    old = flaky(tmp_path)
    async with client_for([old]) as client:
        failed = (await client.post("/api/workflows/flaky/runs", json={"wait": True})).json()
    assert failed["status"] == "failed"

    @workflow(name="flaky")
    def changed() -> None:
        shell("count", argv=["echo", "a different definition"])

    async with client_for([changed]) as client:
        r = await client.post(f"/api/runs/{failed['run_id']}/retry")
        assert r.status_code == 409, r.text
        # SPEC §24: a step the retry would keep (count succeeded) changed since
        assert r.json()["detail"] == ("workflow changed since the run started: step 'count' "
                                      "(argv, command changed)")
        r = await client.post("/api/runs/0123456789abcdef0123456789abcdef/retry")
        assert r.status_code == 404
        runs = (await client.get("/api/runs")).json()
    assert len(runs) == 1, "a refused retry queues nothing"


def test_brain_retry_queues_the_run_for_a_worker(tmp_path: Path, brain_cmd: list[str],
                                                 db_url: str) -> None:
    flow = write_source(tmp_path, "flows.py", f"""
        from brain import shell, workflow

        @workflow
        def once():
            shell("first", command="echo x >> {tmp_path}/first.txt; echo first")
            shell("second", command="test -e {tmp_path}/fixed && echo second")
    """)
    env = dict(os.environ, BRAIN_DATABASE_URL=db_url)
    run = subprocess.run([*brain_cmd, "run", str(flow), "--json"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert run.returncode == 1
    import json

    run_id = json.loads(run.stdout)["run_id"]
    (tmp_path / "fixed").touch()
    retried = subprocess.run([*brain_cmd, "retry", run_id[:8]], capture_output=True, text=True,
                             env=env, timeout=60)
    assert retried.returncode == 0, retried.stderr
    assert "a retry of" in retried.stderr + retried.stdout
    twice = subprocess.run([*brain_cmd, "retry", "ffff"], capture_output=True, text=True,
                           env=env, timeout=60)
    assert twice.returncode != 0 and "Traceback" not in twice.stderr
    worker = subprocess.Popen([*brain_cmd, "worker", str(flow)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import time

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            shown = subprocess.run([*brain_cmd, "runs", "--json"], capture_output=True, text=True,
                                   env=env, timeout=60)
            runs = json.loads(shown.stdout)
            if any(r["retry_of"] == run_id and r["status"] == "succeeded" for r in runs):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the retry did not succeed: {runs}")
    finally:
        worker.terminate()
        worker.wait(30)
    assert lines(tmp_path / "first.txt") == ["x"]
