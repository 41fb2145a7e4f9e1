"""Attack (SPEC §3 shell safety for ``argv=``/``server_command``, the ``{{X}}`` escape; SPEC §6
command lines with ``PATH...``).

Breaks (each an ``xfail(strict=True)`` test that passes once fixed):

* A short-option cluster that ends in an option taking an argument (``bash -eo pipefail
  {x}``, ``timeout -vk 1 5 {x}``, ``env -iC DIR {x}``, ``xargs -rn 1 {x}``, ``python3 -bX
  dev {x}``): the check matches ``arg_options`` only as whole words, so it takes the option's
  argument for the script or the program, and the value (the real script or program) for
  data.
* Options that take an argument missing from a row (``python3 --check-hash-based-pycs
  default {x}``, ``node --title t {x}``/``--import M``/``-C COND``, ``gawk -i F {x}``/``-l
  EXT``): same effect, the value is the program text or the script.
* Programs missing from the table that run their arguments (``cmake -E env {x}``,
  ``toybox sh -c {x}``, Homebrew's ``gtimeout``/``genv``/``gxargs``).
* GNU long options abbreviated to a unique prefix (``timeout --kill 1 5 {x}``, ``env --ch
  DIR {x}``, ``xargs --max-a 1 {x}``, ``gawk --sou 'prog' {x}``) and gawk's ``-W NAME`` for
  ``--NAME`` (``gawk -W source 'prog' {x}``): the option's argument is taken for the
  program or the script; xargs' ``--replace`` (a value only glued) was read as taking the
  next word, the real program (``xargs --replace perl -e '1;' {x}``); mawk's ``-W exec
  {x}`` runs the value as the script (fixed: the "abbreviations" section).
* A ``--`` an option takes as its value (``git -C -- {x}``, ``git --namespace -- {x} gc``,
  ``tar -cf -- {x}``, ``wget -O -- {x}``, ``sudo -u -- -s {x}``): getopt reads on after it,
  so the value is an option or the subcommand; the check took it for the end of the
  options. Also tar's ``-fC {x}`` (``-f`` takes ``C``) and ``tar -c -f a.tar file {x}``
  (``file`` read as a bundle taking {x}). Fixed: the "-- as an option's value" section.
* False alarms: argv data is judged as shell text, so a literal argv word such as ``_``,
  ``^((a|b))$``, ``cost: $ 5`` or a ``\\r`` refuses the whole step though no shell runs.
* ``brain retry RUN PATH`` with a folder (or file) holding no workflow, or only other
  workflows, queues the retry unchecked, exit 0; ``brain runs --stale EMPTY`` answers
  "no waiting run would fail" (``brain check EMPTY`` is exit 2); ``--from`` given twice
  silently keeps the last; ``brain retry RUN --from STEP -- PATH`` is refused.

Held: ``parse(escape(t)) == t``; an escaped ``{{x}}`` never gets a value (argv, and shell
commands run by ``sh``); bad ``retry`` paths (missing, syntax error, option-looking) are exit
2 with one line and nothing queued; other commands refuse extra words.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m pytest -n 0 -p no:cacheprovider
tests/attack/test_attack_argv.py -q``
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from brain import WorkflowDefinitionError, placeholders, shell, workflow
from brain.shell_check import argv_problem, render_command, shell_problem
from brain.shell_check.programs import PROGRAMS

PY_CODE = "-cimport pathlib; pathlib.Path('PWNED').touch()"
NODE_CODE = "--eval=require('fs').writeFileSync('PWNED', '')"
AWK_CODE = 'BEGIN { system("touch PWNED") }'
EVIL_SCRIPT = "./evil.sh"

#: What each program is tricked into running: its value (the step's hostile input).
HOSTILE = {"bash": EVIL_SCRIPT, "python3": PY_CODE, "node": NODE_CODE, "gawk": AWK_CODE,
           "env": "touch", "timeout": "touch", "xargs": "touch", "cmake": "touch"}


def _setup(d: Path) -> None:
    (d / "evil.sh").write_text("#!/bin/sh\ntouch PWNED\n")
    (d / "evil.sh").chmod(0o755)
    (d / "a.mjs").write_text("")
    (d / "inc").write_text("")
    (d / "evil.awk").write_text(AWK_CODE + "\n")


def _runs_value(argv: list[str], value: str, d: Path) -> bool:
    """Run ``argv`` with ``{x}`` replaced by ``value`` in ``d``: whether PWNED appeared."""
    real = [value if w == "{x}" else w.replace("@DIR", str(d)) for w in argv]
    try:
        subprocess.run(real, cwd=d, input=b"PWNED\n", capture_output=True, timeout=20,
                       check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return (d / "PWNED").exists()


def _installed(program: str) -> bool:
    return shutil.which(program) is not None


def _marker_free_or_refused(tmp_path: Path, argv: list[str], value: str) -> None:
    """The promise: refused at definition time, or a real run leaves no marker."""
    work = tmp_path / "work"
    work.mkdir()
    _setup(work)
    words = [w.replace("@DIR", str(work)) for w in argv]
    try:
        @workflow
        def hole() -> None:
            shell("s", argv=[*(w if w != "{x}" else "{trigger.body}" for w in words)],
                  cwd=str(work), stdin="PWNED\n")
    except WorkflowDefinitionError:
        return
    hole.run({"body": value}, store=f"sqlite:///{tmp_path}/x.db")
    assert not (work / "PWNED").exists(), f"{argv} with {value!r} ran the value"


# -- Promise 1: holes --------------------------------------------------------------------

CLUSTERS = [
    (["bash", "-eo", "pipefail", "{x}"], EVIL_SCRIPT),
    (["timeout", "-vk", "1", "5", "{x}", "PWNED"], "touch"),
    (["env", "-iC", "@DIR", "{x}", "PWNED"], "touch"),
    (["xargs", "-rn", "1", "{x}"], "touch"),
    (["python3", "-bX", "dev", "{x}"], PY_CODE),
]


@pytest.mark.parametrize(("argv", "value"), CLUSTERS, ids=lambda a: " ".join(a)[:30])
def test_option_cluster_taking_an_argument(tmp_path: Path, argv: list[str], value: str) -> None:
    if not _installed(argv[0]):
        pytest.skip(f"{argv[0]} not installed")
    _marker_free_or_refused(tmp_path, argv, value)


UNLISTED = [
    (["python3", "--check-hash-based-pycs", "default", "{x}"], PY_CODE),
    (["node", "--title", "t", "{x}"], NODE_CODE),
    (["node", "--import", "./a.mjs", "{x}"], NODE_CODE),
    (["node", "-C", "cond", "{x}"], NODE_CODE),
    (["gawk", "-i", "inc", "{x}"], AWK_CODE),
    (["gawk", "--include", "inc", "{x}"], AWK_CODE),
    (["gawk", "-l", "ordchr", "{x}"], AWK_CODE),
]


@pytest.mark.parametrize(("argv", "value"), UNLISTED, ids=lambda a: " ".join(a)[:30])
def test_option_with_argument_missing_from_row(tmp_path: Path, argv: list[str],
                                               value: str) -> None:
    if not _installed(argv[0]):
        pytest.skip(f"{argv[0]} not installed")
    _marker_free_or_refused(tmp_path, argv, value)


def test_cmake_e_env_runs_the_value(tmp_path: Path) -> None:
    if not _installed("cmake"):
        pytest.skip("cmake not installed")
    _marker_free_or_refused(tmp_path, ["cmake", "-E", "env", "{x}", "PWNED"], "touch")


@pytest.mark.parametrize("argv", [
    ["toybox", "sh", "-c", "{x}"],  # a multi-call binary, like busybox (which is listed)
    ["gtimeout", "5", "{x}"],  # Homebrew coreutils' names of timeout, env, xargs
    ["genv", "{x}"],
    ["gxargs", "{x}"],
    ["cmake", "-P", "{x}"],
], ids=lambda a: " ".join(a))
def test_program_missing_from_table(argv: list[str]) -> None:
    assert argv_problem(argv) is not None


# A generated search: for the installed programs, random option words before the value;
# whatever the check accepts must not run the value.
_POOLS = {
    "bash": ["-e", "-x", "-u", "-eo", "-xo", "-euo", "-o", "pipefail", "posix", "--norc"],
    "python3": ["-b", "-u", "-I", "-bX", "-X", "dev", "-bW", "-W", "ignore",
                "--check-hash-based-pycs", "default"],
    "node": ["--no-warnings", "--title", "t", "--import", "./a.mjs", "-C", "cond",
             "--input-type", "commonjs"],
    "gawk": ["-b", "--lint", "-i", "inc", "--include", "-l", "ordchr"],
    "env": ["-i", "-v", "-iC", "-vC", "-C", "@DIR", "-u", "X", "--"],
    "timeout": ["-v", "-vk", "-k", "-vs", "-s", "TERM", "1", "5", "--"],
    "xargs": ["-r", "-t", "-rn", "-n", "1", "-rI", "-I", "Z", "--"],
}


@st.composite
def _argvs(draw: st.DrawFn) -> list[str]:
    program = draw(st.sampled_from(sorted(p for p in _POOLS if _installed(p))))
    options = draw(st.lists(st.sampled_from(_POOLS[program]), max_size=4))
    return [program, *options, "{x}", "PWNED"]


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(argv=_argvs())
@example(argv=["bash", "-eo", "pipefail", "{x}", "PWNED"])
@example(argv=["python3", "--check-hash-based-pycs", "default", "{x}", "PWNED"])
def test_generated_argv_accepted_never_runs_the_value(tmp_path_factory: pytest.TempPathFactory,
                                                      argv: list[str]) -> None:
    if not _installed(argv[0]) or argv_problem(argv) is not None:
        return
    d = tmp_path_factory.mktemp("gen")
    _setup(d)
    assert not _runs_value(argv, HOSTILE[argv[0]], d), f"accepted {argv} ran the value"


# -- Promise 1: false alarms (argv data judged as shell text) ---------------------------

@pytest.mark.xfail(strict=True, reason="argv literal words are judged as shell text: '_', "
                                       "'((', '$ ', '[[', a CR refuse a step where no shell runs")
@pytest.mark.parametrize("argv", [
    ["cp", "{x}", "/tmp/_"],
    ["grep", "-E", "^((a|b))$", "--", "{x}"],
    ["echo", "cost: $ 5", "{x}"],
    ["printf", "%s\r\n", "{x}"],
    ["jq", "-n", "--arg", "v", "{x}", "[[$v]]"],
], ids=["underscore", "parens", "dollar-blank", "cr", "brackets"])
def test_argv_data_words_are_accepted(argv: list[str]) -> None:
    assert argv_problem(argv) is None


# -- Promise 1: the escape (held) -------------------------------------------------------

_PIECES = st.sampled_from([
    "{", "}", "{{", "}}", "$", "x", "{x}", "{{x}}", "{{{x}}}", "'", '"', "\\", " ", "\n",
    "{previous.x}", "{trigger.body}", "{params.a.b}", "{each.i}", "é", "{x", "x}", "${x}",
    "$$", "`", "{trigger.headers.X-A}", "{-}", ":", "_"])
_TEXT = st.lists(_PIECES, max_size=10).map("".join) | st.text(max_size=20)
_VALUES = st.sampled_from(["{x}", "{{x}}", "$(touch PWNED)", "'; touch PWNED; '", "\\", ""]) \
    | st.text(max_size=10).filter(lambda v: "\x00" not in v)


@settings(max_examples=1500, deadline=None)
@given(_TEXT)
def test_parse_of_escape_is_the_literal(t: str) -> None:
    assert "".join(placeholders.parse(placeholders.escape(t))) == t
    assert not placeholders.has_placeholders(placeholders.escape(t))


@settings(max_examples=1000, deadline=None)
@given(_TEXT, _TEXT, _VALUES)
def test_escape_never_gets_a_value_in_argv(a: str, b: str, value: str) -> None:
    word = placeholders.escape(a) + "{x}" + placeholders.escape(b)
    # ${x} is shell syntax, and "{" + "{x}" + "}" is the escape {{x}}: no placeholder then
    assume(placeholders.refs(word) == [placeholders.Ref("step", "x")])
    assert placeholders.render(word, lambda ref: value) == a + value + b
    # and never changes what the check decides about the real placeholder
    assert argv_problem(["sh", "-c", "{x}", word]) is not None
    assert argv_problem(["sh", "-c", word]) is not None


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(_TEXT.filter(lambda t: "\x00" not in t), _VALUES)
def test_escape_is_literal_in_shell_commands(a: str, value: str) -> None:
    cmd = "printf '%s|%s' " + placeholders.escape(shlex.quote(a)) + " {x}"
    if shell_problem(cmd) is not None:  # a conservative refusal is allowed
        return
    out = subprocess.run(["sh", "-c", render_command(cmd, lambda ref: value)],
                         capture_output=True, check=False).stdout.decode()
    assert out == a + "|" + value


# -- Promise 2: the command line --------------------------------------------------------

WF = """
from brain import workflow, shell

@workflow
def boom():
    shell("a", command="echo hi")
    shell("b", command="exit 3")
"""

OTHER = """
from brain import workflow, shell

@workflow
def other():
    shell("a", command="echo hi")
"""


@pytest.fixture
def cli(tmp_path: Path, brain_cmd: list[str]):  # type: ignore[no-untyped-def]
    (tmp_path / "wf.py").write_text(WF)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notwf.py").write_text("x = 1\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "o.py").write_text(OTHER)
    (tmp_path / "bad.py").write_text("from brain import workflow\ndef (:\n")
    env = {**os.environ, "BRAIN_DATABASE_URL": f"sqlite:///{tmp_path}/x.db"}

    def brain(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*brain_cmd, *args], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, check=False)

    ran = brain("run", "wf.py", "--json", "-q")
    assert ran.returncode == 1, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]

    def count() -> int:
        return len(json.loads(brain("runs", "--json", "--limit", "100").stdout))

    return brain, run_id, count


def _refused_cleanly(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stderr.strip()


@pytest.mark.parametrize("extra", [["missing.py"], ["bad.py"], ["--weird"], ["--", "--weird"],
                                   ["--from", "b", "missing.py"], ["wf.py", "--from", "zzz"],
                                   ["wf.py", "wf.py"]],
                         ids=lambda e: " ".join(e))
def test_retry_bad_paths_refused_nothing_queued(cli, extra: list[str]) -> None:  # type: ignore[no-untyped-def]
    brain, run_id, count = cli
    before = count()
    _refused_cleanly(brain("retry", run_id, *extra))
    assert count() == before


@pytest.mark.parametrize("path", ["empty", "empty/notwf.py"])
def test_retry_path_without_workflows_refused(cli, path: str) -> None:  # type: ignore[no-untyped-def]
    brain, run_id, count = cli
    before = count()
    _refused_cleanly(brain("retry", run_id, path))
    assert count() == before


def test_retry_paths_without_the_runs_workflow_refused(cli) -> None:  # type: ignore[no-untyped-def]
    brain, run_id, count = cli
    before = count()
    _refused_cleanly(brain("retry", run_id, "other"))
    assert count() == before


def test_runs_stale_folder_without_workflows_refused(cli) -> None:  # type: ignore[no-untyped-def]
    brain, _, _ = cli
    _refused_cleanly(brain("runs", "--stale", "empty"))


def test_retry_from_twice_refused(cli) -> None:  # type: ignore[no-untyped-def]
    brain, run_id, count = cli
    before = count()
    _refused_cleanly(brain("retry", run_id, "wf.py", "--from", "b", "--from", "a"))
    assert count() == before


def test_retry_from_then_dashes_path(cli) -> None:  # type: ignore[no-untyped-def]
    brain, run_id, count = cli
    before = count()
    done = brain("retry", run_id, "--from", "b", "--", "wf.py")
    assert done.returncode == 0, done.stderr
    assert count() == before + 1


@pytest.mark.parametrize("args", [
    ["show", "RUN", "extra"], ["cancel", "RUN", "extra"], ["workers", "extra"],
    ["prune", "--older-than", "30d", "extra"], ["db", "upgrade", "extra"],
    ["cache", "clear", "extra"], ["signal", "s", "extra"], ["approve", "RUN", "a", "extra"],
    ["graph", "wf.py", "extra"], ["run", "wf.py", "extra"],
    ["mcp", "serve", "--bogus"]], ids=lambda a: " ".join(a))
def test_other_commands_refuse_extra_words(tmp_path: Path, brain_cmd: list[str],
                                           args: list[str]) -> None:
    (tmp_path / "wf.py").write_text(WF)
    env = {**os.environ, "BRAIN_DATABASE_URL": f"sqlite:///{tmp_path}/x.db"}
    done = subprocess.run([*brain_cmd, *(a.replace("RUN", "0123abcd") for a in args)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    _refused_cleanly(done)
    assert "unrecognized arguments" in done.stderr


# -- Promise 1: abbreviations -------------------------------------------------------------
# GNU getopt_long takes a long option abbreviated to any unique prefix, and gawk's -W NAME
# is --NAME: the option's argument is not the program, the value is.

#: gawk reads options after program text given with --source: the value adds its own.
AWK_OPTION_CODE = '-eBEGIN { system("touch PWNED") }'

ABBREVIATED = [
    (["timeout", "--kill", "1", "5", "{x}", "PWNED"], "touch"),
    (["env", "--ch", "@DIR", "{x}", "PWNED"], "touch"),
    (["xargs", "--max-a", "1", "{x}"], "touch"),
    (["gawk", "--sou", "BEGIN {}", "{x}"], AWK_OPTION_CODE),
    (["gawk", "-W", "source", "BEGIN {}", "{x}"], AWK_OPTION_CODE),
    (["gawk", "-W", "sou", "BEGIN {}", "{x}"], AWK_OPTION_CODE),
    (["gawk", "-bW", "sou", "BEGIN {}", "{x}"], AWK_OPTION_CODE),
    (["gawk", "-Wsource=BEGIN {}", "{x}"], AWK_OPTION_CODE),
    # --replace takes a value only glued (--replace=R): perl is the program, and reads
    # the value as another -e.
    (["xargs", "--replace", "perl", "-e", "1;", "{x}"], "-esystem('touch PWNED')"),
    (["mawk", "-W", "exec", "{x}"], "./evil.awk"),
]


@pytest.mark.parametrize(("argv", "value"), ABBREVIATED, ids=lambda a: " ".join(a)[:30])
def test_abbreviated_long_option(tmp_path: Path, argv: list[str], value: str) -> None:
    if not _installed(argv[0]):
        pytest.skip(f"{argv[0]} not installed")
    _marker_free_or_refused(tmp_path, argv, value)


@pytest.mark.parametrize("argv", [
    ["env", "--sp", "sh -c", "{x}"],  # --split-string: a command line of its own
    ["env", "--split", "sh -c 'echo $0'", "{x}"],
    ["env", "--sp=sh -c", "{x}"],
    ["env", "--argv0", "name", "{x}"],  # coreutils 9.5
    ["stdbuf", "--out", "L", "{x}"],
    ["nice", "--adj", "5", "{x}"],
    ["xargs", "--max", "1", "{x}"],  # ambiguous: refused, never read as a flag
    ["gawk", "--fi", "/dev/null", "{x}"],
    ["gawk", "-W", "{x}", "BEGIN {}"],  # the value would name the option
    ["sed", "--line", "5", "--", "{x}"],  # 5 is the length, the value the script
], ids=lambda a: " ".join(a))
def test_abbreviated_option_refused(argv: list[str]) -> None:
    assert argv_problem(argv) is not None


@pytest.mark.parametrize("argv", [
    ["env", "--ch", "/tmp", "grep", "--", "{x}", "file"],
    ["timeout", "--kill", "1", "5", "grep", "--", "{x}", "file"],
    ["xargs", "--max-a", "1", "grep", "--", "{x}"],
    ["gawk", "-W", "sou", "BEGIN {}", "--", "{x}"],
    ["gawk", "-W", "lint", "{ print }", "{x}"],  # --lint takes no word: the program follows
    ["sed", "--expr", "s/a/b/", "--", "{x}"],
    ["node", "--inspect", "app.js", "{x}"],  # node takes no abbreviation: --inspect is a flag
], ids=lambda a: " ".join(a))
def test_abbreviation_leaves_data_alone(argv: list[str]) -> None:
    assert argv_problem(argv) is None


_ABBREVIATING = sorted(name for name, row in PROGRAMS.items() if row.abbreviates)
#: Words a row reads before the program after its options (timeout's duration).
_LEADING = {"timeout": ["5"]}


@st.composite
def _abbreviated(draw: st.DrawFn) -> list[str]:
    program = draw(st.sampled_from(_ABBREVIATING))
    row = PROGRAMS[program]
    option = draw(st.sampled_from(sorted(o for o in row.arg_options | row.code_options
                                         if o.startswith("--"))))
    prefix = option[:draw(st.integers(3, len(option)))]
    if row.long_letter and draw(st.booleans()):
        spelled = draw(st.sampled_from([[f"-{row.long_letter}", prefix[2:]],
                                        [f"-{row.long_letter}{prefix[2:]}"]]))
    else:
        spelled = [prefix]
    return [program, *spelled, "ARG", *_LEADING.get(program, []), "{x}"]


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(argv=_abbreviated())
@example(argv=["timeout", "--k", "ARG", "5", "{x}"])
@example(argv=["gawk", "-W", "so", "ARG", "{x}"])
def test_generated_abbreviation_taking_an_argument_refused(argv: list[str]) -> None:
    """``PROG --PREFIX ARG {x}``: ARG is the option's argument, so the value is the program
    (or the script, or, after gawk's --source, another option): refused for every prefix
    of every option that takes an argument, in every row whose program abbreviates."""
    assert argv_problem(argv) is not None, argv


# -- Promise 1: -- as an option's value ---------------------------------------------------
# getopt gives an option that takes an argument the next word even when it is ``--``: the
# options go on after it (``git -C -- {x}``, ``tar -cf -- {x}``, ``wget -O -- {x}``), so the
# value is read as an option or the subcommand. The check took that ``--`` for the end of
# the options. A tar bundle's argument letter takes the rest of the word when any follows
# (``-fC``: the archive ``C``), and only tar's first word is a bundle without a dash
# (``tar -c -f a.tar file {x}``: ``file`` is a file, ``{x}`` an option).

#: git runs ``git`` from ``--exec-path`` (gc runs ``git pack-refs`` …): a ``git`` of the
#: step's folder that leaves PWNED.
_GIT_EXEC = "--exec-path=./evil"
_TAR_CODE = "--use-compress-program=touch PWNED; cat"

DASHDASH_VALUES = [
    (["git", "--namespace", "--", "{x}", "gc"], _GIT_EXEC),
    (["git", "-C", "--", "{x}", "gc"], "--exec-path=../evil"),  # a folder named --
    (["tar", "-c", "-f", "--", "{x}", "notes.txt"], _TAR_CODE),
    (["tar", "-cf", "--", "{x}", "notes.txt"], _TAR_CODE),
    (["tar", "cf", "--", "{x}", "notes.txt"], _TAR_CODE),
    (["tar", "-c", "-fC", "{x}", "notes.txt"], _TAR_CODE),
    (["tar", "-c", "-f", "a.tar", "notes.txt", "{x}"], _TAR_CODE),
    (["wget", "-O", "--", "{x}", "http://127.0.0.1:9/"], "--use-askpass=./evil.sh"),
    (["wget", "-qO", "--", "{x}", "http://127.0.0.1:9/"], "--use-askpass=./evil.sh"),
]


def _setup_dashdash(d: Path, argv: list[str]) -> None:
    _setup(d)
    (d / "notes.txt").write_text("notes\n")
    (d / "evil").mkdir()
    (d / "evil" / "git").write_text(f"#!/bin/sh\ntouch {shlex.quote(str(d))}/PWNED\n")
    (d / "evil" / "git").chmod(0o755)
    for repo in (d, d / "--") if argv[:2] == ["git", "-C"] else (d,):
        repo.mkdir(exist_ok=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)


@pytest.mark.parametrize(("argv", "value"), DASHDASH_VALUES,
                         ids=[" ".join(a)[:40] for a, _ in DASHDASH_VALUES])
def test_dashdash_as_option_value_runs_and_is_refused(tmp_path: Path, argv: list[str],
                                                      value: str) -> None:
    """A real run shows the value's effect (the old check accepted each of these), and the
    check refuses the argv."""
    if not _installed(argv[0]):
        pytest.skip(f"{argv[0]} not installed")
    run = tmp_path / "run"
    run.mkdir()
    _setup_dashdash(run, argv)
    assert _runs_value(argv, value, run), f"{argv} with {value!r} left no PWNED"
    assert argv_problem(argv) is not None, argv
    work = tmp_path / "wf"
    work.mkdir()
    _marker_free_or_refused(work, argv, value)


@pytest.mark.parametrize("argv", [
    ["git", "commit", "-m", "--", "{x}"],  # the message is --: {x} is an option
    ["git", "--git-dir", "--", "{x}", "status"],
    ["git", "--namesp", "--", "{x}", "gc"],  # git takes --namesp for --namespace
    ["git", "-C", "--end-of-options", "{x}"],
    ["rsync", "-e", "--", "{x}", "dst/"],
    ["tar", "-x", "--file", "--", "{x}"],
    ["wget", "--output-document", "--", "{x}"],
    ["sudo", "-u", "--", "-s", "{x}"],  # -u takes --: -s runs {x} through a shell
    ["tini", "-s", "--", "-x", "{x}"],
], ids=lambda a: " ".join(a))
def test_dashdash_as_option_value_refused(argv: list[str]) -> None:
    assert argv_problem(argv) is not None


@pytest.mark.parametrize("argv", [
    ["git", "--", "{x}"],
    ["git", "log", "--oneline", "--", "{x}"],
    ["git", "-C", "repo", "log", "--", "{x}"],
    ["git", "-C", "repo", "--end-of-options", "{x}"],
    ["git", "commit", "-m", "{x}"],
    ["tar", "-c", "-f", "a.tar", "--", "{x}"],
    ["tar", "-cf", "{x}", "notes.txt"],
    ["tar", "cf", "{x}", "notes.txt"],
    ["tar", "-c", "-f", "{x}", "-C", "{x}", "notes.txt"],
    ["wget", "-O", "{x}", "--", "https://example.com/"],
    ["wget", "-q", "--", "{x}"],
    ["sudo", "-u", "root", "--", "grep", "{x}"],
    ["sudo", "--", "grep", "{x}"],
], ids=lambda a: " ".join(a))
def test_dashdash_ending_options_still_accepted(argv: list[str]) -> None:
    assert argv_problem(argv) is None


def _value_taking(name: str) -> list[tuple[str, ...]]:
    """The words before the option's value: the option, after a subcommand it is scoped
    to (``git commit -m``)."""
    row = PROGRAMS[name]
    options = row.arg_options | row.code_options | row.global_options | row.value_options
    return sorted(tuple(o.split(":", 1)) if ":" in o else (o,) for o in options)


_TAKING = sorted(name for name, row in PROGRAMS.items()
                 if row.runs not in ("code", "names") and _value_taking(name))
#: What follows the option's value: the value alone, with a file, or after a word a row
#: reads first (timeout's duration, chroot's folder), or after a literal program.
_TAILS = [["{x}"], ["{x}", "notes.txt"], ["5", "{x}"], ["cat", "{x}"], ["{x}", "gc"]]


@st.composite
def _dashdash(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    name = draw(st.sampled_from(_TAKING))
    before = list(draw(st.sampled_from(_value_taking(name))))
    tail = draw(st.sampled_from(_TAILS))
    return [name, *before, "--", *tail], [name, *before, "X", *tail]


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(pair=_dashdash())
@example(pair=(["git", "-C", "--", "{x}"], ["git", "-C", "X", "{x}"]))
@example(pair=(["tar", "-f", "--", "{x}", "notes.txt"], ["tar", "-f", "X", "{x}", "notes.txt"]))
@example(pair=(["wget", "-O", "--", "{x}"], ["wget", "-O", "X", "{x}"]))
def test_generated_dashdash_value_judged_as_a_word(pair: tuple[list[str], list[str]]) -> None:
    """``PROG OPT -- {x}`` is judged as ``PROG OPT X {x}``: OPT takes the ``--`` as its
    value, and the words after it are read as before."""
    dashes, word = pair
    assert (argv_problem(dashes) is None) == (argv_problem(word) is None), (dashes, word)
