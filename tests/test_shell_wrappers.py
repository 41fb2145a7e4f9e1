"""Programs that run their argument, and refusals that were not needed (SPEC §3, issue 30).

Generated with hypothesis:

- a wrapper of the table (``tini``, ``gosu``, ``op run``, ``aws-vault exec PROFILE``,
  ``uv run``, ``env``, ``timeout 5`` ...) with options, a ``--``, and a placeholder where
  it takes the program: refused, in ``command`` and ``argv`` alike; the same with a
  literal program after the ``--`` and the placeholder after it: accepted, and run
  under dash (wrappers installed here) the value arrives as one argument, and runs
  nothing;
- ``<`` and ``>`` next to a placeholder inside ``"…"`` or ``'…'`` are text: accepted,
  and the shells print exactly the text with the value in it;
- ``uv run SCRIPT {x}`` and ``npm run SCRIPT -- {x}`` are accepted, ``uv run {x}``,
  ``uv run -- {x}`` and ``npm run {x}`` are not; npm (when installed) really passes
  the words after ``--`` to the script as data.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brain.placeholders import render
from brain.shell_check import argv_problem, render_command, shell_problem
from brain.shell_check.programs import PROGRAMS, Program

HOSTILE = ["$(touch MARK)", "`touch MARK`", "'; touch MARK; '", '"; touch MARK; "',
           "\ntouch MARK\n#", "-c", "--help", "touch MARK", "a b", ""]
SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _wrappers() -> list[tuple[str, Program]]:
    """Every way the table says a program comes next: ``program`` rows, and the wrapping
    subcommands of ``subcommand`` rows (``uv run``)."""
    out = []
    for name, row in sorted(PROGRAMS.items()):
        if row.runs == "program":
            out.append((name, row))
        for sub in sorted(row.wraps):
            out.append((f"{name} {sub}", row))
    return out


WRAPPERS = _wrappers()
# Options that take no argument and run nothing, in the forms wrappers take.
OPTIONS = ["-s", "-q", "-v", "--quiet", "--verbose=1", "-w"]


def _template(wrapper: str, row: Program, options: list[str], dashes: bool,
              tail: list[str]) -> list[str]:
    words = [*wrapper.split(), *options]
    lead = ["5"] * row.leading
    return [*words, *(["--", *lead] if dashes else lead), *tail]


@SETTINGS
@given(wrapper=st.sampled_from(WRAPPERS), options=st.lists(st.sampled_from(OPTIONS), max_size=3),
       dashes=st.booleans(), after=st.sampled_from([[], ["job"], ["-x", "y"]]))
def test_a_placeholder_where_a_wrapper_takes_its_program_is_refused(
        wrapper: tuple[str, Program], options: list[str], dashes: bool, after: list[str]) -> None:
    name, row = wrapper
    words = _template(name, row, options, dashes, ["{x}", *after])
    assert shell_problem(" ".join(words)) is not None, words
    assert argv_problem(words) is not None, words


@SETTINGS
@given(wrapper=st.sampled_from(WRAPPERS), options=st.lists(st.sampled_from(OPTIONS), max_size=3),
       where=st.integers(min_value=0, max_value=3))
def test_a_placeholder_among_a_wrappers_options_is_refused(
        wrapper: tuple[str, Program], options: list[str], where: int) -> None:
    name, row = wrapper
    options = [*options]
    options.insert(min(where, len(options)), "{x}")
    words = _template(name, row, options, True, ["printf", "%s", "data"])
    assert shell_problem(" ".join(words)) is not None, words


@SETTINGS
@given(wrapper=st.sampled_from(WRAPPERS), options=st.lists(st.sampled_from(OPTIONS), max_size=3))
def test_after_the_dashes_a_literal_program_takes_data(
        wrapper: tuple[str, Program], options: list[str]) -> None:
    name, row = wrapper
    if row.code_options & set(options):
        return
    words = _template(name, row, options, True, ["printf", "%s", "{x}"])
    assert shell_problem(" ".join(words)) is None, (words, shell_problem(" ".join(words)))
    # ... and a program of the table after the dashes is checked in turn.
    words = _template(name, row, options, True, ["sh", "-c", "{x}"])
    assert shell_problem(" ".join(words)) is not None, words


# Wrappers installed everywhere this runs (tini where present): the value stays one word.
# Their fixed words follow the dashes (``timeout -- 5 PROGRAM``).
RUNNABLE = [w for w in ("nice", "nohup", "env", "timeout -- 5", "stdbuf -oL --", "setsid --",
                        "tini -s --", "ionice -c 3 --", "env -i --")
            if shutil.which(w.split()[0])]


@pytest.mark.skipif(not shutil.which("dash"), reason="needs dash")
@SETTINGS
@given(wrapper=st.sampled_from(RUNNABLE), value=st.sampled_from(HOSTILE))
def test_accepted_wrapper_templates_keep_a_value_as_one_argument(
        wrapper: str, value: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    where = tmp_path_factory.mktemp("wrap")
    marker = where / "MARK"
    filled = value.replace("MARK", str(marker))
    template = f"{wrapper} printf '[%s]' {{x}}"
    command = render_command(template, lambda ref: filled)
    done = subprocess.run(["dash", "-c", command], cwd=where, capture_output=True, text=True,
                          timeout=20, stdin=subprocess.DEVNULL)
    assert done.stdout == f"[{filled}]", (command, done.stderr)
    assert not marker.exists()


# --- < and > inside quotes are text -------------------------------------------------------

TEXT = st.text(alphabet="<>=/ab1 -", max_size=6)


@pytest.mark.skipif(not all(shutil.which(s) for s in ("dash", "bash")),
                    reason="needs dash and bash")
@SETTINGS
@given(before=TEXT, after=TEXT.map(lambda t: t or ">"), quote=st.sampled_from(['"', "'"]),
       value=st.sampled_from([*HOSTILE, "2", "0"]))
def test_angle_brackets_inside_quotes_next_to_a_placeholder_are_text(
        before: str, after: str, quote: str, value: str,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """``echo "<b>{name}</b>"``, ``echo "value={a}>limit"``: accepted, and the shells
    print the text around the value exactly (nothing redirected, nothing run)."""
    where = tmp_path_factory.mktemp("angle")
    marker = where / "MARK"
    filled = value.replace("MARK", str(marker))
    template = f"printf '%s|' {quote}{before}{{x}}{after}{quote}"
    assert shell_problem(template) is None, (template, shell_problem(template))
    command = render_command(template, lambda ref: filled)
    for shell in (["dash", "-c"], ["bash", "--posix", "-c"]):
        done = subprocess.run([*shell, command], cwd=where, capture_output=True, text=True,
                              timeout=20, stdin=subprocess.DEVNULL)
        assert done.stdout == f"{before}{filled}{after}|", (shell, command, done.stderr)
    assert not marker.exists() and sorted(p.name for p in where.iterdir()) == []


@pytest.mark.parametrize("template", ['echo "$(cat 0<f)" {x}', 'echo "a `cat 0<f`" {x}',
                                      "cat 0<f {x}", "cat 0<<<word {x}"])
def test_a_numbered_input_redirection_outside_quoted_text_is_still_refused(template: str) -> None:
    """Only quoted literal text is text: a descriptor before < in a command substitution,
    even one inside "…", is still code the parser misreads."""
    assert "names its descriptor" in (shell_problem(template) or "")


@pytest.mark.parametrize("template", ['echo " 1<{x}>"', "printf '%s|' \" 1<{x}>\"",
                                      "echo ' 0<' {x}", 'echo "0<<<" {x}'])
def test_a_numbered_input_redirection_inside_quoted_text_is_text(template: str) -> None:
    assert shell_problem(template) is None


@pytest.mark.parametrize("template", ["echo {x}>out.txt", "echo {x}<in.txt",
                                      'echo "$(echo {x}>f)"', 'echo "a"{x}>f'])
def test_a_bare_placeholder_right_before_a_redirection_is_still_refused(template: str) -> None:
    assert "redirection" in (shell_problem(template) or "")


# --- uv run, npm run ----------------------------------------------------------------------

SCRIPTS = st.sampled_from(["script.py", "tools/report.py", "./job.py", "black", "ruff"])
UV_OPTIONS = st.lists(st.sampled_from(["--with requests", "--python=3.12", "--frozen", "-q",
                                       "--no-project", "--with-editable ./lib"]), max_size=2)
ARGS = st.lists(st.sampled_from(["--date", "-v", "out.txt", "--"]), max_size=2)


@SETTINGS
@given(options=UV_OPTIONS, script=SCRIPTS, args=ARGS)
def test_uv_run_of_a_script_written_out_takes_data(options: list[str], script: str,
                                                   args: list[str]) -> None:
    template = " ".join(["uv run", *options, script, *args, "{x}"])
    assert shell_problem(template) is None, (template, shell_problem(template))
    assert argv_problem(template.split()) is None


@SETTINGS
@given(options=UV_OPTIONS, dashes=st.booleans(), module=st.booleans())
def test_uv_run_of_a_placeholder_is_refused(options: list[str], dashes: bool,
                                            module: bool) -> None:
    template = " ".join(["uv run", *options, *(["-m"] if module else []),
                         *(["--"] if dashes else []), "{x}", "arg"])
    assert shell_problem(template) is not None, template
    assert shell_problem(f"uv run {' '.join(options)} python -c {{x}}") is not None


@pytest.mark.parametrize(("template", "accepted"), [
    ("echo {x} | uv run script.py", True), ("uv run tools/load.py < {x}", True),
    ("echo {x} | uv run --with rich report.py --quiet", True),
    ("echo {x} | uv run python", False), ("echo {x} | uv run -- sh", False),
    ("uv run python3 <<< {x}", False), ("echo {x} | uv run", False),
    ("echo {x} | op run -- ./deploy.sh", True), ("echo {x} | op run -- bash", False),
])
def test_what_uv_run_reads_from_its_input_is_judged_by_the_program_it_runs(
        template: str, accepted: bool) -> None:
    assert (shell_problem(template) is None) is accepted, shell_problem(template)


NPM_SCRIPTS = st.sampled_from(["run build", "run lint", "run-script deploy", "test", "start",
                               "run --silent build"])


@SETTINGS
@given(script=NPM_SCRIPTS, args=st.lists(st.sampled_from(["--grep", "--env", "-v", "x"]),
                                          max_size=2))
def test_npm_run_takes_data_after_its_dashes_only(script: str, args: list[str]) -> None:
    after = " ".join(args)
    assert shell_problem(f"npm {script} -- {after} {{x}}") is None
    assert shell_problem(f"npm {script} {after} {{x}}") is not None  # npm reads it as options
    assert shell_problem(f"npm {script} {{x}} -- a") is not None
    assert shell_problem("npm run -- {x}") is not None  # the value would name the script


@pytest.mark.skipif(not shutil.which("npm"), reason="needs npm")
def test_npm_passes_the_words_after_its_dashes_to_the_script_as_data(tmp_path: Path) -> None:
    """Real npm: hostile values after ``--`` reach the script as arguments, quoted for its
    shell; none runs, none becomes an npm option (``--script-shell=…``)."""
    (tmp_path / "package.json").write_text(json.dumps(
        {"name": "t", "version": "1.0.0", "scripts": {"show": "printf '[%s]'"}}))
    marker = tmp_path / "MARK"
    values = [v.replace("MARK", str(marker)) for v in HOSTILE if v]
    values.append(f"--script-shell={shutil.which('touch')}")
    env = {**os.environ, "HOME": str(tmp_path), "npm_config_update_notifier": "false",
           "npm_config_cache": str(tmp_path / ".npm"), "npm_config_offline": "true"}
    for value in values:
        command = render_command("npm run --silent show -- {x}", lambda ref, v=value: v)
        done = subprocess.run(["dash", "-c", command], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert done.stdout == f"[{value}]", (command, done.stdout, done.stderr)
    assert not marker.exists()
    # A control: without the quoting, the same value does run.
    unsafe = render("printf '[%s]' {x}", lambda ref: f"$(touch {marker})", shell_quote=False)
    subprocess.run(["dash", "-c", unsafe], cwd=tmp_path, timeout=10, capture_output=True)
    assert marker.exists()


# --- git config: a key may name a program git runs later ----------------------------------

@pytest.mark.parametrize(("template", "accepted"), [
    ("git config core.fsmonitor ./{x}", False), ("git config core.sshCommand ssh-{x}", False),
    ("git -C repo config alias.deploy ./{x}", False), ("git config credential.helper ./{x}", False),
    ("git config --file f.cfg core.pager ./{x}", False), ("git config --get {x}", False),
    ('git config user.name "Bot {x}"', True), ("git config --global user.email ci-{x}@example.com", True),
    ("git config init.defaultBranch main-{x}", True),
])
def test_git_config_takes_a_placeholder_only_for_keys_that_are_data(template: str,
                                                                    accepted: bool) -> None:
    assert (shell_problem(template) is None) is accepted, shell_problem(template)


@pytest.mark.skipif(not shutil.which("git"), reason="needs git")
def test_without_the_check_a_git_config_value_runs_on_the_next_git_status(tmp_path: Path) -> None:
    """Why: core.fsmonitor names a program git status runs (through a shell)."""
    marker = tmp_path / "MARK"
    env = {**os.environ, "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", "repo"], cwd=tmp_path, env=env, check=True, timeout=30)
    command = render("git -C repo config core.fsmonitor ./{x} && git -C repo status",
                     lambda ref: f"x; touch {marker}", shell_quote=True)
    subprocess.run(["dash", "-c", command], cwd=tmp_path, env=env, capture_output=True,
                   timeout=30)
    assert marker.exists()
