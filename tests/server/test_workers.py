"""``brain workers`` and ``GET /api/workers`` (SPEC §14): the executor processes sharing the
database, from their heartbeats; one silent for longer than a lease is shown lost."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest
from serve_support import BrainServer, brain_argv, clean_env
from support import write_source

from brain._clock import utcnow
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


def test_serve_and_worker_are_listed_and_a_silent_one_is_lost(tmp_path: Path,
                                                              fresh_pg_url: str) -> None:
    """On PostgreSQL: a SQLite file takes one serving process only (SPEC §4)."""
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", """
        from brain import shell, workflow

        @workflow
        def hello():
            shell("hi", argv=["echo", "hi"])
    """)
    env = clean_env(tmp_path / "unused.db", {"BRAIN_LEASE_SECONDS": "5",
                                             "BRAIN_DATABASE_URL": fresh_pg_url})
    url = fresh_pg_url
    subprocess.run([*brain_argv(), "db", "upgrade"], env=env, check=True, capture_output=True,
                   timeout=60)

    async def stale() -> None:  # a worker of another machine that stopped beating long ago
        async with Store(url) as store:
            await store.worker_heartbeat("gone+x:77:aa", host="elsewhere", pid=77, kind="worker",
                                         started_at=utcnow() - timedelta(hours=1), executing=1)
            await store.db.write("UPDATE brain_workers SET heartbeat_at = :at",
                                 {"at": utcnow() - timedelta(minutes=10)})

    server = BrainServer(brain_argv(), folder, tmp_path, env)
    worker = subprocess.Popen([*brain_argv(), "worker", str(folder)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        server.wait_healthy()
        asyncio.run(stale())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            rows = server.client.get("/api/workers").json()
            if {r["kind"] for r in rows if not r["lost"]} == {"serve", "worker"}:
                break
            time.sleep(0.2)
        page = server.client.get("/").text
        shown = subprocess.run([*brain_argv(), "workers", "--json"], env=env,
                               capture_output=True, text=True, timeout=60)
        text = subprocess.run([*brain_argv(), "workers"], env=env, capture_output=True,
                              text=True, timeout=60)
    finally:
        worker.terminate()
        worker.wait(30)
        server.stop()
    by_kind = {(r["kind"], r["lost"]): r for r in rows}
    assert by_kind[("serve", False)]["pid"] == server.proc.pid
    assert by_kind[("worker", False)]["pid"] == worker.pid
    assert by_kind[("worker", True)]["host"] == "elsewhere"
    assert shown.returncode == 0, shown.stderr
    assert {r["id"] for r in json.loads(shown.stdout)} == {r["id"] for r in rows}
    assert "LOST" in text.stdout and "elsewhere:77" in text.stdout
    assert "<h2>Workers</h2>" in page and "elsewhere" in page and ">lost<" in page

    async def after() -> list[str]:
        async with Store(url) as store:
            return [r["id"] for r in await store.list_workers()]

    assert asyncio.run(after()) == ["gone+x:77:aa"], "stopped processes remove their rows"
