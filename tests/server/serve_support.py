"""Helpers for the server tests: a real ``brain serve`` subprocess, polling.

``conftest.py`` puts this folder on ``sys.path`` so test files can ``import serve_support``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
from support import free_port, wait_healthy

FINISHED = {"succeeded", "failed", "cancelled"}


def brain_argv() -> list[str]:
    """The real ``brain`` command (same rule as the ``brain_cmd`` fixture, usable at any scope)."""
    exe = shutil.which("brain", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "brain.cli"]


def clean_env(db_file: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without any Brain settings, with a private database."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BRAIN_", "THE_BRAIN_", "LLM_"))}
    env["BRAIN_DATABASE_URL"] = f"sqlite+aiosqlite:///{db_file}"
    env.update(extra or {})
    return env


class BrainServer:
    """A ``brain serve FOLDER --port N`` subprocess on 127.0.0.1, its output in files."""

    def __init__(self, argv: list[str], folder: Path, logs: Path, env: dict[str, str],
                 preexec_fn: Callable[[], None] | None = None,
                 extra_args: list[str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stdout_file = logs / "serve.stdout"
        self.stderr_file = logs / "serve.stderr"
        self._out = self.stdout_file.open("wb")
        self._err = self.stderr_file.open("wb")
        self.proc = subprocess.Popen([*argv, "serve", str(folder), "--port", str(self.port),
                                      *(extra_args or [])],
                                     stdout=self._out, stderr=self._err, env=env,
                                     preexec_fn=preexec_fn)
        self.client = httpx.Client(base_url=self.url, timeout=30)

    def wait_healthy(self, seconds: float = 30.0) -> None:
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
        self.client.close()
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

    def run_ids(self, workflow: str) -> list[str]:
        r = self.client.get("/api/runs", params={"workflow": workflow, "limit": 1000})
        assert r.status_code == 200, r.text
        return [item["run_id"] for item in r.json()]


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
