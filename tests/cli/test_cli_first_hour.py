"""A newcomer's first hour at the command line, each through the real ``brain`` command:
``check``'s verdicts on stdout in good English, tables whole in a pipe, a dry-run prune, a
retry of a retried run, definition errors that point at their line, folders holding other
scripts, and ``brain run`` as a webhook would run a workflow, telling of failure handlers."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from support import write_source

FLOWS = """
    from brain import cron, every, shell, trigger, webhook, workflow

    @workflow
    def notify():
        shell("tell", argv=["echo", f"{trigger.event}"])

    @workflow(on_failure=[notify])
    def breaks():
        shell("boom", command="echo oops >&2; exit 3")

    @workflow(triggers=[webhook(secret_env="HOOK_SECRET")])
    def hook():
        shell("show", argv=["echo", f"{trigger.event} {trigger.headers['X-GitHub-Event']} "
                                    f"{trigger.body}"])

    @workflow(triggers=[cron("0 9 * * *"), every(seconds=60)])
    def twice_a_day_and_more():
        shell("one", command="true")
        shell("two", command="true")
"""

WATCHED = """
    from brain import shell, trigger, workflow

    @workflow
    def watched():
        shell("where", argv=["echo", f"{trigger.event} {trigger.path} {trigger.body}"])
"""

LONG_NAME = "a_workflow_whose_name_alone_takes_up_most_of_an_eighty_column_terminal"
LONG = f"""
    from brain import shell, workflow

    @workflow
    def {LONG_NAME}():
        shell("boom", command="echo a long reason written to stderr, past column eighty >&2; exit 3")
"""


def brain(brain_cmd: list[str], *args: str | os.PathLike[str], cwd: Path | None = None,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real ``brain`` command, its output piped (not a terminal), no ``COLUMNS``."""
    full_env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | (env or {})
    return subprocess.run([*brain_cmd, *map(str, args)], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=60, check=False)


def runs(brain_cmd: list[str], *args: str) -> list[dict]:
    proc = brain(brain_cmd, "runs", "--json", "--limit", "100", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def without_root_warning(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line and "running as root" not in line]


# --- brain check ---------------------------------------------------------------------------------


def test_check_says_what_passed_on_stdout_with_the_right_plurals(tmp_path: Path,
                                                                  brain_cmd: list[str]) -> None:
    flows = write_source(tmp_path, "flows.py", FLOWS)
    proc = brain(brain_cmd, "check", flows)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.splitlines() == [
        f"{flows}: notify (1 step)",
        f"{flows}: breaks (1 step)",
        f"{flows}: hook (1 step, 1 trigger)",
        f"{flows}: twice_a_day_and_more (2 steps, 2 triggers)",
    ]


def test_check_errors_stay_on_stderr_with_exit_2(tmp_path: Path, brain_cmd: list[str]) -> None:
    good = write_source(tmp_path, "good.py", WATCHED)
    bad = tmp_path / "bad.py"
    bad.write_text("from brain import shell, workflow\n\n@workflow\ndef bad():\n"
                   "    shell('a', command='true')\n    shell('a', command='true')\n")
    proc = brain(brain_cmd, "check", good, bad)
    assert proc.returncode == 2
    assert proc.stdout == f"{good}: watched (1 step)\n"
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"error: {bad}:6: workflow 'bad', step 'a': duplicate step name")


def test_check_a_folder_passes_over_files_that_never_mention_brain(tmp_path: Path,
                                                                    brain_cmd: list[str]) -> None:
    """A server script beside the workflows (an MCP server, a helper) is not imported: it
    would run, or fail, at import. A file that does mention brain still is, broken or not."""
    folder = tmp_path / "flows"
    folder.mkdir()
    write_source(folder, "watched.py", WATCHED)
    marker = tmp_path / "imported"
    (folder / "server.py").write_text(
        "import pathlib, sys\n"
        f"pathlib.Path({str(marker)!r}).write_text('the server ran')\n"
        "sys.exit('a server script, not a workflow file')\n")
    proc = brain(brain_cmd, "check", folder)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()
    assert proc.stdout.splitlines() == [
        f"{folder / 'server.py'}: skipped, not a workflow file (it never mentions brain)",
        f"{folder / 'watched.py'}: watched (1 step)"]
    # The folder holds one workflow: server.py is no other.
    run = brain(brain_cmd, "run", folder, "--event", "file", "--path", "x", "--body", "created")
    assert run.returncode == 0, run.stderr
    assert not marker.exists()

    named = brain(brain_cmd, "check", folder / "server.py")  # named on its own: imported
    assert named.returncode == 2
    assert marker.exists()
    (folder / "broken.py").write_text("import brain\n\nundefined_helper()\n")
    broken = brain(brain_cmd, "check", folder)
    assert broken.returncode == 2
    assert "broken.py:3: NameError" in broken.stderr


def test_definition_errors_point_at_the_offending_line(tmp_path: Path,
                                                       brain_cmd: list[str]) -> None:
    cases = {
        "placeholder": ("a = shell('a', command='echo 1')\n    shell('b', command='echo {nope}')",
                        6, "workflow 'w', step 'b': {nope} does not name an earlier step"),
        "bad_name": ("shell('a', command='true')\n    shell('no spaces', command='true')",
                     6, "workflow 'w': bad step name 'no spaces'"),
        "nested": ("with parallel():\n        with parallel():\n"
                   "            shell('a', command='true')", 6, "parallel() blocks cannot be nested"),
        "misuse": ("a = shell('a', command='true')\n    if a:\n        pass", 6,
                   "step outputs exist only at run time"),
        "no_steps": ("pass", 3, "workflow 'w': no steps were called"),
    }
    files = {}
    for name, (body, _, _) in cases.items():
        files[name] = tmp_path / f"{name}.py"
        files[name].write_text("from brain import parallel, shell, workflow\n\n@workflow\n"
                               f"def w():\n    {body}\n")
    for name, (_, line, message) in cases.items():
        for command in ("check", "run"):
            proc = brain(brain_cmd, command, files[name])
            assert proc.returncode == 2, (name, command)
            [error] = without_root_warning(proc.stderr)
            assert error.startswith(f"error: {files[name]}:{line}: "), (name, command, error)
            assert message in error, (name, error)


# --- output into a pipe --------------------------------------------------------------------------


def test_tables_are_whole_when_stdout_is_a_pipe(tmp_path: Path, brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "long.py", LONG)
    failed = brain(brain_cmd, "run", flow, "--json")
    assert failed.returncode == 1
    run_id = json.loads(failed.stdout)["run_id"]
    table = brain(brain_cmd, "runs")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["run", "workflow", "status", "event", "started", "took", "error"]
    assert row.startswith(f"{run_id[:12]}  {LONG_NAME}  failed  ")
    assert row.endswith("step 'boom' failed: command failed with exit code 3: a long")  # [:60]
    assert len(row) > 160  # one line, wider than any terminal default
    assert table.stdout == "\n".join(line.rstrip() for line in table.stdout.splitlines()) + "\n"
    shown = brain(brain_cmd, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    [step_row] = [line for line in shown.stdout.splitlines() if line.startswith("boom ")]
    assert step_row.endswith("command failed with exit code 3: a long reason written to stderr,"
                             " past column eighty")


# --- prune and retry -----------------------------------------------------------------------------


def test_prune_dry_run_counts_and_deletes_nothing(tmp_path: Path, brain_cmd: list[str]) -> None:
    flows = write_source(tmp_path, "flows.py", FLOWS)
    assert brain(brain_cmd, "run", f"{flows}:notify").returncode == 0
    assert brain(brain_cmd, "run", f"{flows}:breaks").returncode == 1  # + a queued handler run
    before = runs(brain_cmd)
    assert sorted(r["status"] for r in before) == ["failed", "queued", "succeeded"]

    old = brain(brain_cmd, "prune", "--older-than", "1d", "--dry-run")
    assert old.returncode == 0, old.stderr
    assert "would delete 0 finished runs older than 1d" in old.stderr
    dry = brain(brain_cmd, "prune", "--older-than", "0s", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would delete 2 finished runs older than 0s (dry run: nothing was deleted)" in dry.stderr
    assert runs(brain_cmd) == before

    real = brain(brain_cmd, "prune", "--older-than", "0s")
    assert "deleted 2 finished runs older than 0s" in real.stderr
    assert [r["status"] for r in runs(brain_cmd)] == ["queued"]
    assert brain(brain_cmd, "run", f"{flows}:notify").returncode == 0
    one = brain(brain_cmd, "prune", "--older-than", "0s", "--dry-run")
    assert "would delete 1 finished run older than 0s" in one.stderr


def test_retry_of_a_run_retried_already_names_its_retry(tmp_path: Path,
                                                        brain_cmd: list[str]) -> None:
    flow = write_source(tmp_path, "long.py", LONG)
    original = json.loads(brain(brain_cmd, "run", flow, "--json").stdout)["run_id"]
    first = brain(brain_cmd, "retry", original)
    assert first.returncode == 0, first.stderr
    retry_id = re.search(r"queued run ([0-9a-f]{32})", first.stderr)
    assert retry_id is not None, first.stderr
    again = brain(brain_cmd, "retry", original[:10])
    assert again.returncode == 1
    [line] = again.stderr.splitlines()
    assert line == (f"error: run {original[:12]} was already retried by run "
                    f"{retry_id.group(1)[:12]} (queued): once it has ended, retry that one if "
                    f"need be (brain retry {retry_id.group(1)[:12]}); see it with brain show "
                    f"{retry_id.group(1)[:12]}")
    assert len(runs(brain_cmd)) == 2  # no second retry was queued
    assert brain(brain_cmd, "retry", "0" * 12).returncode == 2  # unknown: as before


# --- brain run as a webhook (or a watcher) would run it -------------------------------------------


def test_run_with_headers_and_an_event_as_a_webhook_delivers_it(tmp_path: Path,
                                                                brain_cmd: list[str]) -> None:
    flows = write_source(tmp_path, "flows.py", FLOWS)
    proc = brain(brain_cmd, "run", f"{flows}:hook", "--event", "webhook", "--json",
                 "--header", "X-GitHub-Event: push", "--header", "X-Delivery-Note:   spaced  ",
                 "--body", '{"ref": "main"}')
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert run["steps"][0]["output"] == 'webhook push {"ref": "main"}'
    assert run["trigger"]["event"] == "webhook"
    assert run["trigger"]["headers"] == {"x-github-event": "push", "x-delivery-note": "spaced"}

    missing = brain(brain_cmd, "run", f"{flows}:hook", "--event", "webhook")
    assert missing.returncode == 1
    assert "this run's trigger has no header 'x-github-event'" in missing.stderr

    watched = write_source(tmp_path, "watched.py", WATCHED)
    by_file = brain(brain_cmd, "run", watched, "--event", "file", "--path", "in/../a.txt",
                    "--body", "created", cwd=tmp_path)
    assert by_file.returncode == 0, by_file.stderr
    assert by_file.stdout == f"file {tmp_path / 'a.txt'} created\n"
    manual = brain(brain_cmd, "run", watched, "--body", "x")  # the default stays manual
    assert manual.returncode == 1
    assert "{trigger.path}" in manual.stderr


def test_a_malformed_header_or_event_is_a_usage_error(tmp_path: Path,
                                                      brain_cmd: list[str]) -> None:
    flows = write_source(tmp_path, "flows.py", FLOWS)
    bad = {
        ("--header", "X-GitHub-Event push"): "is not a header: write it as 'Name: value'",
        ("--header", "Bad Name: x"): "is not a header",
        ("--header", ": no name"): "is not a header",
        ("--header", "Authorization: Bearer x"): "never keeps Authorization, Cookie",
        ("--event", "push"): "invalid choice: 'push'",
    }
    for args, message in bad.items():
        proc = brain(brain_cmd, "run", f"{flows}:hook", *args)
        assert proc.returncode == 2, args
        assert message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "brain.db").exists()  # nothing ran: not even a database was made


def test_a_failed_run_says_its_failure_handlers_were_queued(tmp_path: Path,
                                                            brain_cmd: list[str]) -> None:
    flows = write_source(tmp_path, "flows.py", FLOWS)
    for extra in ([], ["--json"]):
        proc = brain(brain_cmd, "run", f"{flows}:breaks", *extra)
        assert proc.returncode == 1
        handler = runs(brain_cmd, "--workflow", "notify")[0]
        assert (handler["status"], handler["trigger"]["event"]) == ("queued", "failure")
        notes = [line for line in proc.stderr.splitlines() if line.startswith("note:")]
        assert notes == [f"note: on_failure queued 1 handler run: notify ({handler['run_id'][:12]});"
                         " a serving process (brain serve or brain worker) on this database "
                         "executes it"]
    ok = brain(brain_cmd, "run", f"{flows}:notify")  # no failure, no handler, no note
    assert ok.returncode == 0 and "note:" not in ok.stderr
