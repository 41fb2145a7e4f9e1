"""Shell steps (SPEC §2 "Shell", §3 shell safety): real ``/bin/sh`` processes, real SQLite files.

Every test runs a workflow in-process; the conftest points ``BRAIN_DATABASE_URL``
at a private SQLite file per test. Nothing is mocked: each step spawns a process.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from support import kill_quietly, read_pid, sql_rows, wait_gone

from brain import secret, shell, trigger, webhook, workflow

# Spawns subprocesses in-process: finalise earlier tests' leftovers first (see the conftest).
pytestmark = pytest.mark.usefixtures("collect_garbage_first")

HERE = os.path.dirname(os.path.abspath(__file__))


# --- helpers -----------------------------------------------------------------


def db_bytes(tmp_path: Path) -> bytes:
    """Every byte SQLite wrote for this test's database (main file, WAL, shared memory)."""
    return b"".join(p.read_bytes() for p in sorted(tmp_path.glob("brain.db*")))


# --- output ------------------------------------------------------------------


def test_output_is_stdout_without_trailing_newlines_inner_ones_kept():
    @workflow
    def sh_newlines():
        shell("out", command=r"printf '\n\nfirst\n\nsecond\n\n\n'")

    r = sh_newlines()
    assert r.status == "succeeded", r.error
    assert r.steps["out"].output == "\n\nfirst\n\nsecond"


def test_non_utf8_output_is_decoded_with_replacement(tmp_path: Path):
    @workflow
    def sh_bytes():
        shell("raw", command=r"printf 'ok \377\376 end'")

    r = sh_bytes()
    assert r.status == "succeeded", r.error
    assert r.steps["raw"].output == "ok \ufffd\ufffd end"
    row = sqlite3.connect(tmp_path / "brain.db").execute(
        "SELECT output FROM brain_steps WHERE run_id = ? AND name = 'raw'", (r.run_id,)).fetchone()
    assert row == ("ok \ufffd\ufffd end",)


def test_output_at_the_limit_passes_and_over_it_fails():
    @workflow
    def sh_sizes():
        shell("exact", command="head -c 1000 /dev/zero | tr '\\0' x", max_output_bytes=1000)
        shell("over", command="head -c 1001 /dev/zero | tr '\\0' y", max_output_bytes=1000)

    r = sh_sizes()
    assert r.steps["exact"].status == "succeeded"
    assert r.steps["exact"].output == "x" * 1000
    assert r.steps["over"].status == "failed"
    assert "max_output_bytes" in (r.steps["over"].error or "")
    assert r.steps["over"].output == "y" * 1000  # what fitted, kept with the failure
    assert r.status == "failed"
    assert r.error == f"step 'over' failed: {r.steps['over'].error}"


def test_endless_output_is_stopped_at_the_limit_not_by_the_timeout():
    """``yes`` never ends: the step must stop it at the limit, every time.

    Repeated because whether a stalled pipe hangs the step depends on how much
    output is buffered when the group is killed (a race); the step timeout bounds
    each try.
    """

    @workflow
    def sh_endless():
        shell("yes", command="yes", max_output_bytes=4096, timeout_seconds=10)

    for attempt in range(10):
        r = sh_endless()
        step = r.steps["yes"]
        assert step.status == "failed"
        assert "timed out" not in (step.error or ""), f"attempt {attempt + 1}: {step.error}"
        assert "max_output_bytes" in (step.error or "")


def test_default_output_limit_is_one_mebibyte():
    @workflow
    def sh_default_limit():
        shell("ok", command="head -c 1048576 /dev/zero | tr '\\0' a")
        shell("big", command="head -c 1048577 /dev/zero | tr '\\0' b")

    r = sh_default_limit()
    assert r.steps["ok"].status == "succeeded"
    assert len(r.steps["ok"].output or "") == 1024 * 1024
    assert r.steps["big"].status == "failed"
    assert "max_output_bytes" in (r.steps["big"].error or "")


# --- exit codes and stderr ---------------------------------------------------


def test_non_zero_exit_fails_with_code_and_stderr_tail():
    @workflow
    def sh_exit():
        shell("bad", command="echo partial; echo first-problem >&2; echo last-problem >&2; exit 7")
        shell("never", command="echo never")

    r = sh_exit()
    bad = r.steps["bad"]
    assert bad.status == "failed"
    assert bad.tries == 1
    assert "exit code 7" in (bad.error or "")
    assert "last-problem" in (bad.error or "")
    assert bad.stderr is not None
    assert "first-problem" in bad.stderr and bad.stderr.rstrip().endswith("last-problem")
    assert r.status == "failed"
    assert r.error == f"step 'bad' failed: {bad.error}"
    assert r.steps["never"].status == "skipped"


def test_stderr_tail_keeps_the_end_of_a_long_error_stream():
    @workflow
    def sh_long_stderr():
        shell("noisy", command="i=0; while [ $i -lt 3000 ]; do echo noise-line-$i >&2; i=$((i+1)); done;"
                               " echo THE-END >&2; exit 3")

    r = sh_long_stderr()
    step = r.steps["noisy"]
    assert step.status == "failed"
    assert step.stderr is not None
    assert step.stderr.rstrip().endswith("THE-END")
    assert "THE-END" in (step.error or "")


def test_stderr_of_a_successful_step_is_stored_too():
    @workflow
    def sh_warn():
        shell("warn", command="echo result; echo a-warning >&2")

    r = sh_warn()
    assert r.steps["warn"].status == "succeeded"
    assert r.steps["warn"].output == "result"
    assert "a-warning" in (r.steps["warn"].stderr or "")


def test_argv_runs_without_a_shell():
    @workflow
    def sh_argv():
        shell("lit", argv=["printf", "%s|%s", "$HOME", "{trigger.body}"])

    r = sh_argv(trigger={"body": "a b; echo c"})
    assert r.status == "succeeded", r.error
    assert r.steps["lit"].output == "$HOME|a b; echo c"
    assert r.steps["lit"].inputs["argv"] == ["printf", "%s|%s", "$HOME", "a b; echo c"]


def test_missing_program_fails_the_step():
    @workflow
    def sh_noprog():
        shell("ghost", argv=["/nonexistent/brain-test-program"])

    r = sh_noprog()
    assert r.steps["ghost"].status == "failed"
    assert "/nonexistent/brain-test-program" in (r.steps["ghost"].error or "")


# --- stdin -----------------------------------------------------------------


def test_stdin_is_passed_with_placeholders_filled():
    @workflow
    def sh_stdin():
        shell("cat", argv=["cat"], stdin=f"header\n{trigger.body}\n")
        shell("count", command="wc -l", stdin="one\ntwo\nthree\n")

    r = sh_stdin(trigger={"body": "it's $(not) run"})
    assert r.status == "succeeded", r.error
    assert r.steps["cat"].output == "header\nit's $(not) run"
    assert r.steps["cat"].inputs["stdin"] == "header\nit's $(not) run\n"
    assert r.steps["count"].output.strip() == "3"


def test_without_stdin_the_command_reads_end_of_file():
    @workflow
    def sh_nostdin():
        shell("read", command="cat; echo eof", timeout_seconds=10)

    r = sh_nostdin()
    assert r.status == "succeeded", r.error
    assert r.steps["read"].output == "eof"


# --- shell quoting of values -------------------------------------------------


def test_substituted_values_are_data_not_shell_syntax(tmp_path: Path):
    marker = tmp_path / "pwned"
    body = f"'; touch {marker}; echo \"$(touch {marker})\" `touch {marker}`"

    @workflow
    def sh_quoting():
        shell("echo", command=f"printf '%s' {trigger.body}")

    r = sh_quoting(trigger={"body": body})
    assert r.status == "succeeded", r.error
    assert r.steps["echo"].output == body
    assert not marker.exists()


def test_nul_byte_in_a_value_fails_the_step():
    @workflow
    def sh_nul():
        shell("n", command=f"printf %s {trigger.body}")

    r = sh_nul(trigger={"body": "a\x00b"})
    assert r.steps["n"].status == "failed"
    assert "NUL" in (r.steps["n"].error or "")
    assert r.status == "failed"


# --- trigger fields ----------------------------------------------------------


def test_missing_trigger_path_fails_the_step_naming_it():
    @workflow
    def sh_path():
        shell("p", command=f"echo {trigger.path}")

    r = sh_path(trigger={"body": "x"})
    step = r.steps["p"]
    assert step.status == "failed"
    assert "{trigger.path}" in (step.error or "")
    assert r.status == "failed"
    assert r.error == f"step 'p' failed: {step.error}"

    ok = sh_path(trigger={"path": "/tmp/some file.txt", "event": "file"})
    assert ok.status == "succeeded", ok.error
    assert ok.steps["p"].output == "/tmp/some file.txt"


def test_missing_header_fails_the_step_naming_it():
    @workflow
    def sh_header():
        shell("h", command=f"echo {trigger.headers['X-GitHub-Event']}")

    r = sh_header(trigger={"body": "x"})
    step = r.steps["h"]
    assert step.status == "failed"
    assert "x-github-event" in (step.error or "").lower()

    ok = sh_header(trigger={"body": "x", "headers": {"X-GitHub-Event": "push"}})
    assert ok.status == "succeeded", ok.error
    assert ok.steps["h"].output == "push"


def test_trigger_fields_event_and_json_body():
    @workflow
    def sh_fields():
        shell("f", argv=["printf", "%s %s", "{trigger.event}", "{trigger.body}"])

    r = sh_fields(trigger={"body": {"a": [1, 2], "b": "é"}})
    assert r.status == "succeeded", r.error
    assert r.steps["f"].output == 'manual {"a":[1,2],"b":"é"}'


# --- environment ---------------------------------------------------------------


def test_orchestrator_secrets_are_not_in_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BRAIN_API_TOKEN", "api-token-value")
    monkeypatch.setenv("THE_BRAIN_X", "the-brain-value")
    monkeypatch.setenv("LLM_API_KEY", "llm-key-value")
    monkeypatch.setenv("ORDINARY_TEST_VAR", "ordinary value")

    @workflow
    def sh_env_clean():
        shell("env", argv=["env"])

    r = sh_env_clean()
    assert r.status == "succeeded", r.error
    env = dict(line.split("=", 1) for line in r.steps["env"].output.splitlines() if "=" in line)
    assert "BRAIN_API_TOKEN" not in env
    assert "THE_BRAIN_X" not in env
    assert "LLM_API_KEY" not in env
    assert "BRAIN_DATABASE_URL" not in env
    for value in ("api-token-value", "the-brain-value", "llm-key-value"):
        assert value not in r.steps["env"].output
    assert env["ORDINARY_TEST_VAR"] == "ordinary value"
    assert env.get("PATH") == os.environ["PATH"]


def test_webhook_secret_variable_is_not_in_the_environment(monkeypatch: pytest.MonkeyPatch):
    """SPEC §2: the shell environment lacks the webhook secret variables too."""
    monkeypatch.setenv("SHELL_TEST_HOOK_SECRET", "hook-secret-value")

    @workflow(triggers=[webhook(secret_env="SHELL_TEST_HOOK_SECRET")])
    def sh_env_hook():
        shell("env", argv=["env"])

    r = sh_env_hook()
    assert r.status == "succeeded", r.error
    assert "hook-secret-value" not in r.steps["env"].output
    assert "SHELL_TEST_HOOK_SECRET=" not in r.steps["env"].output


def test_env_values_merge_over_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MERGE_TEST_KEEP", "kept")
    monkeypatch.setenv("MERGE_TEST_OVER", "original")

    @workflow
    def sh_env_merge():
        shell("e", command='printf "%s|%s|%s" "$MERGE_TEST_KEEP" "$MERGE_TEST_OVER" "$MERGE_TEST_NEW"',
              env={"MERGE_TEST_OVER": "replaced", "MERGE_TEST_NEW": "body={trigger.body}"})

    r = sh_env_merge(trigger={"body": "it's $x"})
    assert r.status == "succeeded", r.error
    assert r.steps["e"].output == "kept|replaced|body=it's $x"
    assert r.steps["e"].inputs["env"] == {"MERGE_TEST_OVER": "replaced",
                                          "MERGE_TEST_NEW": "body=it's $x"}


def test_env_can_set_variables_the_orchestrator_strips(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LLM_API_KEY", "orchestrator-key")

    @workflow
    def sh_env_explicit():
        shell("e", command='printf %s "$LLM_API_KEY"', env={"LLM_API_KEY": "step-value"})

    r = sh_env_explicit()
    assert r.status == "succeeded", r.error
    assert r.steps["e"].output == "step-value"


def test_secret_in_env_is_scrubbed_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    value = "sUp3r-s3cret-VALUE-7781"
    monkeypatch.setenv("SHELL_TEST_TOKEN", value)

    @workflow
    def sh_secret():
        shell("echo", command='echo "token=$TOKEN"; echo "err=$TOKEN" >&2',
              env={"TOKEN": secret("SHELL_TEST_TOKEN"), "PLAIN": "visible"})
        shell("fail", command='echo "bad $TOKEN" >&2; exit 1',
              env={"TOKEN": secret("SHELL_TEST_TOKEN")})

    r = sh_secret()
    echo, fail = r.steps["echo"], r.steps["fail"]
    assert echo.status == "succeeded"
    assert echo.output == "token=***"
    assert echo.stderr is not None and "err=***" in echo.stderr
    assert echo.inputs["env"] == {"TOKEN": "***", "PLAIN": "visible"}
    assert fail.status == "failed"
    assert "bad ***" in (fail.error or "")
    assert value not in (r.error or "")
    assert value not in r.model_dump_json()

    stored = sql_rows(tmp_path, "SELECT inputs, output, error, stderr FROM brain_steps WHERE run_id = ? "
                      "ORDER BY position", r.run_id)
    assert json.loads(stored[0][0])["env"] == {"TOKEN": "***", "PLAIN": "visible"}
    assert stored[0][1] == "token=***"
    raw = db_bytes(tmp_path)
    assert raw, "the database file should exist"
    assert value.encode() not in raw


def test_missing_secret_fails_the_step_naming_the_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SHELL_TEST_UNSET_SECRET", raising=False)

    @workflow
    def sh_secret_unset():
        shell("s", command="echo $K", env={"K": secret("SHELL_TEST_UNSET_SECRET")})

    r = sh_secret_unset()
    assert r.steps["s"].status == "failed"
    assert "SHELL_TEST_UNSET_SECRET" in (r.steps["s"].error or "")


# --- working folder ------------------------------------------------------------


def test_default_cwd_is_the_workflow_files_folder():
    @workflow
    def sh_cwd_default():
        shell("pwd", command="pwd -P")

    r = sh_cwd_default()
    assert r.status == "succeeded", r.error
    assert r.steps["pwd"].output == os.path.realpath(HERE)


def test_relative_cwd_is_resolved_against_the_workflow_folder(tmp_path: Path):
    @workflow
    def sh_cwd_relative():
        shell("up", command="pwd -P", cwd="..")
        shell("here", command="pwd -P", cwd=".")
        shell("abs", command="pwd -P", cwd=str(tmp_path))

    r = sh_cwd_relative()
    assert r.status == "succeeded", r.error
    assert r.steps["up"].output == os.path.realpath(os.path.dirname(HERE))
    assert r.steps["here"].output == os.path.realpath(HERE)
    assert r.steps["abs"].output == os.path.realpath(tmp_path)


def test_missing_cwd_fails_the_step():
    @workflow
    def sh_cwd_missing():
        shell("nowhere", command="pwd", cwd="no-such-folder-for-brain-tests")

    r = sh_cwd_missing()
    assert r.steps["nowhere"].status == "failed"
    assert "no-such-folder-for-brain-tests" in (r.steps["nowhere"].error or "")


# --- process groups: timeouts and background children ---------------------------


def test_each_tries_process_group_is_recorded_with_its_leaders_start_time(tmp_path: Path):
    """What a resume on this machine needs to end a try left running (SPEC §4, Integrity):
    the group (the shell's pid), when its leader started (field 22 of /proc/PID/stat), and
    this machine; a retry's group replaces the first try's."""
    from brain._owners import this_machine

    log = tmp_path / "groups"

    @workflow
    def sh_group():
        shell("group", command='echo "$$ $(cut -d" " -f22 /proc/$$/stat)" >> "$LOG"; '
                               'test "$(wc -l < "$LOG")" -gt 1',
              env={"LOG": str(log)}, retries=1, retry_delay_seconds=0.01)

    r = sh_group()
    assert (r.steps["group"].status, r.steps["group"].tries) == ("succeeded", 2)
    first, second = (tuple(int(x) for x in line.split()) for line in log.read_text().splitlines())
    assert first != second
    rows = sql_rows(tmp_path, "SELECT process_group, process_started, process_machine "
                              "FROM brain_steps WHERE run_id = ?", r.run_id)
    assert [tuple(row) for row in rows] == [(*second, this_machine())]


def test_timeout_kills_the_whole_process_group(tmp_path: Path):
    pid_file = tmp_path / "grandchild.pid"

    @workflow
    def sh_timeout():
        shell("hang", command='sleep 300 & echo $! > "$PID_FILE"; wait',
              env={"PID_FILE": str(pid_file)}, timeout_seconds=1)
        shell("after", command="echo after")

    r = sh_timeout()
    pid = read_pid(pid_file)
    try:
        hang = r.steps["hang"]
        assert hang.status == "failed"
        assert "timed out" in (hang.error or "")
        assert hang.tries == 1
        assert r.status == "failed"
        assert r.error == f"step 'hang' failed: {hang.error}"
        assert r.steps["after"].status == "skipped"
        assert wait_gone(pid), f"grandchild {pid} survived the timeout"
    finally:
        kill_quietly(pid)


def test_timeout_is_retried_when_retries_are_set(tmp_path: Path):
    count = tmp_path / "count"

    @workflow
    def sh_timeout_retry():
        shell("slow", command='echo x >> "$COUNT"; sleep 30', env={"COUNT": str(count)},
              timeout_seconds=0.5, retries=1, retry_delay_seconds=0.01)

    r = sh_timeout_retry()
    assert r.steps["slow"].status == "failed"
    assert r.steps["slow"].tries == 2
    assert count.read_text().count("x") == 2


def test_background_child_holding_stdout_does_not_hang_the_step(tmp_path: Path):
    pid_file = tmp_path / "bg.pid"

    @workflow
    def sh_background():
        # The step timeout is the bound: a hang shows up as a timeout, not a stuck test.
        shell("bg", command='sleep 300 & echo $! > "$PID_FILE"; echo done',
              env={"PID_FILE": str(pid_file)}, timeout_seconds=10)

    r = sh_background()
    pid = read_pid(pid_file)
    try:
        bg = r.steps["bg"]
        assert bg.status == "succeeded", bg.error
        assert bg.output == "done"
        assert r.status == "succeeded"
        assert wait_gone(pid), f"background child {pid} was left running"
    finally:
        kill_quietly(pid)


def test_background_child_is_killed_after_a_successful_step(tmp_path: Path):
    """Its own output redirected, so stdout closes: the child must still be killed."""
    pid_file = tmp_path / "bg.pid"

    @workflow
    def sh_background_quiet():
        shell("bg", command='sleep 300 >/dev/null 2>&1 & echo $! > "$PID_FILE"; echo done',
              env={"PID_FILE": str(pid_file)}, timeout_seconds=10)

    r = sh_background_quiet()
    pid = read_pid(pid_file)
    try:
        assert r.steps["bg"].status == "succeeded", r.steps["bg"].error
        assert r.steps["bg"].output == "done"
        assert wait_gone(pid), f"background child {pid} was left running"
    finally:
        kill_quietly(pid)
