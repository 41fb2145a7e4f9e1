"""Databases and ``brain worker`` processes for ``bench/scale_out.py``.

Each worker runs in a session of its own, so stopping it (SIGTERM, SIGKILL after a grace)
also reaches anything its steps started; nothing is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BRAIN = str(Path(sys.executable).with_name("brain"))
READY = "The Brain worker:"


def sql(url: str, statement: str, *args: Any) -> list[Any]:
    """Rows of one statement on ``url`` (a ``postgresql+asyncpg://`` URL)."""
    import asyncpg  # type: ignore[import-untyped]

    async def go() -> list[Any]:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            return list(await conn.fetch(statement, *args))
        finally:
            await conn.close()

    return asyncio.run(go())


@contextlib.contextmanager
def database(server: str, name: str, env: dict[str, str]) -> Iterator[str]:
    """A new database ``name`` on the server of ``server`` (any database URL there), with
    The Brain's schema (``brain db upgrade``); its URL; dropped afterwards."""
    url = server.rsplit("/", 1)[0] + "/" + name
    sql(server, f"CREATE DATABASE {name}")
    try:
        subprocess.run([BRAIN, "db", "upgrade"], env=dict(env, BRAIN_DATABASE_URL=url),
                       check=True, capture_output=True)
        yield url
    finally:
        sql(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, SIGKILL after 30 s; then SIGKILL to whatever is left of its session."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, its reaped children's included) of a live process so
    far; 0 where ``/proc`` cannot tell."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime, stime, cutime, cstime: fields 14-17 of proc(5), counted after the ")".
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine so far (``/proc/stat``), or (0, 0)."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0, 0
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


@dataclass
class Workers:
    """The running workers: how long each took to be ready (Popen to start-up line)."""

    ready: list[float]
    pids: list[int] = field(default_factory=list)

    def cpu_seconds(self) -> float:
        """CPU seconds the workers (and the steps they started) used so far."""
        return sum(cpu_seconds(pid) for pid in self.pids)


@contextlib.contextmanager
def workers(count: int, flows: Path, url: str, concurrency: int, env: dict[str, str],
            logs: Path) -> Iterator[Workers]:
    """``count`` ``brain worker FLOWS --concurrency N`` processes, each started and ready
    (its start-up line written); yields them; stops them all."""
    env = dict(env, BRAIN_DATABASE_URL=url)
    procs: list[tuple[subprocess.Popen[bytes], Path, float]] = []
    try:
        for i in range(count):
            log = logs / f"worker-{i}.log"
            with log.open("wb") as out:
                procs.append((subprocess.Popen(
                    [BRAIN, "worker", str(flows), "--concurrency", str(concurrency)],
                    env=env, cwd=flows.parent, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True), log, time.perf_counter()))
        ready: dict[int, float] = {}
        while len(ready) < count:  # all at once: each is timed when its line appears
            for i, (proc, log, t0) in enumerate(procs):
                if i in ready:
                    continue
                if READY in log.read_text(errors="replace"):
                    ready[i] = time.perf_counter() - t0
                elif proc.poll() is not None or time.perf_counter() > t0 + 60:
                    sys.exit(f"a worker did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.01)
        yield Workers([ready[i] for i in range(count)], [p.pid for p, _, _ in procs])
    finally:
        for proc, _, _ in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        for proc, _, _ in procs:
            stop(proc)
