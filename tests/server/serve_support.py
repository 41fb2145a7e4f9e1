"""Helpers for the server tests: a real ``brain serve`` subprocess, the app it runs served in
this process (:class:`AppServer`), polling.

``conftest.py`` puts this folder on ``sys.path`` so test files can ``import serve_support``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
from support import wait_healthy

FINISHED = {"succeeded", "failed", "cancelled"}
#: The browser the console's tests drive: Debian's chromium (.ci/run installs it).
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# `brain serve`'s start-up line names the address it serves (text or JSON log alike).
START_LINE = re.compile(r"The Brain: .*? on http://\S*?:(\d+)\s")


def brain_argv() -> list[str]:
    """The real ``brain`` command (same rule as the ``brain_cmd`` fixture, usable at any scope)."""
    exe = shutil.which("brain", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "brain.cli"]


def _log_files(logs: Path) -> tuple[Path, Path]:
    """``serve.stdout``/``serve.stderr`` in ``logs``, or ``serve-N.*`` for a test's N-th server."""
    n = 1
    while True:
        stem = "serve" if n == 1 else f"serve-{n}"
        out, err = logs / f"{stem}.stdout", logs / f"{stem}.stderr"
        if not out.exists():
            out.touch()
            return out, err
        n += 1


def clean_env(db_file: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without any Brain settings, with a private database."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BRAIN_", "THE_BRAIN_", "LLM_"))}
    env["BRAIN_DATABASE_URL"] = f"sqlite+aiosqlite:///{db_file}"
    env.update(extra or {})
    return env


class BrainServer:
    """``brain serve FOLDER --port 0`` on 127.0.0.1, a subprocess, its output in files.

    The server binds a port of the system's choosing and says it in its start-up line;
    :attr:`port` (and :attr:`url`, :attr:`client`) read it from there, so no port is picked
    ahead of time for another process to take first. Each server of a test writes files of
    its own in ``logs`` (``serve.stdout``, ``serve-2.stdout``, ...).
    """

    def __init__(self, argv: list[str], folder: Path, logs: Path, env: dict[str, str],
                 preexec_fn: Callable[[], None] | None = None,
                 extra_args: list[str] | None = None, *, start_new_session: bool = False) -> None:
        self.stdout_file, self.stderr_file = _log_files(logs)
        self._out = self.stdout_file.open("wb")
        self._err = self.stderr_file.open("wb")
        self.proc = subprocess.Popen([*argv, "serve", str(folder), "--port", "0",
                                      *(extra_args or [])],
                                     stdout=self._out, stderr=self._err, env=env,
                                     preexec_fn=preexec_fn, start_new_session=start_new_session)
        self._port: int | None = None
        self._client: httpx.Client | None = None

    @property
    def port(self) -> int:
        """The port the server bound, from its start-up line (waited for, bounded)."""
        if self._port is None:
            self._port = self.wait_port()
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def client(self) -> httpx.Client:
        """An HTTP client for this server (``base_url`` set), closed by :meth:`stop`."""
        if self._client is None:
            self._client = httpx.Client(base_url=self.url, timeout=60)
        return self._client

    def wait_port(self, seconds: float = 60.0) -> int:
        """Poll (bounded) the output for the start-up line; return the port it names."""
        deadline = time.monotonic() + seconds
        while True:
            found = START_LINE.search(self.output())
            if found:
                return int(found.group(1))
            if self.proc.poll() is not None:
                raise AssertionError(f"brain serve exited with {self.proc.returncode} before "
                                     f"serving:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"brain serve never said its port:\n{self.output()}")
            time.sleep(0.02)

    def wait_healthy(self, seconds: float = 60.0) -> None:
        """Wait (bounded) until the server answers ``/health`` with 200."""
        wait_healthy(self.proc, self.url, self.output, seconds)

    def output(self) -> str:
        """Everything the server wrote so far (stdout, then stderr)."""
        for f in (self._out, self._err):
            if not f.closed:
                f.flush()
        return (self.stdout_file.read_text(errors="replace") + "\n"
                + self.stderr_file.read_text(errors="replace"))

    def stderr(self) -> str:
        return self.stderr_file.read_text(errors="replace")

    def stop(self, seconds: float = 30.0) -> int:
        """SIGTERM, then wait (bounded); SIGKILL only if it never stops. Returns the exit code."""
        if self._client is not None:
            self._client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(seconds)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError("brain serve did not stop after SIGTERM") from None
        self._out.close()
        self._err.close()
        return int(self.proc.returncode)

    def kill(self) -> None:
        """SIGKILL (a crash, or clean-up after a failed test) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def __enter__(self) -> BrainServer:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(AssertionError):  # killed instead: the test's own error counts
            self.stop()

    # --- API helpers --------------------------------------------------------------------------

    def run(self, run_id: str) -> dict[str, Any]:
        r = self.client.get(f"/api/runs/{run_id}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def wait_run(self, run_id: str, seconds: float = 20.0) -> dict[str, Any]:
        """Poll (bounded) until the run has ended; return its JSON."""
        deadline = time.monotonic() + seconds
        while True:
            data = self.run(run_id)
            if data["status"] in FINISHED:
                return data
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} never ended: {data}")
            time.sleep(0.05)

    def start_run(self, workflow: str, body: str = "") -> str:
        """Queue a run of ``workflow`` through the API; its id."""
        r = self.client.post(f"/api/workflows/{workflow}/runs", json={"body": body})
        assert r.status_code == 202, r.text
        return str(r.json()["run_id"])

    def wait_waiting(self, run_id: str, seconds: float = 20.0) -> dict[str, Any]:
        """Poll (bounded) until the run is ``waiting`` (SPEC §16); return its JSON. A run
        that ends first fails the test."""
        deadline = time.monotonic() + seconds
        while True:
            data = self.run(run_id)
            assert data["status"] not in FINISHED, data
            if data["status"] == "waiting":
                return data
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} never waited: {data}")
            time.sleep(0.05)

    def run_ids(self, workflow: str) -> list[str]:
        r = self.client.get("/api/runs", params={"workflow": workflow, "limit": 1000})
        assert r.status_code == 200, r.text
        return [item["run_id"] for item in r.json()]


def step_of(run: dict[str, Any], name: str) -> dict[str, Any]:
    """The step ``name`` of a run's JSON."""
    return next(s for s in run["steps"] if s["name"] == name)


async def wait_run(client: Any, run_id: str, seconds: float = 20.0) -> dict[str, Any]:
    """Poll ``GET /api/runs/{id}`` through an async client (bounded) until the run has ended."""
    deadline = time.monotonic() + seconds
    while True:
        r = await client.get(f"/api/runs/{run_id}")
        assert r.status_code == 200, r.text
        data = dict(r.json())
        if data["status"] in FINISHED:
            return data
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} never ended: {data}")
        await asyncio.sleep(0.05)


def start_worker(url: str, folder: Path, logs: Path, *,
                 concurrency: int = 4) -> subprocess.Popen[bytes]:
    """``brain worker FOLDER --concurrency N`` on the database at ``url``, a subprocess; its
    output in ``logs/worker-N.out``."""
    env = clean_env(logs / "unused.db", {"BRAIN_DATABASE_URL": url})
    n = 1 + sum(1 for _ in logs.glob("worker-*.out"))
    with (logs / f"worker-{n}.out").open("wb") as out:
        return subprocess.Popen([*brain_argv(), "worker", str(folder), "--concurrency",
                                 str(concurrency)], env=env, stdout=out,
                                stderr=subprocess.STDOUT)


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process still running, then wait; SIGKILL one that does not end."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class AppServer:
    """The app ``brain serve`` runs (``brain.server.create_app``), served by uvicorn in a
    thread of this process on 127.0.0.1 (a port of the system's choosing): real HTTP on
    loopback, for tests whose point is the API, not the ``brain serve`` process (its start-up,
    signals, exit codes and crashes keep their subprocess tests). Settings come from this
    process's environment (``BRAIN_DATABASE_URL``, ``BRAIN_API_TOKEN``, ...), set before;
    ``options`` go to ``create_app``."""

    def __init__(self, *paths: Path, **options: Any) -> None:
        import uvicorn

        from brain.server import create_app

        config = uvicorn.Config(create_app([str(p) for p in paths], **options), host="127.0.0.1",
                                port=0, log_config=None, lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="brain-app-server",
                                        daemon=True)
        self._client: httpx.Client | None = None

    def __enter__(self) -> AppServer:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise AssertionError("the app never started serving")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._client is not None:
            self._client.close()
        self._server.should_exit = True
        self._thread.join(60)
        assert not self._thread.is_alive(), "the app did not stop"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` of the bound socket."""
        sockets = self._server.servers[0].sockets
        return f"http://127.0.0.1:{sockets[0].getsockname()[1]}"

    @property
    def client(self) -> httpx.Client:
        """An HTTP client for this server (``base_url`` set), closed on exit."""
        if self._client is None:
            self._client = httpx.Client(base_url=self.url, timeout=60)
        return self._client
