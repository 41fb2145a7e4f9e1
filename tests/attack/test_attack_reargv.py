"""Re-attack of the argv shell check (SPEC §3): argvs the check accepts although a
hostile placeholder value runs code or a program of its choosing.

Each hole is shown by a real run (the value makes a marker file appear) and then
asserts that :func:`brain.shell_check.argv_problem` refuses the argv; marked
``xfail(strict=True)`` while the hole was open (all are closed now). The hypothesis test at the end
searches option words of the GNU program-runners (``--help``, prefixes,
clusters, ``--``) and holds now.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brain.shell_check import argv_problem, shell_problem

PWN = "#!/bin/sh\ntouch PWNED\n"


def _work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    pwn = work / "pwn"
    pwn.write_text(PWN)
    pwn.chmod(0o755)
    return work


def _runs_value(work: Path, argv: list[str], value: str, timeout: float = 120) -> bool:
    real = [value if w == "{x}" else w for w in argv]
    try:
        subprocess.run(real, cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass
    return (work / "PWNED").exists()


def _need(program: str) -> None:
    if shutil.which(program) is None:
        pytest.skip(f"{program} not installed")


# -- Holes ------------------------------------------------------------------------------

NODE_TEST = [
    ["node", "--test", "a.js", "{x}"],
    ["node", "--test-only", "--test", "a.js", "{x}"],
    ["env", "node", "--test", "a.js", "{x}"],
]


@pytest.mark.parametrize("argv", NODE_TEST, ids=lambda a: " ".join(a))
def test_node_test_runs_every_file_argument(tmp_path: Path, argv: list[str]) -> None:
    _need("node")
    work = _work(tmp_path)
    (work / "a.js").write_text("console.log(1)\n")
    (work / "evil.js").write_text(
        'require("child_process").execSync("touch PWNED")\n')
    assert _runs_value(work, argv, str(work / "evil.js"))
    assert argv_problem(argv) is not None


def test_node_test_runs_every_file_argument_in_command() -> None:
    assert shell_problem("node --test a.js {x}") is not None


def _has_regrtest() -> bool:
    return subprocess.run(["python3", "-c", "import test.libregrtest"], capture_output=True,
                          check=False).returncode == 0


@pytest.mark.parametrize("argv", [["python3", "-m", "test", "-j1", "{x}", "test_int"],
                                  ["python3", "-m", "test", "-j1", "test_int", "{x}"],
                                  ["python3", "-m", "test.regrtest", "-j1", "{x}", "test_int"]],
                         ids=lambda a: " ".join(a))
def test_python_m_test_python_option(tmp_path: Path, argv: list[str]) -> None:
    _need("python3")
    if not _has_regrtest():
        pytest.skip("python3's test package not installed")
    work = _work(tmp_path)
    assert _runs_value(work, argv, "--python=./pwn")
    assert argv_problem(argv) is not None


GIT_DIR = [
    ["git", "-C", "{x}", "status"],
    ["git", "--git-dir", "{x}/.git", "status"],
    ["timeout", "30", "git", "-C", "{x}", "status"],
]


@pytest.mark.parametrize("argv", GIT_DIR, ids=lambda a: " ".join(a))
def test_git_repository_value_runs_its_config(tmp_path: Path, argv: list[str]) -> None:
    _need("git")
    work = _work(tmp_path)
    evil = tmp_path / "evil"
    subprocess.run(["git", "init", "-q", str(evil)], check=True)
    subprocess.run(["git", "-C", str(evil), "config", "core.fsmonitor",
                    f"touch {work / 'PWNED'}; false #"], check=True)
    real = [w.replace("{x}", str(evil)) for w in argv]
    assert _runs_value(work, real, str(evil))
    assert argv_problem(argv) is not None


# The programs of CODE_MODULES (`python3 -m pydoc {x}`, `-m pytest` are refused) under
# their own program names are missing from the table: the value names the module or
# test file that runs.
MODULE_PROGRAMS = [
    (["pydoc3", "{x}"], "pwnmod", "pydoc3"),
    (["pydoc", "{x}"], "pwnmod", "pydoc"),
    (["@VENV/pytest", "-q", "{x}"], "test_pwn.py", "pytest"),
    (["@VENV/pytest", "-q", "test_ok.py", "{x}"], "test_pwn.py", "pytest"),
]


@pytest.mark.parametrize(("argv", "value", "program"), MODULE_PROGRAMS,
                         ids=lambda a: " ".join(a) if isinstance(a, list) else a)
def test_module_program_runs_the_value(tmp_path: Path, argv: list[str], value: str,
                                       program: str) -> None:
    venv = Path(__file__).resolve().parents[2] / ".venv" / "bin"
    argv = [w.replace("@VENV", str(venv)) for w in argv]
    _need(argv[0])
    work = _work(tmp_path)
    code = "import os\nos.system('touch PWNED')\n"
    (work / "pwnmod.py").write_text(code)
    (work / "test_pwn.py").write_text(code + "def test_x():\n    pass\n")
    (work / "test_ok.py").write_text("def test_ok():\n    pass\n")
    assert _runs_value(work, argv, value)
    assert argv_problem([program, *argv[1:]]) is not None


PROVE = [
    (["prove", "{x}", "a.t"], "--exec=./pwn"),
    (["prove", "a.t", "{x}"], "evil.t"),
]


@pytest.mark.parametrize(("argv", "value"), PROVE, ids=lambda a: " ".join(a)
                         if isinstance(a, list) else a)
def test_prove_runs_the_value(tmp_path: Path, argv: list[str], value: str) -> None:
    _need("prove")
    work = _work(tmp_path)
    (work / "a.t").write_text('print "ok 1\\n1..1\\n";\n')
    (work / "evil.t").write_text('system("touch PWNED"); print "ok 1\\n1..1\\n";\n')
    assert _runs_value(work, argv, value)
    assert argv_problem(argv) is not None


# -- What held: a generated search over the GNU program-runners ----------------------------

RUNNERS = ["env", "timeout", "nice", "stdbuf", "xargs"]


def _option_words(program: str) -> list[str]:
    if shutil.which(program) is None:
        return []
    out = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=10,
                         stdin=subprocess.DEVNULL, check=False)
    opts = sorted(set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", out.stdout + out.stderr)))
    prefixes = sorted({o[:k] for o in opts if o.startswith("--") for k in range(3, len(o))})
    return [*opts, *prefixes, "--", "1", "5", "."]


WORDS = {p: _option_words(p) for p in RUNNERS}


@st.composite
def _runner_argv(draw: st.DrawFn) -> list[str]:
    program = draw(st.sampled_from([p for p in RUNNERS if WORDS[p]] or ["env"]))
    words = draw(st.lists(st.sampled_from(WORDS[program] or ["--"]), max_size=4))
    at = draw(st.integers(0, len(words)))
    return [program, *words[:at], "{x}", *words[at:]]


@pytest.mark.skipif(shutil.which("env") is None, reason="no coreutils")
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=_runner_argv())
def test_runner_accepted_argv_never_runs_the_value(tmp_path: Path, argv: list[str]) -> None:
    if argv_problem(argv) is not None:
        return
    work = tmp_path / f"w{os.getpid()}_{abs(hash(tuple(argv)))}"
    work.mkdir()
    (work / "pwn").write_text(PWN)
    (work / "pwn").chmod(0o755)
    assert not _runs_value(work, argv, "./pwn", timeout=5), argv
