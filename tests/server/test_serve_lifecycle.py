"""``brain serve`` as a process (SPEC §6, §7): a taken port, Ctrl-C once and twice, and
file descriptors running out — each against a real subprocess, bounded in time."""

from __future__ import annotations

import os
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from serve_support import BrainServer, brain_argv, clean_env
from support import running_step, wait_for, write_source

FLOWS = """
from brain import shell, workflow


@workflow
def parked():
    shell("nap", command="sleep 60")
"""


#: ``brain`` with a grace period of an hour instead of ten seconds: a process that
#: ends within the tests' minute after Ctrl-C twice was stopped by the second Ctrl-C, not by
#: the grace period running out, however slow the machine.
HOUR_OF_GRACE = [sys.executable, "-c", """
import brain.cli.serve, brain.service
service_stop = brain.service.BrainService.stop
async def stop(self, grace_seconds=3600.0):
    await service_stop(self, grace_seconds)
brain.service.BrainService.stop = stop
brain.cli.serve.STOP_GRACE_SECONDS = 3600
from brain.cli import main
main()
"""]


def make_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "workflows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    return folder


def test_port_in_use_is_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([*brain_argv(), "serve", str(folder), "--port", str(port)],
                                capture_output=True, text=True, timeout=60,
                                env=clean_env(tmp_path / "brain.db"))
    assert result.returncode == 2, result
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert f"port {port} on 127.0.0.1 is already in use" in lines[0]
    assert "The Brain:" not in output  # never claims to serve


def start(tmp_path: Path, argv: list[str] | None = None, **kwargs: object) -> BrainServer:
    server = BrainServer(argv or brain_argv(), make_folder(tmp_path), tmp_path,
                         clean_env(tmp_path / "brain.db"), **kwargs)  # type: ignore[arg-type]
    server.wait_healthy()
    return server


def wait_output(server: BrainServer, text: str, seconds: float) -> float:
    """Seconds until ``text`` appears in the server's output (fails after ``seconds``)."""
    started = time.monotonic()
    wait_for(lambda: text in server.output(), seconds, f"{text!r} in the output of brain serve")
    return time.monotonic() - started


def test_sigint_says_at_once_and_a_second_stops_a_running_step(tmp_path: Path) -> None:
    server = start(tmp_path, HOUR_OF_GRACE)
    try:
        r = server.client.post("/api/workflows/parked/runs")
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        wait_for(lambda: running_step(tmp_path / "brain.db"), 20, "the step to run")
        server.proc.send_signal(signal.SIGINT)
        # Said at once: before the process stops, which it does not before the grace period
        # ends (an hour here; the step sleeps 60 s) or a second Ctrl-C.
        wait_output(server, "stopping", 60)
        assert "Ctrl-C again" in server.output()
        assert "up to 3600" in server.output()  # the hour of grace is the one waited for
        time.sleep(0.5)
        assert server.proc.poll() is None  # waiting for the running step (grace period)
        server.proc.send_signal(signal.SIGINT)
        # The second Ctrl-C cut the hour of grace short: the process ends (the wait fails
        # only past a minute).
        server.proc.wait(timeout=60)
        output = server.output()
        assert "stopping now" in output
        assert "Traceback" not in output, output
        # The run was not given up: it stays running (its lease ended), so the next start resumes it.
        with sqlite3.connect(tmp_path / "brain.db") as db:
            status = db.execute("SELECT status FROM brain_runs WHERE id = ?", (run_id,)).fetchone()
        assert status == ("running",)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
        server.stop()


def test_sigint_without_running_steps_stops_quickly(tmp_path: Path) -> None:
    server = start(tmp_path)
    try:
        server.proc.send_signal(signal.SIGINT)
        server.proc.wait(timeout=10)
        assert "stopping" in server.output()
        assert "Traceback" not in server.output()
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
        server.stop()


def test_descriptors_running_out_log_little_and_the_server_recovers(tmp_path: Path) -> None:
    """200 idle half-sent connections against 64 descriptors: accept() fails for a while.
    The log says so at most about once a second (no traceback per queued connection), and
    once the connections close, /health answers again."""

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    server = start(tmp_path, preexec_fn=few_descriptors)
    conns: list[socket.socket] = []
    try:
        before = len(server.stderr())
        for _ in range(200):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
            conns.append(sock)
        # The condition is reached (however busy the machine), then lasts 3 s more: time
        # for a flood of lines, if each queued connection logged one.
        wait_for(lambda: "cannot accept connections" in server.stderr()[before:], 60,
                 "accept() to fail for want of descriptors")
        time.sleep(3)
        log = server.stderr()[before:]
        assert "Traceback" not in log, log[-3000:]
        # Far fewer lines than queued connections: no line per failed accept().
        assert len(log.splitlines()) < len(conns) // 5, log[-3000:]
        assert len(log) < 4000, len(log)
        for sock in conns:
            sock.close()
        conns.clear()

        def healthy() -> bool:
            try:
                return server.client.get("/health", timeout=2).status_code == 200
            except httpx.HTTPError:  # still recovering
                return False

        wait_for(healthy, 20, "/health to answer 200 after the connections closed")
    finally:
        for sock in conns:
            sock.close()
        server.stop()


def test_limits_are_set() -> None:
    """The uvicorn limits ``brain serve`` passes (values, not behaviour: see the tests above)."""
    from brain.cli.serve import KEEP_ALIVE_SECONDS, MAX_HEADER_BYTES, connection_limit

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert 0 < KEEP_ALIVE_SECONDS <= 10
    assert 8 * 1024 <= MAX_HEADER_BYTES <= 64 * 1024
    assert 8 <= connection_limit() <= max(8, soft)


def test_worker_second_sigint_stops_at_once_and_the_run_stays_resumable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from brain.loader import load_target

    folder = make_folder(tmp_path)
    env = clean_env(tmp_path / "brain.db")
    monkeypatch.setenv("BRAIN_DATABASE_URL", env["BRAIN_DATABASE_URL"])
    wf = load_target(str(folder / "flows.py"))
    run_id = asyncio.run(wf.enqueue())
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*HOUR_OF_GRACE, "worker", str(folder)], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: running_step(tmp_path / "brain.db"), 20, "the step to run")
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: "Ctrl-C again" in log.read_text(), 60, "the first stop message")
        assert "up to 3600" in log.read_text()  # the hour of grace is the one waited for
        time.sleep(0.5)
        assert proc.poll() is None  # the grace period
        proc.send_signal(signal.SIGINT)
        # The second Ctrl-C cut the hour of grace short: the process ends.
        proc.wait(timeout=60)
        assert "stopping now" in log.read_text()
        assert "Traceback" not in log.read_text()
        with sqlite3.connect(tmp_path / "brain.db") as db:
            status = db.execute("SELECT status FROM brain_runs WHERE id = ?", (run_id,)).fetchone()
        assert status == ("running",)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


ROOT_LINES = 1 if os.geteuid() == 0 else 0  # the root warning (SPEC §11), once per start


def _refused(argv: list[str], env: dict[str, str], holder: str, pid: int) -> None:
    """``argv`` (a second serving process) exits 2 with one line naming the first by pid."""
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines  # no root warning either: it never started
    assert f"brain {holder} (pid {pid}) already serves the database" in lines[0], lines
    assert "one brain serve or brain worker per SQLite file" in lines[0]
    assert "The Brain" not in lines[0]


def test_one_serving_process_per_sqlite_file_the_second_exits_2_naming_the_first(
        tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    env = clean_env(tmp_path / "brain.db")
    server = BrainServer(brain_argv(), folder, tmp_path, env)
    try:
        server.wait_healthy()
        _refused([*brain_argv(), "worker", str(folder)], env, "serve", server.proc.pid)
        _refused([*brain_argv(), "serve", str(folder), "--port", "0"], env,
                 "serve", server.proc.pid)
        # Other commands share the file.
        shown = subprocess.run([*brain_argv(), "runs", "--json"], env=env, capture_output=True,
                               text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert server.output().count("running as root") == ROOT_LINES
    finally:
        assert server.stop() == 0
    # Stopped, the file is free: a worker serves it, and a serve is refused in its turn; once
    # the worker is killed (no clean-up at all), a serve starts.
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen([*brain_argv(), "worker", str(folder)], env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "The Brain worker" in log.read_text(), 30, "the worker to start")
        _refused([*brain_argv(), "serve", str(folder), "--port", "0"], env,
                 "worker", worker.pid)
        assert log.read_text().count("running as root") == ROOT_LINES
    finally:
        worker.kill()
        worker.wait(30)
    again = BrainServer(brain_argv(), folder, tmp_path, env)
    again.wait_healthy()
    assert again.stop() == 0


def test_other_databases_are_not_locked(tmp_path: Path) -> None:
    from brain.cli.startup import serving_lock, sqlite_file

    assert sqlite_file("sqlite+aiosqlite:///:memory:") is None
    assert sqlite_file("sqlite://") is None
    assert sqlite_file("postgresql+asyncpg://u:p@127.0.0.1/db") is None
    with serving_lock("sqlite+aiosqlite:///:memory:", "serve"), \
            serving_lock("sqlite+aiosqlite:///:memory:", "serve"):
        pass  # nothing to share: no lock
    # The same file by two names is one file.
    (tmp_path / "sub").mkdir()
    assert sqlite_file(f"sqlite:///{tmp_path}/sub/../b.db") == sqlite_file(f"sqlite:///{tmp_path}/b.db")
