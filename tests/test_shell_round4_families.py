"""The families of shell templates attack round 4 found accepted although the value runs
(issue 30): ``python -m MODULE``, perl's ``<>``, npm's subcommands (aliases and
abbreviations included), and a subcommand hidden behind an option's argument. Each family
is generated with hypothesis; the attack's own reproductions, run under dash and bash,
are in ``tests/attack/test_attack_round4_shell_programs.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brain.shell_check import argv_problem, shell_problem
from brain.shell_check.npm import ALIASES, COMMANDS, npm_command
from brain.shell_check.programs import CODE_MODULES, PROGRAMS

PYTHONS = st.sampled_from(["python3", "python", "python3.12", "/usr/bin/python3", "pypy3"])
FLAGS = st.lists(st.sampled_from(["-I", "-u", "-B", "-E", "-s", "-W ignore", "-X dev"]),
                 max_size=2).map(" ".join)
FEW = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FEW
@given(python=PYTHONS, flags=FLAGS, module=st.sampled_from(sorted(CODE_MODULES)),
       before=st.lists(st.sampled_from(["-n1", "-v", "script.py", "--", "x"]), max_size=2),
       glued=st.booleans())
def test_python_m_a_module_that_runs_code_takes_no_placeholder(
        python: str, flags: str, module: str, before: list[str], glued: bool) -> None:
    run = f"-m{module}" if glued else f"-m {module}"
    template = " ".join(w for w in [python, flags, run, *before, "{x}"] if w)
    assert shell_problem(template) is not None, template
    argv = [*template.split(" ")]
    assert argv_problem(argv) is not None, argv


@FEW
@given(python=PYTHONS, flags=FLAGS, bundle=st.sampled_from(["-Im", "-Bm", "-uIm", "-sm"]),
       module=st.sampled_from(["timeit", "cProfile", "runpy", "pdb", "unittest"]))
def test_a_bundled_m_counts_as_m(python: str, flags: str, bundle: str, module: str) -> None:
    assert shell_problem(f"{python} {flags} {bundle} {module} {{x}}") is not None


@FEW
@given(python=PYTHONS, sub=st.sampled_from(["install", "download", "wheel"]),
       opts=st.sampled_from(["", "--no-deps", "-U", "--no-index --no-deps"]),
       tool=st.sampled_from(["pip", "pip3"]))
def test_python_m_a_program_of_the_table_is_checked_as_that_program(
        python: str, sub: str, opts: str, tool: str) -> None:
    module = "pip" if tool == "pip3" else tool
    assert shell_problem(f"{python} -m {module} {sub} {opts} {{x}}") is not None
    # as pip itself: a version of a package written out stays fine
    assert shell_problem(f'{python} -m {module} {sub} "tool=={{x}}"') is None


@FEW
@given(python=PYTHONS, template=st.sampled_from([
    "-m http.server {x}", "-m http.server --bind 127.0.0.1 {x}", "-m json.tool {x}",
    "-m json.tool -- {x}", "-m venv {x}", "-m zipfile -l {x}", "-m tarfile -l {x}",
    "-m black -- {x}", "-m calendar {x}", "-c 'import sys; print(sys.argv[1])' {x}"]))
def test_python_m_a_module_that_reads_data_stays_accepted(python: str, template: str) -> None:
    assert shell_problem(f"{python} {template}") is None


PERL_LOOPS = st.sampled_from(["print while <>", "print while < >", "print for <ARGV>",
                              "while (<>) { print }", "print readline(ARGV)",
                              "print readline *ARGV", "print eof() ? 1 : 0",
                              "@l = <>; print @l"])


@FEW
@given(loop=PERL_LOOPS, opt=st.sampled_from(["-e", "-E", "-le", "-wle", "-lE"]),
       dashes=st.booleans())
def test_perl_text_reading_the_argv_loop_takes_no_placeholder(
        loop: str, opt: str, dashes: bool) -> None:
    template = f"perl {opt} '{loop}' {'-- ' if dashes else ''}{{x}}"
    assert shell_problem(template) is not None, template


@FEW
@given(loop=st.sampled_from(["print while <STDIN>", "print while <<>>", "print $ARGV[0]",
                             "print for @ARGV", "print scalar(@ARGV)"]),
       opt=st.sampled_from(["-e", "-E", "-le"]))
def test_perl_text_that_does_not_open_its_arguments_takes_them_after_dashes(
        loop: str, opt: str) -> None:
    assert shell_problem(f"perl {opt} '{loop}' -- {{x}}") is None


@FEW
@given(bundle=st.sampled_from(["-le", "-wle", "-we", "-lE"]),
       code=st.sampled_from(["print 1", "print for @ARGV"]))
def test_perl_bundled_e_still_reads_options_after_its_text(bundle: str, code: str) -> None:
    """``perl -le '…' {x}``: perl reads ``-e;system(…)`` after the text as more code."""
    assert shell_problem(f"perl {bundle} '{code}' {{x}}") is not None


def test_perl_bundled_e_really_reads_a_value_as_more_code(tmp_path: Path) -> None:
    if shutil.which("perl") is None:
        pytest.skip("perl is not installed")
    subprocess.run(["perl", "-le", "print 1", '-e;system("touch PWNED")'], cwd=tmp_path,
                   capture_output=True, timeout=30, check=False)
    assert (tmp_path / "PWNED").exists()


def _npm_words(command: str) -> list[str]:
    """Every word npm reads as ``command``: itself, its aliases, unique abbreviations."""
    names = [*COMMANDS, *ALIASES]
    words = {n[:k] for n in names for k in range(1, len(n) + 1)}
    return sorted(w for w in words if npm_command(w) == command)


NPM_RUNNING = sorted(PROGRAMS["npm"].subcommands)
NPM_RUNNING_WORDS = st.sampled_from(NPM_RUNNING).flatmap(
    lambda c: st.sampled_from(_npm_words(c)))


@FEW
@given(word=NPM_RUNNING_WORDS, tail=st.sampled_from(["{x}", "foo {x}", "foo -- {x}",
                                                       "-- {x}", "--prefix . {x}"]))
def test_npm_every_spelling_of_a_running_command_takes_no_placeholder(
        word: str, tail: str) -> None:
    template = f"npm {word} {tail}"
    if npm_command(word) in PROGRAMS["npm"].data_after_dashes and " -- " in f" {tail}" \
            and (npm_command(word) != "run" or tail.startswith("foo")):
        return  # npm run build -- {x}: the documented exception
    assert shell_problem(template) is not None, template


def test_npm_names_its_commands_as_the_installed_npm_does(tmp_path: Path) -> None:
    """The table's reading of npm's words is npm's own (``lib/utils/cmd-list.js``)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed")
    cmd_list = Path(npm).resolve().parents[1] / "lib" / "utils" / "cmd-list.js"
    if not cmd_list.exists():
        pytest.skip("npm's cmd-list.js is not where npm 11 keeps it")
    names = [*COMMANDS, *ALIASES]
    words = sorted({n[:k] for n in names for k in range(1, len(n) + 1)}
                   | {"installTest", "runScript", "zzz"})
    script = (f"const {{deref}} = require({json.dumps(str(cmd_list))});"
              f"console.log(JSON.stringify({json.dumps(words)}.map(w => deref(w) ?? null)))")
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=60,
                         check=True)
    theirs = json.loads(out.stdout)
    assert [npm_command(w) for w in words] == theirs


#: Tools, a subcommand that runs a program and one that reads data.
TOOLS = [("npm", "exec", "view"), ("uv", "run", "venv"), ("docker", "run", "build"),
         ("kubectl", "exec", "get"), ("cargo", "run", "build"), ("pnpm", "exec", "list")]


@FEW
@given(tool=st.sampled_from(TOOLS), option=st.sampled_from(
    ["--userconfig", "--frobnicate", "--zz", "-Q", "--config-x"]),
       first=st.sampled_from(["run", "build", "view", "get", "test", "list"]),
       tail=st.sampled_from(["-- {x}", "script.py {x}", "{x}"]))
def test_an_option_of_unknown_arity_leaves_the_subcommand_uncertain(
        tool: tuple[str, str, str], option: str, first: str, tail: str) -> None:
    """``npm --userconfig run exec -- {x}``: npm runs ``exec`` (``run`` is the option's
    file); whichever word is the subcommand, a running one takes no placeholder."""
    name, running, _data = tool
    template = f"{name} {option} {first} {running} {tail}"
    assert shell_problem(template) is not None, template


@FEW
@given(tool=st.sampled_from(TOOLS), option=st.sampled_from(
    ["--frobnicate", "--zz", "-Q"]), tail=st.sampled_from(["{x}", "-t a:{x} ."]))
def test_a_data_subcommand_after_an_unknown_option_stays_accepted(
        tool: tuple[str, str, str], option: str, tail: str) -> None:
    """Only the word right after the option may be its argument: the subcommand is one of
    the next two words, and a placeholder after both is an argument of a data subcommand
    (while one right after them could itself be the subcommand)."""
    name, _running, data = tool
    assert shell_problem(f"{name} {option} {data} arg {tail}") is None
    assert shell_problem(f"{name} {option} {data} {{x}}") is not None


@pytest.mark.parametrize("template", [
    "uv --directory proj run script.py {x}", "uv --offline run script.py {x}",
    "cargo +nightly run -- {x}", "cargo --locked run -- {x}", "npm -g view {x}",
    "npm --prefix . run build -- {x}", "kubectl -n prod get pod {x}",
    "docker --context prod build -t app:{x} ."])
def test_known_global_options_keep_the_subcommand_certain(template: str) -> None:
    assert shell_problem(template) is None


@FEW
@given(option=st.sampled_from(["--frobnicate", "--attr-source", "--exec-pathx"]),
       data=st.sampled_from(["checkout", "status", "branch", "switch"]),
       real=st.sampled_from(["clone", "fetch", "log", "pull"]))
def test_git_an_unknown_global_option_makes_the_subcommand_unknown(
        option: str, data: str, real: str) -> None:
    """``git --attr-source checkout clone {x}`` runs ``clone``: a data subcommand counts only
    where it is certain."""
    assert shell_problem(f"git {option} {data} {real} {{x}}") is not None
    assert shell_problem(f"git -C repo {data} {{x}}") is None
