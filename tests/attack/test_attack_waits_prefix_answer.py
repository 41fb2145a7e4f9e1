"""Attack (SPEC §16, §7): a decision sent with a run id prefix while another process records a
run whose id shares that prefix, through a real ``brain serve`` on SQLite.

``POST /api/runs/{prefix}/steps/go/decision`` resolves the prefix, commits the decision, and
only then resolves the prefix a second time to name the run in its answer. If a run with
the same prefix was committed in between (here: another process holding the write lock for
a moment while it records one, so the decision waits for the lock after its first read), the
second resolution fails and the API answers ``404 run id prefix ... is ambiguous`` -- while
the decision is stored and the run continues. A client that believes the 404 and sends
the decision again (with the full id) now gets ``409 already decided``.

Promised: a decision "is committed before its 200"; a refused request "changes nothing".

Run: ``.venv/bin/pytest tests/attack/test_attack_waits_prefix_answer.py -n 0``
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import BrainServer, brain_argv, clean_env
from support import wait_for, write_source

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOWS = '''
from brain import approval, shell, workflow


@workflow
def gate():
    approval("go", prompt="Go?")
    shell("after", argv=["true"])
'''


def test_a_decision_by_prefix_is_answered_as_it_was_committed(tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    db_file = tmp_path / "brain.db"
    server = BrainServer(brain_argv(), folder, tmp_path, clean_env(db_file))
    try:
        server.wait_healthy()
        run_id = server.client.post("/api/workflows/gate/runs", json={}).json()["run_id"]
        wait_for(lambda: server.client.get(f"/api/runs/{run_id}").json()["status"] == "waiting",
                 30, "the run to wait")
        prefix = run_id[:6]
        other_id = prefix + ("0" if run_id[6] != "0" else "1") * 26

        # Another process records a run whose id starts with the same prefix, holding the
        # write lock a moment (as any writer does).
        other = sqlite3.connect(db_file, isolation_level=None, timeout=10)
        other.execute("BEGIN IMMEDIATE")
        columns = [row[1] for row in other.execute("PRAGMA table_info(brain_runs)")]
        picked = ", ".join({"id": ":other", "status": "'failed'"}.get(c, c) for c in columns)
        other.execute(f"INSERT INTO brain_runs ({', '.join(columns)}) SELECT {picked} "
                      f"FROM brain_runs WHERE id = :run_id", {"other": other_id, "run_id": run_id})
        answers: dict[str, httpx.Response] = {}

        def decide() -> None:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                answers["first"] = client.post(f"/api/runs/{prefix}/steps/go/decision",
                                               json={"approve": True})

        sender = threading.Thread(target=decide)
        sender.start()
        time.sleep(0.5)  # the decision has resolved the prefix and waits for the lock
        other.execute("COMMIT")
        sender.join(30)
        other.close()

        first = answers["first"]
        run: dict[str, Any] = server.client.get(f"/api/runs/{run_id}").json()
        go = next(s for s in run["steps"] if s["name"] == "go")
        again = server.client.post(f"/api/runs/{run_id}/steps/go/decision",
                                   json={"approve": True})
        assert first.status_code == 200 or go["decision"] is None, (
            f"the decision was answered {first.status_code} {first.text}, yet it was stored "
            f"(step go {go['status']}, decision {go['decision']}); sending it again with the "
            f"full id answers {again.status_code} {again.text}")
    finally:
        server.kill()
        server.stop()
