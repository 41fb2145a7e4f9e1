"""Attack (SPEC §16, §7, §2): a huge signal body, through a real ``brain serve``.

Webhook bodies are refused over 1 MiB (413), and a step's output is capped at
``max_output_bytes`` (default 1 MiB). ``POST /api/signals/{signal}`` takes any body up to
Litestar's default 10 MB and stores all of it as the output of every step it continues:
a 9 MB body sent once to three waiting runs answers 200 and stores 27 MB of step output.

Promised: "Bad input (... huge bodies ...) gets a clear 4xx ... and changes nothing".

Run: ``.venv/bin/pytest tests/attack/test_attack_waits_huge_signal.py -n 0``
"""

from __future__ import annotations

from pathlib import Path

import pytest
from serve_support import BrainServer, brain_argv, clean_env
from support import wait_for, write_source

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOWS = '''
from brain import shell, wait_for, workflow


@workflow
def ci():
    wait_for("ci", signal="ci-done", key="k")
    shell("after", argv=["true"])
'''

BODY_BYTES = 9_000_000
ONE_MIB = 1024 * 1024


def test_a_huge_signal_body_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    server = BrainServer(brain_argv(), folder, tmp_path, clean_env(tmp_path / "brain.db"))
    try:
        server.wait_healthy()
        run_ids = [server.client.post("/api/workflows/ci/runs", json={}).json()["run_id"]
                   for _ in range(3)]
        wait_for(lambda: all(server.client.get(f"/api/runs/{r}").json()["status"] == "waiting"
                             for r in run_ids), 30, "the runs to wait")
        r = server.client.post("/api/signals/ci-done", json={"key": "k", "body": "x" * BODY_BYTES})
        stored = []
        if r.status_code == 200:
            wait_for(lambda: all(server.client.get(f"/api/runs/{i}").json()["status"]
                                 == "succeeded" for i in run_ids), 30, "the runs to end")
            for run_id in run_ids:
                run = server.client.get(f"/api/runs/{run_id}").json()
                output = next(s for s in run["steps"] if s["name"] == "ci")["output"] or ""
                stored.append(len(output))
        assert r.status_code in (400, 413), (
            f"a {BODY_BYTES}-byte signal body answered {r.status_code} {r.text[:100]}; the "
            f"steps it continued store outputs of {stored} characters (a step's output is "
            f"capped at {ONE_MIB} bytes, a webhook body at {ONE_MIB})")
    finally:
        server.kill()
        server.stop()
