"""One step never runs twice at once on one machine (SPEC §4, Integrity), even when the
executor running it is frozen (``SIGSTOP``) for longer than its lease and a second
executor resumes the run meanwhile.

The step checks it itself: it takes an exclusive, non-blocking ``flock`` on a file (the
kernel releases it when the last process holding it dies) and writes ``OVERLAP`` if
another copy holds it. It drops its environment first (``env -i``), so it cannot be
found by the ``BRAIN_RUN_ID`` it was started with: only what the runner recorded (its
process group and the start time of the group's leader) can find it.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_support import brain_argv, clean_env
from support import kill_group_quietly, pid_gone, wait_for, write_source

from brain.loader import load_file
from brain.results import TriggerData
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

LEASE = 4  # seconds; the freeze outlasts it (short, but not so short that load breaks it)

# Run as `env -i /bin/sh guarded.sh DIR`. The first try sleeps long (a second copy would
# meet it); any later try is quick.
GUARDED = """
PATH=/usr/bin:/bin
exec 9>>"$1/lock"
if ! flock -n 9; then echo "OVERLAP $$" >> "$1/log"; fi
echo "start $$" >> "$1/log"
trap 'echo "TERM $$" >> "$1/log"; exit 143' TERM
if mkdir "$1/first-try" 2>/dev/null; then sleep 60 & wait; else sleep 0.5; fi
echo "end $$" >> "$1/log"
"""


def guarded_workflow(tmp_path: Path) -> Path:
    """A folder with workflow ``guarded``: one shell step that drops its environment."""
    if shutil.which("flock") is None:
        pytest.skip("no flock command here")
    (tmp_path / "guarded.sh").write_text(GUARDED)
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "guarded.py", f"""
        from brain import shell, workflow

        @workflow
        def guarded():
            shell("guarded", command="exec env -i /bin/sh {tmp_path}/guarded.sh {tmp_path}")
    """)
    return folder


def log_lines(tmp_path: Path) -> list[str]:
    path = tmp_path / "log"
    return path.read_text().splitlines() if path.exists() else []


def started(tmp_path: Path) -> list[int]:
    """The pids (= process groups) of the step's copies that have started."""
    return [int(line.split()[1]) for line in log_lines(tmp_path) if line.startswith("start ")]


class Executors:
    """``brain worker`` subprocesses, each its own session, their output in files; all of
    them (and any step copy left) are ended afterwards, frozen or not."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.tmp_path = tmp_path
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, folder: Path) -> subprocess.Popen[bytes]:
        index = len(self.procs)
        with (self.tmp_path / f"worker{index}.log").open("wb") as out:
            proc = subprocess.Popen([*brain_argv(), "worker", str(folder)], env=self.env,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.procs.append(proc)
        return proc

    def output(self) -> str:
        return "\n".join((self.tmp_path / f"worker{i}.log").read_text(errors="replace")
                         for i in range(len(self.procs)))

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for pgid in started(self.tmp_path):
            kill_group_quietly(pgid)


@pytest.fixture
def executors(tmp_path: Path) -> Iterator[list[Executors]]:
    made: list[Executors] = []
    yield made
    for each in made:
        each.close()


def in_store(url: str, job: Any) -> Any:
    async def go() -> Any:
        async with Store(url) as store:
            return await job(store)

    return asyncio.run(go())


def enqueue(url: str, folder: Path) -> str:
    import uuid

    wf = load_file(folder / "guarded.py")["guarded"]
    run_id = uuid.uuid4().hex
    in_store(url, lambda store: store.enqueue_run(
        run_id=run_id, workflow=wf.name, definition_hash=wf.definition_hash,
        trigger=TriggerData(), step_rows=[(s.name, s.kind) for s in wf.spec.steps]))
    return run_id


def recorded_running(url: str, run_id: str) -> bool:
    """Whether the step is recorded ``running``, with its process group."""
    async def look(store: Store) -> bool:
        run = await store.get_run(run_id)
        return run.steps["guarded"].status == "running" and bool(
            await store.step_processes(run_id))

    return bool(in_store(url, look))


def finished(url: str, run_id: str) -> Any:
    run = in_store(url, lambda store: store.get_run(run_id))
    return run if run.status in ("succeeded", "failed", "cancelled") else None


def freeze_past_lease(worker: subprocess.Popen[bytes], tmp_path: Path, url: str,
                      run_id: str) -> int:
    """Once the step has started and is recorded running with its process group, SIGSTOP
    ``worker`` and wait until the database says its lease has expired; return the pid of
    the step's copy that the frozen worker started."""
    [copy] = wait_for(lambda: started(tmp_path), 60, "the step to start")
    wait_for(lambda: recorded_running(url, run_id), 30, "the step to be recorded")
    worker.send_signal(signal.SIGSTOP)
    wait_for(lambda: run_id in in_store(url, lambda store: store.expired_runs()), 30,
             "the frozen worker's lease to expire")
    return copy


def assert_one_copy_at_a_time(tmp_path: Path, run: Any, frozen: int, output: str) -> None:
    """No copy of the step met another; the frozen one was SIGKILLed (never saw a SIGTERM,
    never ended); the run ended succeeded, with a try for each copy that started."""
    lines = log_lines(tmp_path)
    copies = started(tmp_path)
    assert not [line for line in lines if line.startswith("OVERLAP")], (
        f"two copies of the step ran at once: {lines}\n{output}")
    assert not [line for line in lines if line.startswith("TERM")], (
        f"a step was sent SIGTERM, not SIGKILL: {lines}\n{output}")
    assert copies[0] == frozen and len(copies) >= 2, lines
    assert f"end {frozen}" not in lines, lines
    assert lines[-1] == f"end {copies[-1]}", lines
    assert pid_gone(frozen)
    assert run.status == "succeeded", (run.error, output)
    assert run.steps["guarded"].status == "succeeded"
    assert run.steps["guarded"].tries == len(copies), (lines, output)


def test_a_frozen_executors_step_never_runs_beside_its_resumed_copy(
        tmp_path: Path, fresh_pg_url: str, executors: list[Executors]) -> None:
    """PostgreSQL, two `brain worker`s: the first is frozen past its lease while its step
    runs; the second resumes the run, so it first ends the step the frozen one left (found
    by its recorded process group), then runs it again; the first, thawed, writes nothing."""
    folder = guarded_workflow(tmp_path)
    url = fresh_pg_url
    in_store_upgrade = subprocess.run([*brain_argv(), "db", "upgrade"], capture_output=True,
                                      text=True, timeout=120,
                                      env=clean_env(tmp_path / "x.db",
                                                    {"BRAIN_DATABASE_URL": url}))
    assert in_store_upgrade.returncode == 0, in_store_upgrade.stderr
    env = clean_env(tmp_path / "x.db", {"BRAIN_DATABASE_URL": url,
                                        "BRAIN_LEASE_SECONDS": str(LEASE)})
    workers = Executors(tmp_path, env)
    executors.append(workers)
    run_id = enqueue(url, folder)
    first = workers.start(folder)

    # Frozen once its step has started, recorded as running with its process group.
    copy1 = freeze_past_lease(first, tmp_path, url, run_id)

    workers.start(folder)  # looks for abandoned runs as it starts
    wait_for(lambda: len(started(tmp_path)) >= 2 or finished(url, run_id), 60,
             "the second worker to run the step again")
    first.send_signal(signal.SIGCONT)
    run = wait_for(lambda: finished(url, run_id), 60, "the run to end")

    assert_one_copy_at_a_time(tmp_path, run, copy1, workers.output())
    # The thawed worker found its lease gone and stopped, and it still serves.
    assert first.poll() is None
    assert "lease could not be renewed in time" in workers.output()


def test_a_thawed_executor_kills_its_steps_at_once_and_writes_nothing(
        tmp_path: Path, executors: list[Executors]) -> None:
    """SQLite, one `brain worker`, frozen past its lease with nobody to resume the run
    meanwhile. Thawed, it finds its lease lost: it SIGKILLs its step's process group at
    once (the step traps SIGTERM, so a SIGTERM would show in its log), records nothing of
    that try's end, and later resumes the run like any abandoned one."""
    folder = guarded_workflow(tmp_path)
    url = f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"
    workers = Executors(tmp_path, clean_env(tmp_path / "brain.db",
                                            {"BRAIN_LEASE_SECONDS": str(LEASE)}))
    executors.append(workers)
    run_id = enqueue(url, folder)
    worker = workers.start(folder)
    copy1 = freeze_past_lease(worker, tmp_path, url, run_id)
    worker.send_signal(signal.SIGCONT)
    run = wait_for(lambda: finished(url, run_id), 60, "the run to end")

    assert_one_copy_at_a_time(tmp_path, run, copy1, workers.output())
