"""What a user sees at the CLI's edges, each through the real ``brain`` command in a subprocess:
output into a closed pipe, unusable databases, folders as PATH, the live view, and a timed-out
sync ``@step``."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import write_source

BIG = """
    from brain import shell, workflow

    @workflow
    def big():
        shell("lines", command="seq 1 60000")
"""

FAILS = """
    from brain import shell, workflow

    @workflow
    def fails():
        shell("lines", command="seq 1 60000; exit 3")
"""

ONE = """
    from brain import shell, workflow

    @workflow
    def {name}():
        shell("first", command="echo {name}-first")
        shell("second", command="echo {name}-second")
"""

BROKEN_HELPER = "raise RuntimeError('a helper that must not be imported')\n"

SLOW_SYNC = """
    import time
    from pathlib import Path

    from brain import step, workflow

    @step(timeout_seconds=1)
    def slow() -> str:
        # Blocked until the test says (after `brain run` has exited), then a side effect.
        release = Path(__file__).with_name("release")
        deadline = time.monotonic() + 120
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        Path(__file__).with_name("side_effect.txt").write_text("written")
        return "done"

    @workflow
    def slowflow():
        slow()
"""

NOISE = ("Traceback", "BrokenPipeError", "Exception ignored")


def brain(brain_cmd: list[str], *args: str | os.PathLike[str], cwd: Path | None = None,
          env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the real ``brain`` command; the environment carries this test's database URL."""
    return subprocess.run([*brain_cmd, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=timeout, check=False)


def into_closed_pipe(brain_cmd: list[str], *args: str | os.PathLike[str],
                     cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``brain`` with stdout a pipe whose reader has already gone (``| true`` that won the
    race): every write to stdout fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([*brain_cmd, *map(str, args)], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, env=os.environ.copy(), cwd=cwd,
                              timeout=60, check=False)
    finally:
        os.close(write_end)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", proc.stderr)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The single ``error:`` line a failed command printed (and nothing else)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), proc.stderr
    assert proc.stdout == ""
    return lines[0]


# --- output into a closed pipe ----------------------------------------------------------------------


def test_output_into_a_closed_pipe_ends_quietly_with_the_normal_exit_code(
        tmp_path: Path, brain_cmd: list[str]) -> None:
    big = write_source(tmp_path, "big.py", BIG)
    fails = write_source(tmp_path, "fails.py", FAILS)
    first = brain(brain_cmd, "run", big, "--json")
    assert first.returncode == 0, first.stderr
    run_id = json.loads(first.stdout)["run_id"]

    cases = [(["run", big], 0), (["run", big, "--json"], 0), (["run", fails, "--json"], 1),
             (["runs", "--json"], 0), (["runs"], 0), (["show", run_id, "--json"], 0),
             (["show", run_id], 0), (["graph", big, "--mermaid"], 0), (["graph", big], 0),
             (["--version"], 0)]
    # Side by side: each command waits on its own process, none on another's output.
    with ThreadPoolExecutor(4) as pool:
        procs = list(pool.map(lambda case: into_closed_pipe(brain_cmd, *case[0]), cases))
    for (args, code), proc in zip(cases, procs, strict=True):
        assert proc.returncode == code, (args, proc.stderr)
        for noise in NOISE:
            assert noise not in proc.stderr, (args, proc.stderr)


def test_head_of_a_long_output(tmp_path: Path, brain_cmd: list[str]) -> None:
    big = write_source(tmp_path, "big.py", BIG)
    brain(brain_cmd, "run", big)
    for args in (["run", str(big)], ["run", str(big), "--json"], ["runs", "--json"]):
        proc = subprocess.run(["bash", "-c", '"$@" | head -c 5; exit "${PIPESTATUS[0]}"', "_",
                               *brain_cmd, *args],
                              capture_output=True, text=True, env=os.environ.copy(), timeout=60,
                              check=False)
        assert proc.returncode == 0, (args, proc.stderr)
        assert len(proc.stdout) == 5
        for noise in NOISE:
            assert noise not in proc.stderr, (args, proc.stderr)


def test_closed_stderr_does_not_stop_the_run(tmp_path: Path, brain_cmd: list[str]) -> None:
    """The live view writing into a closed pipe goes quiet; the run itself goes on to the end."""
    big = write_source(tmp_path, "big.py", BIG)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([*brain_cmd, "run", str(big), "--json"], stdout=subprocess.PIPE,
                              stderr=write_end, text=True, env=os.environ.copy(), timeout=60,
                              check=False)
    finally:
        os.close(write_end)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["status"] == "succeeded"


# --- a database that cannot be used -------------------------------------------------------------

STORE_COMMANDS = [["runs"], ["show", "abc123"], ["cancel", "abc123"], ["prune", "--older-than", "1d"],
                  ["db", "upgrade"], ["run", "{flow}"], ["run", "{flow}", "--json"]]


def _commands(flow: Path) -> list[list[str]]:
    return [[a.replace("{flow}", str(flow)) for a in args] for args in STORE_COMMANDS]


def test_database_in_a_missing_folder_is_one_line(tmp_path: Path, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "flow.py", ONE.format(name="flow"))
    missing = tmp_path / "no" / "such" / "folder"
    env = {"BRAIN_DATABASE_URL": f"sqlite+aiosqlite:///{missing / 'brain.db'}"}
    for args in _commands(flow):
        proc = brain(brain_cmd, *args, env=env)
        assert proc.returncode == 2, (args, proc.stderr)
        line = one_error_line(proc)
        assert str(missing) in line and "does not exist" in line, line
    assert not missing.exists()


def test_a_failed_sqlite_connect_leaves_no_thread_traceback(tmp_path: Path,
                                                            brain_cmd: list[str]) -> None:
    """A URI filename is passed to SQLite as is, so the connect itself fails (here: the name
    is a folder); aiosqlite's thread must finish before the event loop closes, or it prints
    a traceback after the message (it did in most tries). (A URI naming a file that does
    not exist is found missing before any connect: see test_stale_runs.)"""
    (tmp_path / "a-folder.db").mkdir()
    url = f"sqlite+aiosqlite:///file:{tmp_path / 'a-folder.db'}?uri=true"
    for _ in range(4):
        proc = brain(brain_cmd, "runs", env={"BRAIN_DATABASE_URL": url})
        assert proc.returncode == 2
        assert "unable to open database file" in one_error_line(proc)


def test_database_newer_than_the_code_is_one_line(tmp_path: Path, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "flow.py", ONE.format(name="flow"))
    assert brain(brain_cmd, "db", "upgrade").returncode == 0
    with sqlite3.connect(tmp_path / "brain.db") as con:
        con.execute("UPDATE alembic_version SET version_num = '9999_future'")
    for args in _commands(flow):
        proc = brain(brain_cmd, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        line = one_error_line(proc)
        assert "9999_future" in line and "Upgrade The Brain" in line, line
    with sqlite3.connect(tmp_path / "brain.db") as con:  # left as it was
        assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [("9999_future",)]


_HEADER = b"SQLite format 3\x00"


@settings(max_examples=14, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(content=st.one_of(st.binary(min_size=1, max_size=8192),
                         st.binary(max_size=8192).map(lambda b: _HEADER + b)),
       command=st.sampled_from(range(len(STORE_COMMANDS))))
def test_random_bytes_as_the_database_file_is_one_line(tmp_path: Path, brain_cmd: list[str],
                                                       content: bytes, command: int) -> None:
    flow = write_source(tmp_path, "flow.py", ONE.format(name="flow"))
    db = tmp_path / f"corrupt-{os.urandom(4).hex()}.db"
    db.write_bytes(content)
    args = _commands(flow)[command]
    proc = brain(brain_cmd, *args, env={"BRAIN_DATABASE_URL": f"sqlite+aiosqlite:///{db}"})
    assert proc.returncode == 2, (args, content[:40], proc.stderr)
    assert str(db) in one_error_line(proc)
    assert db.read_bytes() == content  # never overwritten with a new database


# --- folders as PATH ------------------------------------------------------------------------------


def _flows_folder(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "flows"
    folder.mkdir()
    for name in names:
        write_source(folder, f"{name}.py", ONE.format(name=name))
    # Skipped by the folder rules (each would fail to import), and a sub-folder (not recursive).
    for skipped in ("_helper.py", "test_flows.py", "conftest.py"):
        (folder / skipped).write_text(BROKEN_HELPER)
    (folder / "sub").mkdir()
    (folder / "sub" / "deep.py").write_text(BROKEN_HELPER)
    (folder / "notes.txt").write_text("not python")
    return folder


def test_check_a_folder(tmp_path: Path, brain_cmd: list[str]) -> None:
    folder = _flows_folder(tmp_path, "alpha", "beta")
    proc = brain(brain_cmd, "check", folder)
    assert proc.returncode == 0, proc.stderr
    assert "alpha (2 steps)" in proc.stdout and "beta (2 steps)" in proc.stdout
    assert "no such file" not in proc.stderr

    here = brain(brain_cmd, "check", cwd=folder)  # the default is the current folder
    assert here.returncode == 0, here.stderr
    assert "alpha" in here.stdout and "beta" in here.stdout


def test_check_the_shipped_examples_folder(brain_cmd: list[str]) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    proc = brain(brain_cmd, "check", f"{examples}/")
    assert "no such file" not in proc.stderr
    # Every workflow file of the folder is checked (whether each passes is tests/test_examples.py's).
    for file in examples.glob("*.py"):
        assert f"{file.name}:" in proc.stdout + proc.stderr, file
    assert "hello (2 steps)" in proc.stdout


def test_check_a_folder_with_a_broken_file_or_a_duplicate_name(tmp_path: Path,
                                                                 brain_cmd: list[str]) -> None:
    folder = _flows_folder(tmp_path, "alpha")
    (folder / "broken.py").write_text("from brain import workflow\n\nundefined_helper()\n")
    proc = brain(brain_cmd, "check", folder)
    assert proc.returncode == 2
    assert "broken.py" in proc.stderr and "NameError" in proc.stderr
    assert "alpha (2 steps)" in proc.stdout  # the good file is still checked
    assert "Traceback" not in proc.stderr

    (folder / "broken.py").unlink()
    write_source(folder, "again.py", ONE.format(name="alpha"))
    dup = brain(brain_cmd, "check", folder)
    assert dup.returncode == 2
    assert "'alpha' is defined twice" in dup.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    none = brain(brain_cmd, "check", empty)
    assert none.returncode == 2
    assert "no workflow" in one_error_line(none)


def test_run_and_graph_a_folder(tmp_path: Path, brain_cmd: list[str]) -> None:
    folder = _flows_folder(tmp_path, "alpha")
    run = brain(brain_cmd, "run", folder)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "alpha-second"
    graph = brain(brain_cmd, "graph", folder)
    assert graph.returncode == 0, graph.stderr
    assert graph.stdout.split() == ["alpha", "first", "second", "←", "first"]

    write_source(folder, "beta.py", ONE.format(name="beta"))
    several = brain(brain_cmd, "run", folder)
    assert several.returncode == 2
    line = one_error_line(several)
    assert "alpha, beta" in line and f"{folder}:NAME" in line
    named = brain(brain_cmd, "run", f"{folder}:beta")
    assert named.returncode == 0, named.stderr
    assert named.stdout.strip() == "beta-second"
    unknown = brain(brain_cmd, "graph", f"{folder}:gamma")
    assert unknown.returncode == 2
    assert "no workflow 'gamma'" in one_error_line(unknown)


# --- the live view ------------------------------------------------------------------------------


def test_live_view_shows_each_step_final_status_once(capsys: pytest.CaptureFixture[str]) -> None:
    from brain import shell, workflow
    from brain.cli.render import Progress
    from brain.runner.events import StepEvent

    @workflow
    def twice() -> None:
        shell("a", command="echo a")
        shell("b", command="echo b")

    view = Progress(twice)
    assert capsys.readouterr().err == ""  # no header before the run has started
    for status, step, error in [("running", "a", None), ("running", "b", None),
                                ("failed", "a", "boom"), ("cancelled", "a", None),
                                ("cancelled", "b", None), ("skipped", "b", None)]:
        view(StepEvent("r1", step, "shell", status, 1, error))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("twice")
    a_lines = [line for line in lines[1:] if line.split()[1].rstrip(":") == "a"]
    b_lines = [line for line in lines[1:] if line.split()[1].rstrip(":") == "b"]
    assert len(a_lines) == 2 and "boom" in a_lines[1] and "cancelled" not in "".join(a_lines)
    assert len(b_lines) == 2 and "cancelled" in b_lines[1] and "skipped" not in "".join(b_lines)


# --- a timed-out sync @step -----------------------------------------------------------------------


def test_timed_out_sync_step_fails_and_the_process_does_not_wait(tmp_path: Path,
                                                                  brain_cmd: list[str]) -> None:
    """docs/workflows.md: the step fails at its timeout, the thread is abandoned, and
    ``brain run`` exits when the run ends, cutting the function off."""
    flow = write_source(tmp_path, "slow.py", SLOW_SYNC)
    # The function is blocked until released, which happens only once `brain run` exited:
    # had it waited for the function, it would never exit (the call's timeout fails the test).
    proc = brain(brain_cmd, "run", flow, "--json")
    assert proc.returncode == 1, proc.stderr
    run = json.loads(proc.stdout)
    assert run["status"] == "failed"
    assert run["steps"][0]["status"] == "failed"
    assert run["steps"][0]["error"] == "timed out after 1 s"
    (tmp_path / "release").touch()
    time.sleep(0.5)  # what the function would do once released, it would have done by now
    assert not (tmp_path / "side_effect.txt").exists()
