"""The API and the CLI give the same answer to a second retry of a run: refused (409 /
exit 1), naming the run that retries it, and nothing more is queued — one rule, the core's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from litestar.testing import AsyncTestClient
from support import write_source

from brain import shell, workflow
from brain.server import create_app

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

BREAKS = '''
from brain import shell, workflow


@workflow
def breaks():
    shell("boom", command="exit 3")
'''


async def test_the_api_answers_a_second_retry_409_and_queues_nothing(tmp_path: Path) -> None:
    @workflow(name="breaks")
    def breaks() -> None:
        shell("boom", command="exit 3")

    app = create_app([breaks])
    async with AsyncTestClient(app, base_url="http://127.0.0.1", timeout=60) as client:
        first = (await client.post("/api/workflows/breaks/runs", json={"wait": True})).json()
        assert first["status"] == "failed", first
        retried = await client.post(f"/api/runs/{first['run_id']}/retry")
        assert retried.status_code == 202, retried.text
        retry_id = retried.json()["run_id"]
        before = (await client.get("/api/runs")).json()
        again = await client.post(f"/api/runs/{first['run_id'][:10]}/retry")
        after = (await client.get("/api/runs")).json()
    assert again.status_code == 409, again.text
    assert again.json()["detail"].startswith(
        f"run {first['run_id'][:12]} was already retried by run {retry_id[:12]} (")
    assert [r["run_id"] for r in after] == [r["run_id"] for r in before]
    assert len(after) == 2


def test_the_cli_refuses_a_second_retry_and_queues_nothing(tmp_path: Path,
                                                           brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "breaks.py", BREAKS)

    def brain(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*brain_cmd, *args], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path, env=os.environ.copy())

    ran = brain("run", str(flow), "--json")
    assert ran.returncode == 1, ran.stderr
    original = json.loads(ran.stdout)["run_id"]
    first = brain("retry", original)
    assert first.returncode == 0, first.stderr
    found = re.search(r"queued run ([0-9a-f]{32})", first.stderr)
    assert found is not None, first.stderr
    retry_id = found.group(1)
    again = brain("retry", original[:10])
    assert again.returncode == 1
    assert (f"error: run {original[:12]} was already retried by run {retry_id[:12]} (queued)"
            in again.stderr), again.stderr
    runs = json.loads(brain("runs", "--json").stdout)
    assert sorted(r["run_id"] for r in runs) == sorted([original, retry_id])
