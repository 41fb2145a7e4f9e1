"""Crash safety of ``brain serve``: a webhook answered 202 runs, even across ``kill -9``.

SPEC §4 and §11: a delivery is committed as a queued run before the 202; a run
whose executor died is resumed once its lease expires (steps are
at-least-once); a repeated delivery id answers with the first run's id and
creates nothing. The server here is the real ``brain serve`` in a subprocess.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_support import BrainServer
from support import pid_gone, sql_rows, wait_for, write_source

from brain.server.webhooks import sign

SECRET = "crash-test-secret"
DELIVERIES = 100
KILL_AFTER = 40


def post_delivery(client: httpx.Client, url: str, index: int) -> httpx.Response:
    body = f"delivery body {index:03d}".encode()
    return client.post(f"{url}/hooks/crashy", content=body, timeout=10, headers={
        "X-Brain-Signature": sign(SECRET, body),
        "X-Brain-Delivery": f"delivery-{index:03d}",
        "Content-Type": "text/plain"})


def processes_mentioning(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker`` (the test's unique folder)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmdline and not pid_gone(int(entry)):
            found.append(int(entry))
    return found


@pytest.fixture
def servers() -> Iterator[list[BrainServer]]:
    started: list[BrainServer] = []
    yield started
    for server in started:
        server.kill()
        server.stop()


def start(brain_cmd: list[str], folder: Path, env: dict[str, str], logs: Path,
          servers: list[BrainServer]) -> BrainServer:
    """``brain serve FOLDER --port 0`` in its own session, answering /health."""
    server = BrainServer(brain_cmd, folder, logs, env, start_new_session=True)
    servers.append(server)
    server.wait_healthy()
    return server


def test_webhooks_answered_202_all_run_once_after_kill_9(
        tmp_path: Path, brain_cmd: list[str], servers: list[BrainServer]) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    out = tmp_path / "out.txt"
    write_source(folder, "crashy.py", f'''
        from brain import shell, trigger, webhook, workflow

        @workflow(triggers=[webhook(secret_env="CRASH_HOOK_SECRET")])
        def crashy():
            shell("append", argv=["sh", "-c", 'sleep 0.2; printf "%s\\\\n" "$1" >> {out}',
                                  "sh", trigger.body])
    ''')
    env = dict(os.environ, CRASH_HOOK_SECRET=SECRET, BRAIN_LEASE_SECONDS="2",
               BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}")
    first = start(brain_cmd, folder, env, tmp_path, servers)

    # Phase 1: 100 signed deliveries from 8 threads; kill -9 after ~40 answers.
    accepted: dict[int, str] = {}  # delivery index → run id, from 202 answers
    lock = threading.Lock()
    enough = threading.Event()

    def deliver(index: int) -> None:
        try:
            response = post_delivery(client, first.url, index)
        except httpx.HTTPError:
            return  # refused or cut by the kill: resent after the restart
        if response.status_code == 202:
            with lock:
                accepted[index] = response.json()["run_id"]
                if len(accepted) >= KILL_AFTER:
                    enough.set()

    with httpx.Client(limits=httpx.Limits(max_connections=8)) as client, \
            concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(deliver, i) for i in range(DELIVERIES)]
        assert enough.wait(30), f"only {len(accepted)} answers before the kill:\n{first.output()}"
        first.kill()
        concurrent.futures.wait(futures, timeout=60)
    before_kill = dict(accepted)
    assert KILL_AFTER <= len(before_kill) < DELIVERIES, "the kill should cut the burst"
    active = sql_rows(tmp_path, "SELECT count(*) FROM brain_runs WHERE status IN ('queued', 'running')")
    assert active[0][0] > 0, "the kill should leave runs to finish (make the step slower)"

    # Phase 2: the same database; resend what got no answer (same delivery ids), plus a few
    # answered ones, which must come back with their first run id.
    second = start(brain_cmd, folder, env, tmp_path, servers)
    missing = [i for i in range(DELIVERIES) if i not in before_kill]
    repeats = sorted(before_kill)[:5]
    with httpx.Client() as client, concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = dict(zip(missing + repeats,
                           pool.map(lambda i: post_delivery(client, second.url, i), missing + repeats),
                           strict=True))
    for index, response in answers.items():
        assert response.status_code == 202, (index, response.status_code, response.text)
    for index in repeats:
        assert answers[index].json()["run_id"] == before_kill[index], "a repeated delivery made a new run"
    accepted.update({i: answers[i].json()["run_id"] for i in missing})
    assert sorted(accepted) == list(range(DELIVERIES))

    # Every run ends (those cut mid-step are resumed once their 2 s lease expires).
    wait_for(lambda: sql_rows(tmp_path, "SELECT count(*) FROM brain_runs "
                                        "WHERE status IN ('queued', 'running')")[0][0] == 0,
             60, "every run to finish")

    rows = {r["delivery_id"]: r for r in sql_rows(
        tmp_path, "SELECT id, status, delivery_id, trigger_body, error FROM brain_runs")}
    per_delivery = sql_rows(tmp_path, "SELECT delivery_id, count(*) AS n FROM brain_runs "
                                      "GROUP BY delivery_id HAVING n > 1")
    assert [tuple(r) for r in per_delivery] == [], "a delivery id made more than one run"
    assert len(sql_rows(tmp_path, "SELECT id FROM brain_runs")) == DELIVERIES
    for index, run_id in accepted.items():
        row = rows[f"delivery-{index:03d}"]
        assert row["id"] == run_id
        assert row["trigger_body"] == f"delivery body {index:03d}"
        assert row["status"] == "succeeded", (index, row["status"], row["error"])
    unfinished_steps = sql_rows(tmp_path, "SELECT run_id, name, status FROM brain_steps "
                                          "WHERE status != 'succeeded'")
    assert [tuple(r) for r in unfinished_steps] == []

    lines = out.read_text().splitlines()
    for index in accepted:  # at least once: a step cut by the kill may have run twice
        assert f"delivery body {index:03d}" in lines, index
    assert set(lines) == {f"delivery body {i:03d}" for i in range(DELIVERIES)}

    # SIGTERM: a clean stop, and nothing of ours left running.
    assert second.stop() in (0, -signal.SIGTERM), second.output()  # uvicorn re-raises it
    assert "Traceback" not in first.output() + second.output()
    wait_for(lambda: not processes_mentioning(str(tmp_path)), 30, "the step processes to end")


def test_a_run_still_running_when_sigterm_grace_ends_is_resumed_not_cancelled(
        tmp_path: Path, brain_cmd: list[str], servers: list[BrainServer]) -> None:
    """SIGTERM lets running runs finish for a grace period (10 s); one that outlasts it is
    stopped but must stay resumable (SPEC §11: nothing accepted is lost) — nobody asked to
    cancel it, so the next server resumes it."""
    folder = tmp_path / "flows"
    folder.mkdir()
    marker = tmp_path / "first-try"
    write_source(folder, "longrun.py", f'''
        from brain import shell, workflow

        @workflow
        def longrun():
            shell("first", command="echo one")
            # The first try outlasts the shutdown grace; a resumed try is quick.
            shell("slow", argv=["sh", "-c", 'if [ -e {marker} ]; then echo resumed; '
                                            'else touch {marker}; sleep 60; fi'])
    ''')
    env = dict(os.environ, BRAIN_LEASE_SECONDS="2",
               BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}")
    first = start(brain_cmd, folder, env, tmp_path, servers)
    run_id = httpx.post(f"{first.url}/api/workflows/longrun/runs", json={}).json()["run_id"]
    wait_for(marker.exists, 30, "the slow step to start")

    assert first.stop() in (0, -signal.SIGTERM)
    stopped = sql_rows(tmp_path, "SELECT status, error FROM brain_runs WHERE id = ?", run_id)[0]
    try:
        assert stopped["status"] != "cancelled", (
            f"a graceful shutdown recorded the run as cancelled ({stopped['error']!r}): it will "
            f"never be resumed")
        start(brain_cmd, folder, env, tmp_path, servers)
        wait_for(lambda: sql_rows(tmp_path, "SELECT status FROM brain_runs WHERE id = ?",
                                  run_id)[0][0] not in ("queued", "running"), 30, "the resumed run")
        row = sql_rows(tmp_path, "SELECT status, error FROM brain_runs WHERE id = ?", run_id)[0]
        assert row["status"] == "succeeded", row["error"]
        slow = sql_rows(tmp_path, "SELECT output, tries FROM brain_steps WHERE run_id = ? AND "
                                  "name = 'slow'", run_id)[0]
        assert (slow["output"], slow["tries"]) == ("resumed", 2)
    finally:
        for pid in processes_mentioning(str(marker)):  # the first try's sleep, if left behind
            os.kill(pid, signal.SIGKILL)
