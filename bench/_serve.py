"""Starting and stopping servers for the benchmarks: ``brain serve`` and a bare app.

Imported by the bench scripts (run as ``python bench/NAME.py``, so this folder
is on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_env(db: Path) -> dict[str, str]:
    """This environment without the caller's Brain settings, on the SQLite file ``db``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "THE_BRAIN_"))}
    env["BRAIN_DATABASE_URL"] = f"sqlite+aiosqlite:///{db}"
    return env


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a server process in its own session, its output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, probe: str = "/health") -> None:
    """Wait (up to 60 s) until ``url + probe`` answers; exit with the log if the server dies."""
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            httpx.post(url + probe, content=b"", timeout=1) if probe.startswith("/hooks") \
                else httpx.get(url + probe, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    sys.exit(f"the server did not start:\n{log.read_text()}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it is still there after 30 s."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@contextlib.contextmanager
def brain_serve(folder: Path, env: dict[str, str], log: Path) -> Iterator[str]:
    """``brain serve FOLDER`` on a free port, ready; yields its base URL; stops it after."""
    port = free_port()
    brain_exe = Path(sys.executable).with_name("brain")
    proc = start([str(brain_exe), "serve", str(folder), "--port", str(port)], env, log)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log)
        yield url
    finally:
        stop(proc)
