"""A real ``brain serve`` stays responsive while a model's answer meets a pathological schema
(SPEC §18, issue 30 item 3): ``"pattern": "^(a+)+$"`` against ``"aaaa…a!"`` backtracks for
minutes in Python's ``re``, which holds the GIL; the check runs in a child process instead.

The fake model is a :class:`brain.testing.FakeChatServer` on 127.0.0.1 in this test's
process; the server is a ``brain serve`` subprocess. The test asks ``/health`` again and
again while the run goes on: it must answer after the model was asked and before the step
ended (on the code as it was, ``/health`` waited out the whole backtracking), each answer
within a minute (a bound no busy machine reaches, well short of the backtracking). The worst
latency seen is printed; ``bench/schema_loop.py`` measures it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from serve_support import BrainServer, brain_argv, clean_env, step_of

from brain.testing import FakeChatServer

ANSWER = json.dumps({"a": "a" * 34 + "!"})
WORKFLOW = """\
from brain import llm, workflow

SCHEMA = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}


@workflow
def backtracking():
    llm("ask", prompt="Say a", model="m", schema=SCHEMA, timeout_seconds=3)
"""
HEALTH_BOUND = 60.0  # seconds: a server held by the backtracking would be held for minutes


def test_health_answers_while_a_pathological_schema_is_checked_and_the_step_times_out(
        tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "backtracking.py").write_text(WORKFLOW)
    with FakeChatServer(reply=ANSWER) as model:
        env = clean_env(tmp_path / "brain.db", {"LLM_BASE_URL": model.url})
        with BrainServer(brain_argv(), folder, tmp_path, env) as server:
            server.wait_healthy()
            run_id = server.start_run("backtracking")
            latencies: list[float] = []
            during = 0  # /health answers after the model was asked, before the run ended
            deadline = time.monotonic() + 60
            with httpx.Client(base_url=server.url, timeout=HEALTH_BOUND) as client:
                while True:
                    asked = bool(model.requests)
                    t0 = time.monotonic()
                    health = client.get("/health")  # raises past HEALTH_BOUND
                    latencies.append(time.monotonic() - t0)
                    assert health.status_code == 200
                    run = client.get(f"/api/runs/{run_id}").json()
                    if run["status"] in ("succeeded", "failed", "cancelled"):
                        break
                    during += asked
                    assert time.monotonic() < deadline, run
                    time.sleep(0.05)
            print(f"/health: {len(latencies)} answers while the run went on, worst "
                  f"{max(latencies) * 1000:.0f} ms")
            assert model.requests, "the model was never asked"
    step = step_of(run, "ask")
    assert run["status"] == "failed"
    assert step["error"] == "timed out after 3 s"
    assert step["output"] == ANSWER  # the answer it was checking is kept
    assert during > 0, "/health never answered while the answer was being checked"
