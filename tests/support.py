"""Helpers shared by the test files: processes, polling, the test's SQLite file, workflow sources.

``tests/conftest.py`` puts this folder on ``sys.path``, so any test file can ``import support``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from brain import WorkflowDefinitionError, workflow

T = TypeVar("T")


# --- processes ----------------------------------------------------------------------------------


def free_port() -> int:
    """A loopback port nobody listens on now, for a server that cannot bind port 0 itself
    (a container's published port). Racy: another process may take it before that server
    binds it. ``brain serve`` binds ``--port 0`` and says its port (``serve_support.BrainServer``);
    an in-process server binds port 0 and reads its own socket."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(proc: Any, url: str, output: Callable[[], str], seconds: float = 30.0) -> None:
    """Wait until ``brain serve`` at ``url`` answers ``/health`` with 200; fail with its output
    if it exits first or never answers."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"brain serve exited with {proc.returncode}:\n{output()}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"brain serve did not answer /health:\n{output()}")


def _stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); ``None`` if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def pid_gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (reaped, or a zombie nobody reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    fields = _stat_fields(pid)
    # A killed child re-parented to an init that does not reap stays a zombie ("Z").
    return fields is None or fields[0] == b"Z"


def wait_gone(pid: int, seconds: float = 10.0) -> bool:
    """Poll (bounded) until process ``pid`` is gone; ``True`` when it is."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pid_gone(pid):
            return True
        time.sleep(0.05)
    return pid_gone(pid)


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is left in process group ``pgid``."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is not None and len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            return True
    return False


def kill_quietly(pid: int) -> None:
    """SIGKILL ``pid`` if it still exists: clean-up for a process a failing test may leave behind."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def kill_group_quietly(pgid: int) -> None:
    """SIGKILL process group ``pgid`` if it still exists (clean-up, like :func:`kill_quietly`)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


# --- polling --------------------------------------------------------------------------------------


def wait_for(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``predicate`` (bounded by ``timeout`` seconds) until it returns a truthy value; return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_file(path: Path, seconds: float = 10.0) -> str:
    """Poll (bounded) until ``path`` has content; return it, stripped."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.02)
    raise AssertionError(f"{path} was never written")


def read_pid(path: Path, seconds: float = 10.0) -> int:
    """The process id a step writes to ``path``, once it is there (bounded wait)."""
    return int(wait_for_file(path, seconds))


# --- the test's SQLite database -------------------------------------------------------------------


def sql_rows(tmp_path: Path, query: str, *args: object) -> list[sqlite3.Row]:
    """Rows of ``query`` on this test's database (``tmp_path / "brain.db"``), read directly."""
    con = sqlite3.connect(tmp_path / "brain.db")
    con.row_factory = sqlite3.Row
    try:
        return con.execute(query, args).fetchall()
    finally:
        con.close()


def running_step(db_file: Path) -> tuple[str, str] | None:
    """``(run id, step name)`` of a step running in a running run of ``db_file``, read-only; else ``None``."""
    if not db_file.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db_file}?mode=ro", uri=True, timeout=5)) as conn:
            row = conn.execute(
                "SELECT r.id, s.name FROM brain_runs r JOIN brain_steps s ON s.run_id = r.id "
                "WHERE r.status = 'running' AND s.status = 'running'").fetchone()
    except sqlite3.OperationalError:  # the schema is not there yet
        return None
    return (row[0], row[1]) if row else None


# --- workflow sources and definitions -------------------------------------------------------------


def write_source(folder: Path, name: str, source: str) -> Path:
    """Write ``source`` (dedented) to ``folder / name``; return the path."""
    path = folder / name
    path.write_text(textwrap.dedent(source).lstrip())
    return path


def definition_error(body: Callable[..., Any], *, name: str = "broken", **options: Any) -> str:
    """Decorate ``body`` as workflow ``name``; return the definition error's message."""
    with pytest.raises(WorkflowDefinitionError) as info:
        workflow(name=name, **options)(body)
    return str(info.value)


async def resume_once_expired(wf: Any, store: Any, run_id: str, seconds: float = 30.0) -> Any:
    """``resume_run`` until the run's lease has expired and it is resumed (bounded); its
    result, or ``None`` when it never was."""
    import asyncio

    from brain.runner import resume_run

    deadline = time.monotonic() + seconds
    result = None
    while result is None and time.monotonic() < deadline:
        result = await resume_run(wf, store, run_id)
        if result is None:
            await asyncio.sleep(0.25)
    return result


async def upgraded_schema(url: str) -> None:
    """Create (or upgrade) the schema of the database at ``url``, as ``brain db upgrade``
    does: a PostgreSQL schema is never created on open."""
    from brain.store import Store

    store = Store(url)
    await store.open(check_schema=False)
    try:
        await store.upgrade_schema()
    finally:
        await store.close()


# --- the process's known secrets ---------------------------------------------------------------

#: The sets ``brain._secrets`` keeps of what this process knows.
SECRET_SETS = ("_names", "_values", "_encoded", "_given")


@contextlib.contextmanager
def secrets_restored() -> Iterator[None]:
    """Whatever the block adds to the process's known secrets (values, their encoded forms,
    declared names) is forgotten after it: one test's secrets are not scrubbed from
    another's outputs."""
    from brain import _secrets

    saved = {name: set(getattr(_secrets, name)) for name in SECRET_SETS}
    try:
        yield
    finally:
        with _secrets._lock:
            for name, kept in saved.items():
                getattr(_secrets, name).clear()
                getattr(_secrets, name).update(kept)


@contextlib.contextmanager
def remembered(value: str, *, alone: bool = False) -> Iterator[None]:
    """The process knows ``value`` as a secret for the block (``alone``: and no other
    value), as hypothesis examples that share one process need."""
    from brain import _secrets

    with secrets_restored():
        if alone:
            with _secrets._lock:
                for name in ("_values", "_encoded", "_given"):
                    getattr(_secrets, name).clear()
        _secrets.remember(value)
        yield


def compose_command() -> list[str] | None:
    """How to run Compose here (``docker-compose``, else ``docker compose``), or ``None``."""
    import shutil
    import subprocess

    found = shutil.which("docker-compose")
    if found:
        return [found]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True,
                                 timeout=30).returncode == 0:
        return [docker, "compose"]
    return None


S = TypeVar("S")


@contextlib.contextmanager
def serving(make: Callable[[], contextlib.AbstractContextManager[S]], database: Path,
            **env: str | None) -> Iterator[S]:
    """An app server made by ``make`` (called once ``BRAIN_DATABASE_URL`` names the SQLite
    file ``database`` and ``env`` is set; ``None`` unsets a variable), the environment put
    back once it stopped: for a module's server fixture. Its URL is kept as ``db_url``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BRAIN_DATABASE_URL", f"sqlite+aiosqlite:///{database}")
        for key, value in env.items():
            if value is None:
                patch.delenv(key, raising=False)
            else:
                patch.setenv(key, value)
        with make() as app:
            app.db_url = os.environ["BRAIN_DATABASE_URL"]  # type: ignore[attr-defined]
            yield app
