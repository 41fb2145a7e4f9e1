"""The ``brain`` command line, each command run as a real subprocess on a real SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import group_alive, kill_group_quietly, read_pid, running_step, wait_for, write_source

from brain._version import __version__

GOOD = """
    from brain import shell, trigger, workflow

    @workflow
    def greet():
        who = shell("who", command="echo world")
        shell("say", argv=["echo", f"hello {who} body={trigger.body}"])

    @workflow
    def other():
        shell("only", command="echo other-output")
"""

ORDERED = """
    from brain import shell, workflow

    @workflow
    def ordered():
        shell("zeta", command="echo z")
        shell("alpha", command="echo a")
        shell("mid", command="echo m")
"""

FAILING = """
    from brain import shell, workflow

    @workflow
    def failing():
        shell("fine", command="echo ok")
        shell("boom", command="echo oops >&2; exit 3")
        shell("never", command="echo never")
"""

FAN = """
    from brain import parallel, shell, workflow

    @workflow
    def fan():
        shell("a", command="echo a")
        with parallel():
            shell("b", command="echo b")
            shell("c", command="echo c")
        shell("d", command="echo d")
"""

LONG = """
    from brain import shell, workflow

    @workflow
    def longrun():
        shell("before", command="echo start")
        shell("wait", command="echo $$ > step.pid; sleep 300", timeout_seconds=600)
        shell("after", command="echo done")
"""

BROKEN = {
    "syntax": ("from brain import workflow\n\n@workflow\ndef broken(:\n    pass\n", "SyntaxError"),
    "name_error": ("from brain import workflow\n\nundefined_helper()\n", "NameError"),
    "definition": (
        "from brain import shell, workflow\n\n@workflow\ndef dup():\n"
        "    shell('a', command='echo 1')\n    shell('a', command='echo 2')\n",
        "duplicate step name"),
    # A file that ends the process while imported: without a guard, `brain check` said
    # nothing and exited 0.
    "os_exit": ("import os\n\nos._exit(0)\n",
                "broken_flow.py:3: the file exited while being imported (os._exit(0))"),
    "sys_exit": ("import sys\n\nsys.exit(0)\n",
                 "broken_flow.py:3: the file exited while being imported (sys.exit(0))"),
    # No line number to show (it was shown as "None").
    "nul_byte": ("from brain import workflow\n\x00\n",
                 "broken_flow.py: SyntaxError: source code string cannot contain null bytes"),
}

PASSWORD_URL = "postgresql+asyncpg://u:s3cret@127.0.0.1:1/x"


def brain(brain_cmd: list[str], *args: str | os.PathLike[str], cwd: Path | None = None,
          env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the real ``brain`` command; the environment carries this test's database URL."""
    full_env = os.environ.copy()
    full_env.update(env or {})
    return subprocess.run([*brain_cmd, *map(str, args)], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout, check=False)


def brain_many(brain_cmd: list[str], *arglists: list[str | os.PathLike[str]],
               env: dict[str, str] | None = None,
               timeout: float = 60) -> list[subprocess.CompletedProcess[str]]:
    """Run several independent ``brain`` commands at once (each is a real process)."""
    full_env = os.environ.copy()
    full_env.update(env or {})
    procs = [subprocess.Popen([*brain_cmd, *map(str, args)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=full_env)
             for args in arglists]
    done = []
    for args, proc in zip(arglists, procs, strict=True):
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess([*brain_cmd, *map(str, args)], proc.returncode, out, err))
    return done


def runs_json(brain_cmd: list[str], *args: str) -> list[dict]:
    proc = brain(brain_cmd, "runs", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def nothing_recorded(brain_cmd: list[str]) -> bool:
    """Not even a database was created: ``brain runs`` (which creates none) says so, exit 2."""
    proc = brain(brain_cmd, "runs", "--json")
    return proc.returncode == 2 and "no database at" in proc.stderr and proc.stdout == ""


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


# --- brain run ------------------------------------------------------------------------------


def test_run_prints_output_and_progress(tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "flows.py", GOOD)
    proc = brain(brain_cmd, "run", f"{wf}:greet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "hello world body="
    # live progress goes to stderr, one line per step event, never to stdout
    assert "who" in proc.stderr and "say" in proc.stderr
    assert "succeeded" in proc.stderr
    assert "who" not in proc.stdout
    runs = runs_json(brain_cmd)
    assert [(r["workflow"], r["status"]) for r in runs] == [("greet", "succeeded")]


def test_run_prints_a_long_output_line_unchanged(tmp_path: Path, brain_cmd: list[str]) -> None:
    line = " ".join(f"word{i}" for i in range(60))  # far wider than any terminal default
    wf = write_source(tmp_path, "wide.py", f"""
        from brain import shell, workflow

        @workflow
        def wide():
            shell("say", argv=["echo", {line!r}])
    """)
    proc = brain(brain_cmd, "run", wf)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == line + "\n"


def test_run_shows_emoji_codes_in_errors_as_written(tmp_path: Path, brain_cmd: list[str]) -> None:
    """A step's text such as ``:x:`` is shown as it is, never turned into an emoji."""
    wf = write_source(tmp_path, "codes.py", """
        from brain import shell, workflow

        @workflow
        def codes():
            shell("fails", command="echo 'broken :x: :thumbs_up:' >&2; exit 3")
    """)
    proc = brain(brain_cmd, "run", wf)
    assert proc.returncode == 1, proc.stderr
    assert "broken :x: :thumbs_up:" in proc.stderr, proc.stderr
    assert "\N{CROSS MARK}" not in proc.stderr and "\N{THUMBS UP SIGN}" not in proc.stderr


def test_run_file_colon_name_picks_that_workflow(tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "flows.py", GOOD)
    proc = brain(brain_cmd, "run", f"{wf}:other")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "other-output"
    assert [r["workflow"] for r in runs_json(brain_cmd)] == ["other"]


def test_run_several_workflows_without_name_lists_them(tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "flows.py", GOOD)
    proc = brain(brain_cmd, "run", wf)
    assert proc.returncode == 2
    assert "greet" in proc.stderr and "other" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert nothing_recorded(brain_cmd)


def test_run_unknown_workflow_name_exit_2(tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "flows.py", GOOD)
    proc = brain(brain_cmd, "run", f"{wf}:nope")
    assert proc.returncode == 2
    assert "nope" in proc.stderr and "greet" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_body_reaches_trigger_body(tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "flows.py", GOOD)
    body = "it's a $HOME; `x` test"
    proc = brain(brain_cmd, "run", f"{wf}:greet", "--body", body)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"hello world body={body}"
    run = runs_json(brain_cmd)[0]
    assert run["trigger"]["body"] == body
    assert run["trigger"]["event"] == "manual"


def test_run_json_stdout_is_only_the_run(tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "ordered.py", ORDERED)
    proc = brain(brain_cmd, "run", wf, "--json", "--body", "payload")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # nothing but JSON on stdout
    assert {"run_id", "workflow", "status", "error", "trigger", "steps",
            "started_at", "ended_at"} <= set(data)
    assert len(data["run_id"]) == 32 and int(data["run_id"], 16) >= 0
    assert data["workflow"] == "ordered"
    assert data["status"] == "succeeded"
    assert data["error"] is None
    assert data["trigger"]["body"] == "payload"
    assert [s["name"] for s in data["steps"]] == ["zeta", "alpha", "mid"]
    assert [s["output"] for s in data["steps"]] == ["z", "a", "m"]
    assert all(s["status"] == "succeeded" and s["tries"] == 1 for s in data["steps"])
    # `brain show --json` gives the same run
    shown = brain(brain_cmd, "show", data["run_id"], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == data


def test_failed_run_exits_1(tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "failing.py", FAILING)
    proc = brain(brain_cmd, "run", wf)
    assert proc.returncode == 1
    assert "boom" in proc.stderr and "failed" in proc.stderr
    assert "Traceback" not in proc.stderr

    proc = brain(brain_cmd, "run", wf, "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["status"] == "failed"
    assert data["error"].startswith("step 'boom' failed: ")
    assert "exit code 3" in data["error"]
    assert {s["name"]: s["status"] for s in data["steps"]} == {
        "fine": "succeeded", "boom": "failed", "never": "skipped"}
    assert [r["status"] for r in runs_json(brain_cmd)] == ["failed", "failed"]


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_file_is_one_clear_line_and_exit_2(tmp_path: Path, brain_cmd: list[str],
                                                 kind: str) -> None:
    source, problem = BROKEN[kind]
    bad = tmp_path / "broken_flow.py"
    bad.write_text(source)
    commands = ["run", "check", "graph"]
    for command, proc in zip(commands, brain_many(brain_cmd, *[[c, bad] for c in commands]),
                             strict=True):
        assert proc.returncode == 2, command
        assert "Traceback" not in proc.stderr, command
        lines = error_lines(proc.stderr)
        assert len(lines) == 1, f"brain {command}: expected one error line, got {lines!r}"
        assert str(bad) in lines[0], command
        assert problem in lines[0], command
    assert nothing_recorded(brain_cmd)


def test_missing_file_exit_2(tmp_path: Path, brain_cmd: list[str]) -> None:
    missing = tmp_path / "nowhere.py"
    arglists = [["run", missing], ["check", missing], ["graph", missing], ["run", f"{missing}:x"]]
    for args, proc in zip(arglists, brain_many(brain_cmd, *arglists), strict=True):
        assert proc.returncode == 2, args
        assert "nowhere.py" in proc.stderr, args
        assert "Traceback" not in proc.stderr, args


def _run_as(euid: int, *args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """``brain ARGS`` in a real subprocess that takes itself for user ``euid`` (the tests
    run as one user; the warning depends only on the effective uid)."""
    code = ("import os, sys; os.geteuid = lambda: int(sys.argv[1]); "
            "from brain.cli import main; main(sys.argv[2:])")
    return subprocess.run([sys.executable, "-c", code, str(euid), *map(str, args)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_run_as_root_warns_in_one_line_that_steps_can_read_the_secrets(
        tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "flows.py", GOOD)
    for proc, root in [(_run_as(0, "run", f"{wf}:greet", "--json"), True),
                       (_run_as(1000, "run", f"{wf}:greet", "--json"), False),
                       (brain(brain_cmd, "run", f"{wf}:greet"), os.geteuid() == 0)]:
        assert proc.returncode == 0, proc.stderr
        warnings = [line for line in proc.stderr.splitlines() if "root" in line]
        if root:
            assert len(warnings) == 1, proc.stderr
            assert warnings[0].startswith("warning: running as root")
            assert "can read the orchestrator's secrets" in warnings[0]
            assert "dedicated unprivileged user" in warnings[0]
        else:
            assert warnings == [], proc.stderr
        assert "root" not in proc.stdout  # --json: stdout is only the run


# --- brain check / graph --------------------------------------------------------------------


def test_check_good_files_exit_0(tmp_path: Path, brain_cmd: list[str]) -> None:
    one = write_source(tmp_path, "flows.py", GOOD)
    two = write_source(tmp_path, "fan.py", FAN)
    proc = brain(brain_cmd, "check", one, two)
    assert proc.returncode == 0, proc.stderr
    for name in ("greet", "other", "fan"):
        assert name in proc.stdout


def test_check_a_file_whose_forked_child_exits_at_import_is_fine(tmp_path: Path,
                                                                  brain_cmd: list[str]) -> None:
    """Only the importing process is guarded: a child the file forks still ends with
    ``os._exit`` (it does not carry on as a second ``brain check``)."""
    wf = write_source(tmp_path, "forking.py", """
        import os

        from brain import shell, workflow

        pid = os.fork()
        if pid == 0:
            os._exit(7)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 7

        @workflow
        def forking():
            shell("a", command="echo a")
    """)
    proc = brain(brain_cmd, "check", wf)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("forking (1 step)") == 1


def test_check_one_bad_file_among_several_exit_2(tmp_path: Path, brain_cmd: list[str]) -> None:
    good = write_source(tmp_path, "flows.py", GOOD)
    bad = tmp_path / "bad.py"
    bad.write_text(BROKEN["definition"][0])
    fan = write_source(tmp_path, "fan.py", FAN)
    proc = brain(brain_cmd, "check", good, bad, fan)
    assert proc.returncode == 2
    out = proc.stderr + proc.stdout
    assert "bad.py" in out and "duplicate step name" in out
    assert "greet" in out and "fan" in out  # the good files are still checked
    assert "Traceback" not in proc.stderr


def test_graph_text_and_mermaid(tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "fan.py", FAN)
    text = brain(brain_cmd, "graph", wf)
    assert text.returncode == 0, text.stderr
    lines = {line.split()[0]: line for line in text.stdout.splitlines()[1:] if line.strip()}
    assert set(lines) == {"a", "b", "c", "d"}
    assert "b" in lines["d"] and "c" in lines["d"] and "a" not in lines["d"].split(maxsplit=1)[1]
    assert "a" in lines["b"]

    mermaid = brain(brain_cmd, "graph", wf, "--mermaid")
    assert mermaid.returncode == 0, mermaid.stderr
    out = mermaid.stdout.splitlines()
    assert out[0].startswith("flowchart")
    edges = [line.strip() for line in out if "-->" in line]
    assert len(edges) == 4
    ids = {}
    for line in out:
        if "[" in line and "-->" not in line:
            node_id, label = line.strip().split("[", 1)
            ids[label.strip('"]')] = node_id
    assert set(ids) == {"a", "b", "c", "d"}
    for up, down in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]:
        assert f"{ids[up]} --> {ids[down]}" in edges


# --- brain runs / show / cancel / prune -----------------------------------------------------


def test_runs_filters_limit_and_json(tmp_path: Path, brain_cmd: list[str]) -> None:
    flows = write_source(tmp_path, "flows.py", GOOD)
    failing = write_source(tmp_path, "failing.py", FAILING)
    assert brain(brain_cmd, "run", f"{flows}:greet").returncode == 0
    assert brain(brain_cmd, "run", f"{flows}:other").returncode == 0
    assert brain(brain_cmd, "run", failing).returncode == 1

    queries = [[], ["--workflow", "other"], ["--status", "failed"], ["--status", "succeeded"],
               ["--workflow", "greet", "--status", "failed"], ["--limit", "1"]]
    results = brain_many(brain_cmd, *[["runs", "--json", *q] for q in queries],
                         ["runs"], ["runs", "--status", "bogus"], ["runs", "--limit", "0"])
    for proc in results[:len(queries) + 1]:
        assert proc.returncode == 0, proc.stderr
    everything, only_other, failed, succeeded, none, limited = (
        json.loads(p.stdout) for p in results[:len(queries)])

    assert [r["workflow"] for r in everything] == ["failing", "other", "greet"]  # newest first
    assert all(r["steps"] == [] for r in everything)
    assert [r["workflow"] for r in only_other] == ["other"]
    assert [(r["workflow"], r["status"]) for r in failed] == [("failing", "failed")]
    assert {r["workflow"] for r in succeeded} == {"greet", "other"}
    assert none == []
    assert [r["workflow"] for r in limited] == ["failing"]

    table = results[len(queries)]
    for run in everything:
        assert run["run_id"][:12] in table.stdout
    assert "failed" in table.stdout and "succeeded" in table.stdout

    bad_status, bad_limit = results[len(queries) + 1:]
    assert bad_status.returncode == 2
    assert bad_limit.returncode == 2
    assert "Traceback" not in bad_limit.stderr


def test_show_by_unique_prefix(tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "ordered.py", ORDERED)
    proc = brain(brain_cmd, "run", wf, "--json")
    run = json.loads(proc.stdout)
    prefix = run["run_id"][:8]

    text = brain(brain_cmd, "show", prefix)
    assert text.returncode == 0, text.stderr
    assert run["run_id"] in text.stdout
    assert "ordered" in text.stdout and "succeeded" in text.stdout
    for step in ("zeta", "alpha", "mid"):
        assert step in text.stdout

    shown = brain(brain_cmd, "show", prefix, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == run


def test_show_unknown_id_exit_2(tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "ordered.py", ORDERED)
    run_id = json.loads(brain(brain_cmd, "run", wf, "--json").stdout)["run_id"]
    unknown = "0" * 32 if not run_id.startswith("0") else "f" * 32
    idents = [unknown, "not-an-id"]
    for ident, proc in zip(idents, brain_many(brain_cmd, *[["show", i] for i in idents]), strict=True):
        assert proc.returncode == 2, ident
        assert ident in proc.stderr
        assert "Traceback" not in proc.stderr
        assert proc.stdout == ""


def test_cancel_finished_run_exit_1(tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "ordered.py", ORDERED)
    run_id = json.loads(brain(brain_cmd, "run", wf, "--json").stdout)["run_id"]
    other = "abcdef" if not run_id.startswith("abcdef") else "fedcba"
    proc, missing = brain_many(brain_cmd, ["cancel", run_id[:10]], ["cancel", other])
    assert proc.returncode == 1
    assert "succeeded" in proc.stderr
    assert missing.returncode == 2
    assert runs_json(brain_cmd)[0]["status"] == "succeeded"


def test_prune_deletes_finished_runs(tmp_path: Path, brain_cmd: list[str]) -> None:
    flows = write_source(tmp_path, "flows.py", GOOD)
    failing = write_source(tmp_path, "failing.py", FAILING)
    first, second = brain_many(brain_cmd, ["run", f"{flows}:other"], ["run", failing])
    assert (first.returncode, second.returncode) == (0, 1)

    keep = brain(brain_cmd, "prune", "--older-than", "30d")
    assert keep.returncode == 0, keep.stderr
    assert len(runs_json(brain_cmd)) == 2  # nothing is that old

    prune = brain(brain_cmd, "prune", "--older-than", "0s")
    assert prune.returncode == 0, prune.stderr
    assert "2" in prune.stderr + prune.stdout
    assert runs_json(brain_cmd) == []


def test_prune_bad_age_exit_2(brain_cmd: list[str]) -> None:
    ages = ["soon", "10", "-1d", "3y"]
    results = brain_many(brain_cmd, *[["prune", f"--older-than={age}"] for age in ages])
    for age, proc in zip(ages, results, strict=True):
        assert proc.returncode == 2, age
        assert age in proc.stderr, age
        assert "Traceback" not in proc.stderr, age


# --- brain db / --version / usage ----------------------------------------------------------


def test_db_upgrade_is_idempotent(tmp_path: Path, brain_cmd: list[str]) -> None:
    from brain.store.tables import SCHEMA_REVISION

    first = brain(brain_cmd, "db", "upgrade")
    assert first.returncode == 0, first.stderr
    assert "upgraded" in first.stderr and SCHEMA_REVISION in first.stderr
    assert (tmp_path / "brain.db").exists()
    second = brain(brain_cmd, "db", "upgrade")
    assert second.returncode == 0, second.stderr
    assert "already" in second.stderr and SCHEMA_REVISION in second.stderr
    assert runs_json(brain_cmd) == []


def test_version(brain_cmd: list[str]) -> None:
    proc = brain(brain_cmd, "--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"brain {__version__}"


def test_no_command_exit_2(brain_cmd: list[str]) -> None:
    proc, bad, db = brain_many(brain_cmd, [], ["frobnicate"], ["db"])
    assert proc.returncode == 2
    assert "usage" in proc.stderr.lower()
    assert bad.returncode == 2
    assert db.returncode == 2
    assert "upgrade" in db.stderr


def test_database_password_never_printed(tmp_path: Path, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "flow.py", ORDERED)
    arglists = [["runs"], ["show", "abc123"], ["cancel", "abc123"], ["prune", "--older-than", "1d"],
                ["run", flow], ["run", flow, "--json"]]
    results = brain_many(brain_cmd, *arglists, env={"BRAIN_DATABASE_URL": PASSWORD_URL})
    for args, proc in zip(arglists, results, strict=True):
        assert proc.returncode == 2, args
        assert "s3cret" not in proc.stdout + proc.stderr, args
        assert "Traceback" not in proc.stderr, args
        assert "127.0.0.1" in proc.stderr, args  # the message still says which database


def test_db_upgrade_unreachable_database_is_a_clear_error(brain_cmd: list[str]) -> None:
    proc = brain(brain_cmd, "db", "upgrade", env={"BRAIN_DATABASE_URL": PASSWORD_URL})
    assert "s3cret" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2
    assert "127.0.0.1" in proc.stderr


# --- cancel from another process ------------------------------------------------------------


def test_cancel_from_another_process_stops_the_run(tmp_path: Path, brain_cmd: list[str]) -> None:
    wf = write_source(tmp_path, "long.py", LONG)
    pid_file = tmp_path / "step.pid"
    proc = subprocess.Popen([*brain_cmd, "run", str(wf)], env=os.environ.copy(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pgid = None
    try:
        def waiting_step() -> tuple[str, str] | None:
            found = running_step(tmp_path / "brain.db")  # ("before" may be seen first)
            return found if found is not None and found[1] == "wait" else None

        run_id, _ = wait_for(waiting_step, 60, "step 'wait' to run")
        pgid = read_pid(pid_file, 30)
        assert group_alive(pgid)

        cancel = brain(brain_cmd, "cancel", run_id)
        assert cancel.returncode == 0, cancel.stderr

        _, stderr = proc.communicate(timeout=60)  # far less than the 300 s sleep
        assert proc.returncode == 1
        assert "cancelled" in stderr

        shown = json.loads(brain(brain_cmd, "show", run_id, "--json").stdout)
        assert shown["status"] == "cancelled"
        assert {s["name"]: s["status"] for s in shown["steps"]} == {
            "before": "succeeded", "wait": "cancelled", "after": "cancelled"}
        wait_for(lambda: not group_alive(pgid), 30, "the step's processes to end")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pgid is not None:
            kill_group_quietly(pgid)
