"""Attack round 4 (SPEC §3, shell safety): templates the check accepts where a hostile
placeholder value runs code, and env= names that choose code but are missing from the
table. Each case asserts "refused at definition time, or, rendered the way the runner
renders it (``render_command``) and run under dash and bash --posix, no marker file
appears". Each failed before the fix; they now pass.

Breaks (value -> what runs):

* ``python3 -m timeit {x}``: timeit runs its argument as Python code (the words after
  ``-m MODULE`` are taken for data; the module is never looked up: ``-m pip install``,
  ``-m cProfile``, ``-m pdb``, ``-m trace`` run a package or script the value names).
* ``python3 -m pip install {x}``: bypasses the ``pip`` row; a path or URL to a package
  runs its build backend.
* ``perl -e 'print while <>' -- {x}``: ``<>`` opens ``cmd|`` as a command, exactly as
  the ``-n``/``-p`` loop the check already refuses.
* ``npm explore PKG -- {x}``: runs the value as a shell command.
* ``npm it {x}`` / ``npm install-test`` (also ``npm link``, not run here: it links
  globally): install the package the value
  names (its install scripts run); not in npm's subcommand list.
* ``npm --userconfig run exec -- {x}``: the check takes the first word in the
  subcommand list (``run``, the option's argument) for npm's subcommand; npm runs
  ``exec -- {x}``, which runs the package the value names.
* env ``TAR_OPTIONS``, ``ZIPOPT``, ``RSYNC_RSH``: tar/zip/rsync read them as options or
  the remote shell (``--checkpoint-action=exec=…``, ``-TT=…``, ``sh -c …``).

Run: ``.venv/bin/pytest tests/attack/test_attack_round4_shell_programs.py -n 0``
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from brain.shell_check import render_command, shell_problem
from brain.shell_check.environment import env_problem

SHELLS = (["dash"], ["bash", "--posix"])


def _npm_setup(d: Path) -> None:
    (d / "node_modules" / "foo").mkdir(parents=True)
    (d / "node_modules" / "foo" / "package.json").write_text(
        json.dumps({"name": "foo", "version": "1.0.0"}))
    (d / "package.json").write_text(json.dumps({"name": "app", "version": "1.0.0"}))
    pkg = d / "evilpkg"
    pkg.mkdir()
    (pkg / "package.json").write_text(json.dumps({
        "name": "evilpkg", "version": "1.0.0", "bin": {"evilpkg": "run.js"},
        "scripts": {"preinstall": "touch \"$INIT_CWD/PWNED\""}}))
    (pkg / "run.js").write_text("#!/usr/bin/env node\n"
                                "require('fs').writeFileSync(process.env.HOME + '/PWNED', '')\n")
    (pkg / "run.js").chmod(0o755)


def _npx_setup(d: Path) -> None:
    _npm_setup(d)
    # Outside a project (no package.json, no node_modules) npm exec installs what it names.
    (d / "package.json").unlink()
    shutil.rmtree(d / "node_modules")


def _pip_setup(d: Path) -> None:
    pkg = d / "evilpkg"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "evil"\nbackend-path = ["."]\n'
        '[project]\nname = "evilpkg"\nversion = "1"\n')
    (pkg / "evil.py").write_text(
        "import os, pathlib\npathlib.Path(os.environ['HOME'], 'PWNED').touch()\n"
        "def get_requires_for_build_wheel(c=None): return []\n")


NPM_ENV = {"npm_config_offline": "true", "npm_config_yes": "true",
           "npm_config_update_notifier": "false", "npm_config_audit": "false",
           "npm_config_fund": "false"}

CASES: list[tuple[str, str, str, Callable[[Path], None] | None, dict[str, str]]] = [
    ("timeit", "python3 -m timeit -n1 -r1 {x}", "__import__('os').system('touch PWNED')",
     None, {}),
    ("pip-module", "python3 -m pip install --no-index --no-deps {x}", "./evilpkg",
     _pip_setup, {}),
    ("perl-diamond", "perl -e 'print while <>' -- {x}", "touch PWNED|", None, {}),
    ("npm-explore", "npm explore foo -- {x}", "touch ../../PWNED", _npm_setup, NPM_ENV),
    ("npm-install-test", "npm it {x}", "./evilpkg", _npm_setup, NPM_ENV),
    ("npm-option-argument", "npm --userconfig run exec -- {x}", "./evilpkg", _npx_setup,
     NPM_ENV),
]


def _runs_code(tmp_path: Path, template: str, value: str,
               setup: Callable[[Path], None] | None, env: dict[str, str]) -> list[str]:
    if shell_problem(template) is not None:
        return []
    command = render_command(template, lambda ref: value)
    hits = []
    for i, sh in enumerate(SHELLS):
        d = tmp_path / f"s{i}"
        d.mkdir()
        if setup is not None:
            setup(d)
        try:
            subprocess.run([*sh, "-c", command], cwd=d, capture_output=True, timeout=120,
                           stdin=subprocess.DEVNULL,
                           # npm link installs globally: a prefix of the test's own
                           env={**os.environ, "HOME": str(d), **env,
                                "npm_config_prefix": str(d / "npm-prefix")})
        except subprocess.TimeoutExpired:
            pass
        if (d / "PWNED").exists():
            hits.append(sh[0])
    return hits


@pytest.mark.parametrize(("template", "value", "setup", "env"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_accepted_template_never_runs_the_value(
        tmp_path: Path, template: str, value: str,
        setup: Callable[[Path], None] | None, env: dict[str, str]) -> None:
    program = template.split()[0]
    if shutil.which(program) is None:
        pytest.fail(f"{program} is not installed (the check should refuse anyway)")
    assert shell_problem(template) is not None or not _runs_code(
        tmp_path, template, value, setup, env), f"{template!r} with {value!r} ran code"


ENV_CASES = [
    ("TAR_OPTIONS", "tar -cf out.tar in.txt",
     "--checkpoint=1 --checkpoint-action=exec=touch\\ PWNED"),
    ("ZIPOPT", "zip -T out.zip in.txt", "-TT=touch${IFS}PWNED;true"),
    ("RSYNC_RSH", "rsync -a in.txt remotehost:/tmp/x", "sh -c 'touch PWNED'"),
]


@pytest.mark.parametrize(("name", "command", "value"), ENV_CASES,
                         ids=[c[0] for c in ENV_CASES])
def test_env_variable_that_chooses_code_is_refused(
        tmp_path: Path, name: str, command: str, value: str) -> None:
    if env_problem(name, "{trigger.body}") is not None:
        return
    program = command.split()[0]
    if shutil.which(program) is None:
        pytest.fail(f"{program} is not installed and {name} is not refused")
    (tmp_path / "in.txt").write_text("x")
    subprocess.run(["sh", "-c", command], cwd=tmp_path, capture_output=True, timeout=30,
                   stdin=subprocess.DEVNULL, env={**os.environ, name: value})
    assert not (tmp_path / "PWNED").exists(), f"env {name}={value!r} ran code"
