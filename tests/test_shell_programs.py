"""One demonstration per row of the program table (``brain/shell_check/programs.py``).

For every program the table names, :data:`DEMOS` holds a template (and, for most
programs run without a shell, an argv list) with a placeholder where the table
says the program takes code or the program to run, and hostile values. Each
demo is checked twice:

- the check refuses it (``shell_problem``, and ``argv_problem`` for the argv);
- run anyway, as if the check had been skipped (rendered with
  ``shell_quote=True`` and run under ``dash -c`` and ``bash --posix -c``, or the
  argv run directly without a shell), the value really runs: a marker file
  appears. So each refusal is needed, not just cautious.

The second half is skipped for programs not installed here, and for the rows in
:data:`SKIP_RUNS` (a daemon, a terminal, the network or privileges would be
needed, or no value is known to run: those rows are listed conservatively).
Processes started here end by themselves (``timeout`` ≤ 10 s) and write only
under ``tmp_path``. ``test_every_row_of_the_table_has_a_demo`` keeps the table
from growing without one.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from brain.placeholders import Ref, render
from brain.shell_check import argv_problem, shell_problem
from brain.shell_check.programs import PROGRAMS

ROOT = Path(__file__).resolve().parents[1]
SHELLS = {"dash": ["dash", "-c"], "bash --posix": ["bash", "--posix", "-c"]}
TIMEOUT = 10
#: How long an asynchronous launcher (tmux) may take to run the value.
POLL_SECONDS = 5.0

# Shell builtins and keywords: no program to look for on PATH (bash has them all).
BUILTINS = set(
    "eval . source trap alias unalias bind complete compgen compopt enable fc history jobs "
    "let declare typeset local export readonly unset read readarray mapfile getopts wait set "
    "shopt hash select ulimit caller shift return exit break continue command builtin exec "
    "coproc time".split())


@dataclass(frozen=True)
class Demo:
    """A placeholder where the table says code or the program stands, and values that run."""

    #: A ``shell(command=...)`` template; ``shell_problem`` must refuse it.
    template: str
    #: Hostile values by placeholder (``MARK`` becomes the marker file's path).
    values: Mapping[str, str]
    #: The same as ``shell(argv=[...])`` words; ``argv_problem`` must refuse them.
    argv: tuple[str, ...] | None = None
    #: Programs the "really runs" half needs (default: the row's own name).
    needs: tuple[str, ...] | None = None
    #: Files written (executable) in the working directory first; ``MARK`` replaced.
    files: Mapping[str, str] = field(default_factory=dict)
    #: Shell commands run in the working directory before a run (``prepare``) and after it
    #: (``cleanup``: stop what an asynchronous launcher left running).
    prepare: str | None = None
    cleanup: str | None = None
    #: Extra environment for the runs.
    env: Mapping[str, str] = field(default_factory=dict)
    #: A command that must succeed for the runs half (a server to talk to), else skip.
    probe: tuple[str, ...] | None = None
    #: Why the runs half cannot be shown here (for the issue's cases; rows use SKIP_RUNS).
    skip: str | None = None
    #: How long a run may take (pip builds a package: slow on a busy machine).
    timeout: float = TIMEOUT


TOUCH = {"{x}": "touch MARK"}
PROG = {"{x}": "touch", "{y}": "MARK"}  # the value is the program, its argument follows
SUBSCRIPT = {"{x}": "a[$(touch MARK)]"}
PS4 = {"{x}": "PS4=$(touch MARK)"}
JOB = {"job.sh": "#!/bin/sh\ntouch MARK\n"}  # a script a value can name as the program
#: A Python module a value can name, which runs when imported.
PWNMOD = {"pwnmod.py": "import os\nos.system('touch MARK')\n"}


def words(template: str) -> tuple[str, ...]:
    """The template's words as an argv list (for templates without shell syntax)."""
    return tuple(shlex.split(template))


def prog(name: str, template: str | None = None, **kw: object) -> Demo:
    """``NAME {x} {y}`` with the value as the program to run."""
    template = template or f"{name} {{x}} {{y}}"
    return Demo(template, PROG, argv=words(template), **kw)  # type: ignore[arg-type]


_PSQL_ENV = {"PGHOST": "127.0.0.1", "PGUSER": "postgres", "PGDATABASE": "test",
             "PGCONNECT_TIMEOUT": "3"}
_PSQL_PROBE = ("psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-c", "select 1")
_MYSQL_PROBE = ("mysql", "--connect-timeout=3", "-e", "select 1")
_TOUCH_PATH = shutil.which("touch") or "/usr/bin/touch"
_SHELL_NAMES = [n for n, row in PROGRAMS.items() if row.runs == "shell"]

DEMOS: dict[str, Demo] = {
    # --- code: the arguments are shell code ----------------------------------------------
    "eval": Demo("eval {x}", TOUCH),
    ".": Demo(". {x}", {"{x}": "./job.sh"}, files=JOB),
    "source": Demo("source {x}", {"{x}": "./job.sh"}, files=JOB),
    "trap": Demo("trap {x} EXIT", TOUCH),
    "alias": Demo("alias {x}\nsay", {"{x}": "say=touch MARK"}),
    "unalias": Demo("unalias {x}", SUBSCRIPT),
    "bind": Demo("bind -x {x}", {"{x}": '"\\C-t": touch MARK'}),
    "complete": Demo("complete -C {x} deploy", TOUCH),
    "compgen": Demo("compgen -C {x} word", TOUCH),
    "compopt": Demo("compopt {x} deploy", {"{x}": "-o"}),
    "enable": Demo("enable -f {x} evil", {"{x}": "./evil.so"}, needs=("cc",),
                   files={"evil.c": '#include <stdlib.h>\n__attribute__((constructor)) static '
                                    'void init(void) { system("touch MARK"); }\n'},
                   prepare="cc -shared -fPIC -o evil.so evil.c"),
    "fc": Demo("set -o history; echo hi\nfc -e {x} -1", TOUCH),
    "history": Demo("history -s {x}; fc -s", TOUCH),
    "jobs": Demo("jobs -x {x} {y}", PROG),
    "watch": Demo("watch -n 0.1 -g {x}", {"{x}": "touch MARK; date +%N"},
                  argv=words("watch -n 0.1 -g {x}")),
    "script": Demo("script -q -c {x} /dev/null", TOUCH, argv=words("script -q -c {x} /dev/null")),
    "parallel": Demo("parallel ::: {x}", TOUCH, argv=words("parallel ::: {x}")),
    "su": Demo("su root -c {x}", TOUCH, argv=words("su root -c {x}")),
    "runuser": Demo("runuser -u root -- {x} {y}", PROG),
    "ssh": Demo("ssh -F /dev/null backup.example.com {x}", TOUCH,
                argv=words("ssh -F /dev/null backup.example.com {x}")),
    "tmux": Demo("tmux -S tmux.sock new-session -d -s job {x}", TOUCH,
                 argv=words("tmux -S tmux.sock new-session -d -s job {x}"),
                 cleanup="tmux -S tmux.sock kill-server"),
    "screen": Demo("screen -dmS job {x} {y}", PROG),
    "flock": Demo("flock deploy.lock -c {x}", TOUCH, argv=words("flock deploy.lock -c {x}")),
    "sg": Demo("sg users -c {x}", TOUCH),
    "newgrp": Demo("newgrp {x}", {"{x}": "users"}),
    "at": Demo("at -f {x} now", {"{x}": "./job.sh"}, files=JOB),
    "batch": Demo("batch -f {x}", {"{x}": "./job.sh"}, files=JOB),
    "sqlite3": Demo("sqlite3 cache.db {x}", {"{x}": ".shell touch MARK"},
                    argv=words("sqlite3 cache.db {x}")),
    "psql": Demo("psql -h 127.0.0.1 -U postgres -d test -c {x}", {"{x}": "\\! touch MARK"},
                 argv=words("psql -h 127.0.0.1 -U postgres -d test -c {x}"),
                 probe=_PSQL_PROBE, env={"PGCONNECT_TIMEOUT": "3"}),
    "mysql": Demo("mysql -e {x}", {"{x}": "system touch MARK"}, argv=words("mysql -e {x}"),
                  probe=_MYSQL_PROBE),
    "mariadb": Demo("mariadb -e {x}", {"{x}": "system touch MARK"},
                    argv=words("mariadb -e {x}"), probe=("mariadb", *_MYSQL_PROBE[1:])),
    "expect": Demo("expect -c {x}", {"{x}": "exec touch MARK"}, argv=words("expect -c {x}")),
    "gdb": Demo("gdb -batch -nx -ex {x}", {"{x}": "shell touch MARK"},
                argv=words("gdb -batch -nx -ex {x}")),
    **{name: Demo(f"{name} -es -u NONE -N -c {{x}} -c 'qa!'", {"{x}": "!touch MARK"},
                  argv=words(f"{name} -es -u NONE -N -c {{x}} -c 'qa!'"))
       for name in ("vim", "vi", "view", "ex")},
    "nvim": Demo("nvim --headless -u NONE -c {x} -c 'qa!'", {"{x}": "!touch MARK"},
                 argv=words("nvim --headless -u NONE -c {x} -c 'qa!'")),
    "ed": Demo("ed -s {x} < /dev/null", {"{x}": "!touch MARK"}, argv=words("ed -s {x}")),
    **{name: Demo(f"{name} -NoProfile -c {{x}}", {"{x}": "New-Item -ItemType File MARK"},
                  argv=words(f"{name} -NoProfile -c {{x}}"))
       for name in ("pwsh", "powershell")},
    "tclsh": Demo("tclsh {x}", {"{x}": "job.tcl"}, files={"job.tcl": "exec touch MARK\n"}),
    "wish": Demo("wish {x}", {"{x}": "job.tcl"}, files={"job.tcl": "exec touch MARK\nexit\n"}),
    "capsh": Demo("capsh -- -c {x}", TOUCH, argv=words("capsh -- -c {x}")),
    "run-parts": Demo("run-parts {x}", {"{x}": "./jobs"}, argv=words("run-parts {x}"),
                      files={"jobs/job": "#!/bin/sh\ntouch MARK\n"}),
    **{name: Demo(f"{name} -c {{x}} 127.0.0.1 9", TOUCH, argv=words(f"{name} -c {{x}} 127.0.0.1 9"))
       for name in ("nc", "ncat", "netcat")},
    "man": Demo("man -P {x} man", TOUCH, argv=words("man -P {x} man"),
                probe=("man", "-w", "man")),
    **{name: Demo(f"{name} localhost -c local -m shell -a {{x}}", TOUCH,
                  argv=words(f"{name} localhost -c local -m shell -a {{x}}"))
       for name in ("ansible", "ansible-playbook")},
    "socat": Demo("socat -u {x} /dev/null", {"{x}": "SYSTEM:touch MARK"},
                  argv=words("socat -u {x} /dev/null")),
    "start-stop-daemon": Demo("start-stop-daemon --start --quiet --exec {x} -- {y}",
                              {"{x}": _TOUCH_PATH, "{y}": "MARK"},
                              argv=words("start-stop-daemon --start --quiet --exec {x} -- {y}")),
    "perf": prog("perf", "perf stat -o /dev/null {x} {y}",
                 probe=("perf", "stat", "-o", "/dev/null", "true")),
    "gdbtui": Demo("gdbtui -batch -nx -ex {x}", {"{x}": "shell touch MARK"},
                   argv=words("gdbtui -batch -nx -ex {x}")),
    **{name: Demo(f"{name} -es -u NONE -N -c {{x}} -c 'qa!'", {"{x}": "!touch MARK"},
                  argv=words(f"{name} -es -u NONE -N -c {{x}} -c 'qa!'"))
       for name in ("vimdiff", "gvim")},
    # Restricted vim runs no shell command, but its own script still writes files.
    **{name: Demo(f"{name} -es -u NONE -N -c {{x}} -c 'qa!'",
                  {"{x}": 'call writefile([], "MARK")'},
                  argv=words(f"{name} -es -u NONE -N -c {{x}} -c 'qa!'"))
       for name in ("rvim", "rview", "evim")},
    # Debian's alternative: the demo speaks vim, so it needs editor to be vim.
    "editor": Demo("editor -es -u NONE -N -c {x} -c 'qa!'", {"{x}": "!touch MARK"},
                   argv=words("editor -es -u NONE -N -c {x} -c 'qa!'"),
                   probe=("sh", "-c", "editor --version | grep -q VIM")),
    "sensible-editor": Demo("sensible-editor {x}", {"{x}": '+call writefile([], "MARK") | qa!'},
                            argv=words("sensible-editor {x}"), needs=("sensible-editor", "vim"),
                            env={"EDITOR": "vim", "VISUAL": "vim"}),
    "emacs": Demo("emacs --batch --eval {x}", {"{x}": '(shell-command "touch MARK")'},
                  argv=words("emacs --batch --eval {x}")),
    **{name: Demo(f"{name} -f /dev/null {{x}}", {"{x}": "--eval=$(shell touch MARK)"},
                  argv=words(f"{name} -f /dev/null {{x}}"))
       for name in ("make", "gmake")},
    # --- names: variable names, options, arithmetic (bash evaluates a[$(…)]) ------------
    "let": Demo("let {x}", SUBSCRIPT),
    "declare": Demo("declare {x}", {"{x}": "a[$(touch MARK)]=1"}),
    "typeset": Demo("typeset {x}", {"{x}": "a[$(touch MARK)]=1"}),
    "local": Demo("f() { local {x}; }; f", {"{x}": "a[$(touch MARK)]=1"}),
    "export": Demo("export {x}; set -x; :", PS4),
    "readonly": Demo("readonly {x}; set -x; :", PS4),
    "unset": Demo("a=(1 2); unset {x}", SUBSCRIPT),
    "read": Demo("echo 1 | read {x}", SUBSCRIPT),
    "readarray": Demo("echo a | readarray -t -c 1 -C {x} lines", {"{x}": "touch MARK; :"}),
    "mapfile": Demo("echo a | mapfile -t -c 1 -C {x} lines", {"{x}": "touch MARK; :"}),
    "getopts": Demo("getopts a: opt -a {x}; echo $((OPTARG))", SUBSCRIPT),
    "wait": Demo("sleep 0 & wait -n -p {x}", SUBSCRIPT),
    # -k makes `PS4=…` below an assignment, and set -x expands PS4.
    "set": Demo("set {x}; : PS4={y}; set -x; :", {"{x}": "-k", "{y}": "$(touch MARK)"}),
    "shopt": Demo("shopt -o -s {x}; : PS4={y}; set -x; :",
                  {"{x}": "keyword", "{y}": "$(touch MARK)"}),
    "hash": Demo("hash -p {x} date; date {y}", {"{x}": _TOUCH_PATH, "{y}": "MARK"}),
    "select": Demo("select n in {x}; do echo $((n)); break; done < one.txt", SUBSCRIPT,
                   files={"one.txt": "1\n"}),
    "ulimit": Demo("ulimit -n {x}", SUBSCRIPT),
    "caller": Demo("f() { caller {x}; }; f", SUBSCRIPT),
    "shift": Demo("set -- a b; shift {x}", SUBSCRIPT),
    "return": Demo("f() { return {x}; }; f", SUBSCRIPT),
    "exit": Demo("exit {x}", SUBSCRIPT),
    "break": Demo("for i in 1; do break {x}; done", SUBSCRIPT),
    "continue": Demo("for i in 1; do continue {x}; done", SUBSCRIPT),
    # --- program: they run the program named in their arguments --------------------------
    "command": Demo("command {x} {y}", PROG),
    "builtin": Demo("builtin {x} {y}", {"{x}": "eval", "{y}": "touch MARK"}),
    "exec": Demo("exec {x} {y}", PROG),
    "time": Demo("time {x} {y}", PROG),
    "coproc": Demo("coproc {x} {y}\nwait", PROG),
    "env": prog("env"),
    "nice": prog("nice"),
    "nohup": prog("nohup"),
    "setsid": prog("setsid", "setsid -w {x} {y}"),
    "stdbuf": prog("stdbuf", "stdbuf -oL {x} {y}"),
    "xargs": Demo("xargs {x} {y} < /dev/null", PROG, argv=words("xargs {x} {y}")),
    "sudo": prog("sudo"),
    "doas": prog("doas"),
    "ionice": prog("ionice", "ionice -c 3 {x} {y}"),
    "unbuffer": prog("unbuffer"),
    "busybox": prog("busybox"),
    "strace": prog("strace", "strace -o /dev/null {x} {y}"),
    "ltrace": prog("ltrace", "ltrace -o /dev/null {x} {y}"),
    "setpriv": prog("setpriv"),
    "unshare": prog("unshare"),
    "nsenter": prog("nsenter", "nsenter -t 1 -m {x} {y}"),
    "systemd-run": prog("systemd-run", "systemd-run --user --wait {x} {y}"),
    "firejail": prog("firejail"),
    "valgrind": prog("valgrind", "valgrind -q {x} {y}"),
    "catchsegv": prog("catchsegv"),
    "fakeroot": prog("fakeroot"),
    "proot": prog("proot"),
    "torsocks": prog("torsocks"),
    "proxychains": prog("proxychains"),
    "proxychains4": prog("proxychains4"),
    "caffeinate": prog("caffeinate"),
    "chpst": prog("chpst"),
    "softlimit": prog("softlimit", "softlimit -m 100000000 {x} {y}"),
    "envdir": prog("envdir", "envdir envd {x} {y}", files={"envd/LANG": "C\n"}),
    "setuidgid": prog("setuidgid", "setuidgid root {x} {y}"),
    "s6-setuidgid": prog("s6-setuidgid", "s6-setuidgid root {x} {y}"),
    "prlimit": prog("prlimit"),
    "pkexec": prog("pkexec"),
    "uvx": Demo("uvx {x}", {"{x}": "evil-tool"}, argv=("uvx", "{x}")),
    # npm's --call runs a shell command: no package, no network.
    "npx": Demo("npx -y {x}", {"{x}": "--call=touch MARK"}, argv=("npx", "-y", "{x}"),
                needs=("npx", "node")),
    "bunx": Demo("bunx {x}", {"{x}": "evil-package"}, argv=("bunx", "{x}")),
    "pnpx": Demo("pnpx {x}", {"{x}": "evil-package"}, argv=("pnpx", "{x}")),
    "entr": Demo("ls notes.txt | entr -n -z {x} {y}", PROG, argv=words("entr -n -z {x} {y}"),
                 files={"notes.txt": "notes\n"}),
    "rlwrap": prog("rlwrap"),
    **{name: prog(name) for name in ("x86_64", "i386", "i686", "ssh-agent", "runcon",
                                     "pg_virtualenv", "chronic")},
    "dbus-run-session": prog("dbus-run-session", "dbus-run-session -- {x} {y}"),
    "gpg-agent": prog("gpg-agent", "gpg-agent --daemon {x} {y}"),
    "daemonize": Demo("daemonize {x} {y}", {"{x}": _TOUCH_PATH, "{y}": "MARK"},
                      argv=words("daemonize {x} {y}")),
    # The debugger runs the script the value names.
    **{name: Demo(f"{name} -c continue {{x}}", {"{x}": "job.py"},
                  argv=words(f"{name} -c continue {{x}}"),
                  files={"job.py": 'open("MARK", "w").close()\n'})
       for name in ("pdb", "pdb3")},
    # --- program, after one fixed word ---------------------------------------------------
    "timeout": prog("timeout", "timeout 5 {x} {y}"),
    "chroot": prog("chroot", "chroot / {x} {y}"),
    "setarch": prog("setarch", "setarch linux64 {x} {y}"),
    "taskset": prog("taskset", "taskset ffffffff {x} {y}"),
    "chrt": prog("chrt", "chrt -o 0 {x} {y}"),
    "linux32": prog("linux32"),
    "linux64": prog("linux64"),
    # --- subcommand: nothing after the subcommand that runs a program ---------------------
    "uv": Demo("uv run {x} {y}", PROG, argv=words("uv run {x} {y}"), env={"UV_OFFLINE": "1"}),
    "pipx": Demo("pipx run {x} {y}", PROG, argv=words("pipx run {x} {y}")),
    "poetry": Demo("poetry run {x} {y}", PROG, argv=words("poetry run {x} {y}")),
    "pipenv": Demo("pipenv run {x} {y}", PROG, argv=words("pipenv run {x} {y}")),
    "pdm": Demo("pdm run {x} {y}", PROG, argv=words("pdm run {x} {y}")),
    "hatch": Demo("hatch run {x} {y}", PROG, argv=words("hatch run {x} {y}")),
    "rye": Demo("rye run {x} {y}", PROG, argv=words("rye run {x} {y}")),
    "conda": Demo("conda run -n base {x} {y}", PROG, argv=words("conda run -n base {x} {y}")),
    "mamba": Demo("mamba run -n base {x} {y}", PROG, argv=words("mamba run -n base {x} {y}")),
    "micromamba": Demo("micromamba run -n base {x} {y}", PROG,
                       argv=words("micromamba run -n base {x} {y}")),
    # pip builds the package the value names: its build backend is code.
    **{name: Demo(f"{name} install {{x}}", {"{x}": "./evilpkg"},
                  argv=words(f"{name} install {{x}}"),
                  env={"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
                  files={"evilpkg/pyproject.toml": '[build-system]\nrequires = []\n'
                                                   'build-backend = "backend"\n'
                                                   'backend-path = ["."]\n',
                         "evilpkg/backend.py": 'open("MARK", "w").close()\n'
                                               'raise SystemExit("not building")\n'},
                  timeout=60)
       for name in ("pip", "pip3")},
    "npm": Demo("npm exec -c {x}", TOUCH, argv=words("npm exec -c {x}"), needs=("npm", "node")),
    "pnpm": Demo("pnpm exec {x} {y}", PROG, argv=words("pnpm exec {x} {y}")),
    "yarn": Demo("yarn exec {x} {y}", PROG, argv=words("yarn exec {x} {y}")),
    "bun": Demo("bun exec {x}", TOUCH, argv=words("bun exec {x}")),
    **{name: Demo(f"{name} run --rm alpine {{x}} {{y}}", PROG,
                  argv=words(f"{name} run --rm alpine {{x}} {{y}}"))
       for name in ("docker", "podman", "nerdctl")},
    "kubectl": Demo("kubectl exec deploy/web -- {x} {y}", PROG,
                    argv=words("kubectl exec deploy/web -- {x} {y}")),
    # --- shells: the script after -c is code ---------------------------------------------
    **{name: Demo(f"{name} -c {{x}}", TOUCH, argv=(name, "-c", "{x}")) for name in _SHELL_NAMES},
    # --- interpreters: the program text is code ------------------------------------------
    "sed": Demo("echo a | sed {x}", {"{x}": "1e touch MARK"}, argv=("sed", "{x}", "notes.txt"),
                files={"notes.txt": "notes\n"}),
    **{name: Demo(f"{name} {{x}} < /dev/null", {"{x}": 'BEGIN { system("touch MARK") }'},
                  argv=(name, "{x}"))
       for name in ("awk", "gawk", "mawk", "nawk")},
    "perl": Demo("perl -e {x}", {"{x}": 'system("touch MARK")'}, argv=words("perl -e {x}")),
    "ruby": Demo("ruby -e {x}", {"{x}": 'system("touch MARK")'}, argv=words("ruby -e {x}")),
    **{name: Demo(f"{name} -e {{x}}", {"{x}": 'require("fs").writeFileSync("MARK", "")'},
                  argv=(name, "-e", "{x}"))
       for name in ("node", "nodejs")},
    # How deno is really told to run code: `deno eval CODE`.
    "deno": Demo("deno eval {x}", {"{x}": 'Deno.writeTextFileSync("MARK", "")'},
                 argv=words("deno eval {x}")),
    "php": Demo("php -r {x}", {"{x}": 'touch("MARK");'}, argv=words("php -r {x}")),
    **{name: Demo(f"{name} -e {{x}}", {"{x}": 'os.execute("touch MARK")'},
                  argv=(name, "-e", "{x}"))
       for name in ("lua", "luajit")},
    **{name: Demo(f"{name} -c {{x}}", {"{x}": 'open("MARK", "w")'}, argv=(name, "-c", "{x}"))
       for name in ("python", "python3")},
    "Rscript": Demo("Rscript -e {x}", {"{x}": 'file.create("MARK")'},
                    argv=words("Rscript -e {x}")),
    # --- options that run a program: a value must not become one -------------------------
    "git": Demo("git ls-remote {x} .", {"{x}": "--upload-pack=touch MARK;"},
                argv=words("git ls-remote {x} .")),
    "tar": Demo("tar -cf /dev/null {x} --checkpoint=1 notes.txt",
                {"{x}": "--checkpoint-action=exec=touch MARK"},
                argv=words("tar -cf /dev/null {x} --checkpoint=1 notes.txt"),
                files={"notes.txt": "notes\n"}),
    "rsync": Demo("rsync {x} notes.txt backup:/srv/", {"{x}": '--rsh=sh -c "touch MARK"'},
                  argv=words("rsync {x} notes.txt backup:/srv/"), files={"notes.txt": "notes\n"}),
    **{name: Demo(f"{name} -F /dev/null -o BatchMode=yes {{x}} {target}",
                  {"{x}": "-oProxyCommand=touch MARK"},
                  argv=words(f"{name} -F /dev/null -o BatchMode=yes {{x}} {target}"),
                  files={"notes.txt": "notes\n"})
       for name, target in (("scp", "notes.txt backup:/srv/"), ("sftp", "backup"))},
    # Spilling to temporary files, sort runs the compressor the value names.
    "sort": Demo("seq 30000 | sort -S 16K -T . {x} > /dev/null",
                 {"{x}": "--compress-program=./squeeze.sh"}, needs=("sort", "seq"),
                 files={"squeeze.sh": "#!/bin/sh\ntouch MARK\nexec cat\n"}),
    "zip": Demo("zip -q -T {x} out.zip notes.txt", {"{x}": "--unzip-command=touch MARK #"},
                argv=words("zip -q -T {x} out.zip notes.txt"), files={"notes.txt": "notes\n"}),
    "split": Demo("echo hi | split -l 1 {x}", {"{x}": "--filter=touch MARK"},
                  needs=("split",)),
    "sdiff": Demo("echo hi > a; sdiff {x} a a", {"{x}": "--diff-program=./d.sh"},
                  files={"d.sh": "#!/bin/sh\ntouch MARK\n"}),
    "diff3": Demo("echo hi > a; diff3 {x} a a a", {"{x}": "--diff-program=./d.sh"},
                  files={"d.sh": "#!/bin/sh\ntouch MARK\n"}),
    **{name: Demo(f"{name} --pre {{x}} hi notes.txt", {"{x}": "./pre.sh"},
                  files={"pre.sh": "#!/bin/sh\ntouch MARK\ncat \"$1\"\n",
                         "notes.txt": "hi\n"}) for name in ("rg",)},
    **{name: Demo(f"{name} -x {{x}} . notes", {"{x}": "./x.sh"},
                  files={"x.sh": "#!/bin/sh\ntouch MARK\n", "notes": "n\n"})
       for name in ("fd", "fdfind")},
    "hg": Demo("hg --config {x} version", {"{x}": "hooks.pre-version=touch MARK"}),
    "dc": Demo("dc -e {x}", {"{x}": "!touch MARK"}, argv=words("dc -e {x}")),
    "m4": Demo("echo x | m4 -D {x}", {"{x}": "x=esyscmd(touch MARK)"}),
    "julia": Demo("julia -e {x}", {"{x}": 'touch("MARK")'}, argv=words("julia -e {x}")),
    # --- added after the argv attack: Lisps, Raku, a debugger, shells, build tools --------
    "guile": Demo("guile -c {x}", {"{x}": '(system "touch MARK")'}, argv=words("guile -c {x}")),
    "racket": Demo("racket -e {x}", {"{x}": '(system "touch MARK")'},
                   argv=words("racket -e {x}")),
    **{name: Demo(f"{name} -e {{x}}", {"{x}": 'shell "touch MARK"'},
                  argv=words(f"{name} -e {{x}}")) for name in ("raku", "rakudo", "perl6")},
    "lldb": Demo("lldb -b -o {x}", {"{x}": "platform shell touch MARK"},
                 argv=words("lldb -b -o {x}")),
    **{name: Demo(f"{name} -c {{x}}", TOUCH, argv=words(f"{name} -c {{x}}"))
       for name in ("nu", "xonsh", "elvish")},
    "dotnet": Demo("dotnet fsi {x}", {"{x}": "job.fsx"}, argv=words("dotnet fsi {x}"),
                   files={"job.fsx": 'System.IO.File.WriteAllText("MARK", "")\n'}),
    "cmake": Demo("cmake -E env {x} {y}", PROG, argv=words("cmake -E env {x} {y}")),
    "ctest": Demo("ctest -S {x}", {"{x}": "job.cmake"}, argv=words("ctest -S {x}"),
                  files={"job.cmake": "file(TOUCH MARK)\n"}),
    "wget": Demo("wget -q -O /dev/null --user=u -e {x} http://127.0.0.1:9/",
                 {"{x}": "use_askpass=./ask.sh"},
                 argv=words("wget -q -O /dev/null --user=u -e {x} http://127.0.0.1:9/"),
                 files={"ask.sh": "#!/bin/sh\ntouch MARK\necho pw\n"}),
    "toybox": prog("toybox"),
    "R": Demo("R -q -e {x}", {"{x}": 'file.create("MARK")'}, argv=words("R -q -e {x}")),
    **{name: Demo(f"{name} -c {{x}}", {"{x}": "open('MARK', 'w')"},
                  argv=words(f"{name} -c {{x}}")) for name in ("ipython", "ipython3")},
    **{name: Demo(f"echo {{x}} | {name}", {"{x}": "open('MARK', 'w')"})
       for name in ("bpython", "ptpython")},
    "go": Demo("go run {x}", {"{x}": "./main.go"},
               files={"main.go": 'package main\nimport "os"\nfunc main() { os.Create("MARK") }\n'}),
    "cargo": Demo("cargo run --manifest-path {x}", {"{x}": "./evil/Cargo.toml"},
                  argv=words("cargo run --manifest-path {x}")),
    # --- added with the wider table (issue 30): remote shells and inner shells ------------
    **{name: Demo(f"{name} backup.example.com {{x}}", TOUCH,
                  argv=(name, "backup.example.com", "{x}"))
       for name in ("mosh", "autossh", "dbclient", "rsh", "rlogin", "pssh", "parallel-ssh",
                    "pdsh", "clush", "dsh", "mussh", "knife", "fab")},
    **{name: Demo(f"{name} '*' cmd.run {{x}}", TOUCH, argv=(name, "*", "cmd.run", "{x}"))
       for name in ("salt", "salt-ssh")},
    "salt-call": Demo("salt-call --local cmd.run {x}", TOUCH,
                      argv=words("salt-call --local cmd.run {x}")),
    "pyinfra": Demo("pyinfra @local exec -- {x}", TOUCH, argv=words("pyinfra @local exec -- {x}")),
    "zellij": prog("zellij", "zellij run -- {x} {y}"),
    "byobu": prog("byobu", "byobu new-session -d {x} {y}"),
    "hyperfine": Demo("hyperfine --runs 1 {x}", TOUCH, argv=words("hyperfine --runs 1 {x}")),
    "watchexec": Demo("watchexec -- {x}", TOUCH, argv=words("watchexec -- {x}")),
    "nodemon": Demo("nodemon --exec {x}", TOUCH, argv=words("nodemon --exec {x}")),
    "reflex": Demo("reflex -- sh -c {x}", TOUCH),
    "sem": Demo("sem --fg {x}", TOUCH, argv=words("sem --fg {x}")),
    "pueue": Demo("pueue add -- {x}", TOUCH, argv=words("pueue add -- {x}")),
    "crontab": Demo("crontab {x}", {"{x}": "./jobs.cron"}, argv=("crontab", "{x}"),
                    files={"jobs.cron": "* * * * * touch MARK\n"}),
    **{name: Demo(f"{name} {{x}}", {"{x}": "./job.sh"}, argv=(name, "{x}"), files=JOB)
       for name in ("sbatch", "bsub", "qsub")},
    **{name: Demo(f"{name} -e {{x}} {{y}}", PROG, argv=words(f"{name} -e {{x}} {{y}}"))
       for name in ("xterm", "uxterm", "konsole", "urxvt", "rxvt", "alacritty", "tilix",
                    "lxterminal", "mate-terminal", "xfce4-terminal", "terminator")},
    **{name: prog(name, f"{name} -- {{x}} {{y}}") for name in ("gnome-terminal",)},
    **{name: prog(name) for name in ("kitty", "foot")},
    "wezterm": prog("wezterm", "wezterm start -- {x} {y}"),
    "osascript": Demo("osascript -e {x}", {"{x}": 'do shell script "touch MARK"'},
                      argv=words("osascript -e {x}")),
    "puppet": Demo("puppet apply -e {x}", {"{x}": "exec { 'm': command => '/usr/bin/touch MARK' }"},
                   argv=words("puppet apply -e {x}")),
    "chef-apply": Demo("chef-apply -e {x}", {"{x}": "execute 'touch MARK'"},
                       argv=words("chef-apply -e {x}")),
    "bwrap": prog("bwrap", "bwrap --bind / / {x} {y}"),
    **{name: Demo(f"{name} --nodb --quiet --eval {{x}}",
                  {"{x}": 'require("fs").writeFileSync("MARK", "")'},
                  argv=words(f"{name} --nodb --quiet --eval {{x}}"))
       for name in ("mongosh", "mongo")},
    "duckdb": Demo("duckdb -c {x}", {"{x}": ".shell touch MARK"}, argv=words("duckdb -c {x}")),
    "litecli": Demo("litecli cache.db -e {x}", {"{x}": "system touch MARK"},
                    argv=words("litecli cache.db -e {x}")),
    "usql": Demo("usql sqlite:cache.db -c {x}", {"{x}": "\\! touch MARK"},
                 argv=words("usql sqlite:cache.db -c {x}")),
    **{name: Demo(f"{name} -e {{x}}", {"{x}": "\\! touch MARK"}, argv=words(f"{name} -e {{x}}"))
       for name in ("sqlcmd", "pgcli", "mycli", "sqlplus", "beeline", "hive", "impala-shell")},
    **{name: Demo(f"echo {{x}} | {name}", {"{x}": 'system("touch MARK")'})
       for name in ("irb", "pry")},
    "psysh": Demo("echo {x} | psysh", {"{x}": 'touch("MARK")'}),
    "jshell": Demo("jshell -q {x}", {"{x}": "job.jsh"}, argv=("jshell", "-q", "{x}"),
                   files={"job.jsh": 'new java.io.File("MARK").createNewFile()\n/exit\n'}),
    "iex": Demo("iex -e {x}", {"{x}": 'File.touch!("MARK"); System.halt()'},
                argv=words("iex -e {x}")),
    "erl": Demo("erl -noshell -eval {x}", {"{x}": 'os:cmd("touch MARK"), halt().'},
                argv=words("erl -noshell -eval {x}")),
    **{name: Demo(f"echo {{x}} | {name}", {"{x}": 'open("MARK", "w").close()'})
       for name in ("spark-shell", "pyspark")},
    **{name: Demo(f"{name} -M -e {{x}}", {"{x}": '(spit "MARK" "")'},
                  argv=words(f"{name} -M -e {{x}}")) for name in ("clojure", "clj")},
    "gnuplot": Demo("gnuplot -e {x}", {"{x}": 'system("touch MARK")'},
                    argv=words("gnuplot -e {x}")),
    "octave": Demo("octave --no-gui --eval {x}", {"{x}": 'system("touch MARK")'},
                   argv=words("octave --no-gui --eval {x}")),
    "matlab": Demo("matlab -batch {x}", {"{x}": "system('touch MARK')"},
                   argv=words("matlab -batch {x}")),
    "mlr": Demo("mlr -n put {x}", {"{x}": 'end { system("touch MARK") }'},
                argv=words("mlr -n put {x}")),
    "rake": Demo("rake -e {x}", {"{x}": 'system("touch MARK")'}, argv=words("rake -e {x}")),
    # The value names the module, test file, application or task they import and run.
    "pydoc": Demo("pydoc {x}", {"{x}": "pwnmod"}, argv=words("pydoc {x}"), files=PWNMOD),
    **{name: Demo(f"{name} -q -p no:cacheprovider {{x}}", {"{x}": "test_pwn.py"},
                  argv=words(f"{name} -q -p no:cacheprovider {{x}}"),
                  files={"test_pwn.py": PWNMOD["pwnmod.py"] + "def test_x():\n    pass\n"})
       for name in ("pytest", "py.test")},
    "prove": Demo("prove {x} a.t", {"{x}": "--exec=./job.sh"}, argv=words("prove {x} a.t"),
                  files={**JOB, "a.t": 'print "ok 1\\n1..1\\n";\n'}),
    **{name: Demo(f"{name} {{x}}", {"{x}": "pwnmod:app"}, argv=words(f"{name} {{x}}"),
                  files=PWNMOD) for name in ("uvicorn", "gunicorn")},
    "coverage": Demo("coverage run {x}", {"{x}": "pwnmod.py"}, argv=words("coverage run {x}"),
                     files=PWNMOD),
    "flask": Demo("flask --app {x} routes", {"{x}": "pwnmod"},
                  argv=words("flask --app {x} routes"), files=PWNMOD),
    "celery": Demo("celery -A {x} report", {"{x}": "pwnmod"},
                   argv=words("celery -A {x} report"), files=PWNMOD),
    "tox": Demo("tox -c {x} -e pwn", {"{x}": "evil.ini"}, argv=words("tox -c {x} -e pwn"),
                files={"evil.ini": "[testenv:pwn]\nskip_install = true\n"
                                   "allowlist_externals = touch\ncommands = touch MARK\n"}),
    "nox": Demo("nox -f {x}", {"{x}": "pwnmod.py"}, argv=words("nox -f {x}"), files=PWNMOD),
    **{name: Demo(f"{name} {{x}} notes.txt", {"{x}": 'system("touch MARK")'},
                  argv=words(f"{name} {{x}} notes.txt"), files={"notes.txt": "notes\n"})
       for name in ("rename", "prename", "file-rename")},
    "nix-shell": Demo("nix-shell -p hello --run {x}", TOUCH,
                      argv=words("nix-shell -p hello --run {x}")),
    "hwloc-bind": prog("hwloc-bind", "hwloc-bind all {x} {y}"),
    "uftrace": prog("uftrace", "uftrace record {x} {y}"),
    # --- added: wrappers that run the program named in their arguments ---------------------
    "tini": prog("tini", "tini -s -- {x} {y}"),
    **{name: prog(name) for name in (
        "dumb-init", "fakechroot", "wine", "wine64", "box64", "box86", "run0", "pfexec",
        "xvfb-run", "dbus-launch", "nocache", "tsocks", "torify", "graftcp", "optirun",
        "primusrun", "prime-run", "gamemoderun", "mangohud", "steam-run", "eatmydata",
        "systemd-cat", "systemd-inhibit", "run-one", "run-this-one", "keep-one-running", "nq",
        "tsp", "heaptrack", "pgrphack", "lima", "flatpak-spawn", "summon", "srun")},
    "catatonit": prog("catatonit", "catatonit -- {x} {y}"),
    "corepack": Demo("corepack {x} {y}", {"{x}": "pnpm@8.15.0", "{y}": "--version"},
                     argv=("corepack", "{x}", "{y}")),
    "schroot": prog("schroot", "schroot -c default -- {x} {y}"),
    "systemd-nspawn": prog("systemd-nspawn", "systemd-nspawn -D / -q {x} {y}"),
    "nsjail": prog("nsjail", "nsjail -Mo --chroot / -q -- {x} {y}"),
    "minijail0": prog("minijail0", "minijail0 -- {x} {y}"),
    "sandbox-exec": prog("sandbox-exec", "sandbox-exec -n no-network {x} {y}"),
    "aa-exec": prog("aa-exec", "aa-exec -- {x} {y}"),
    **{name: prog(name, f"{name} -n c1 -- {{x}} {{y}}") for name in ("lxc-attach", "lxc-execute")},
    "sshpass": prog("sshpass", "sshpass -p secret {x} {y}"),
    "cgexec": prog("cgexec", "cgexec -g cpu:/ {x} {y}"),
    "numactl": prog("numactl", "numactl --localalloc {x} {y}"),
    "cpulimit": prog("cpulimit", "cpulimit -l 50 -- {x} {y}"),
    "trickle": prog("trickle", "trickle -s -d 100 {x} {y}"),
    "pasuspender": prog("pasuspender", "pasuspender -- {x} {y}"),
    "lockrun": prog("lockrun", "lockrun --lockfile=job.lock -- {x} {y}"),
    "retry": prog("retry", "retry -t 1 -- {x} {y}"),
    **{name: prog(name, f"{name} -np 1 {{x}} {{y}}") for name in ("mpirun", "mpiexec")},
    "dtach": prog("dtach", "dtach -n job.sock {x} {y}"),
    "abduco": prog("abduco", "abduco -n job {x} {y}"),
    "multitime": prog("multitime", "multitime -n 1 {x} {y}"),
    "gosu": prog("gosu", "gosu root {x} {y}"),
    "su-exec": prog("su-exec", "su-exec root {x} {y}"),
    "envchain": prog("envchain", "envchain deploy {x} {y}"),
    "faketime": prog("faketime", "faketime 2020-01-01 {x} {y}"),
    "arch-chroot": prog("arch-chroot", "arch-chroot / {x} {y}"),
    "gdbserver": prog("gdbserver", "gdbserver :0 {x} {y}"),
    "setlock": prog("setlock", "setlock job.lock {x} {y}"),
    "envuidgid": prog("envuidgid", "envuidgid root {x} {y}"),
    "s6-envdir": prog("s6-envdir", "s6-envdir envd {x} {y}", files={"envd/LANG": "C\n"}),
    "distrobox-enter": prog("distrobox-enter", "distrobox-enter box -- {x} {y}"),
    # --- added: secret injectors, version managers, machines --------------------------------
    **{name: prog(name, f"{name} run -- {{x}} {{y}}")
       for name in ("op", "dotenvx", "teller", "doppler", "infisical", "volta")},
    "dotenv": prog("dotenv", "dotenv run -- {x} {y}", files={".env": "A=1\n"}),
    **{name: prog(name, f"{name} exec {{x}} {{y}}")
       for name in ("pyenv", "rbenv", "nodenv", "goenv", "jenv", "plenv", "phpenv", "asdf",
                    "bundle", "bundler", "saml2aws")},
    "fnm": prog("fnm", "fnm exec -- {x} {y}"),
    **{name: prog(name, f"{name} exec prod -- {{x}} {{y}}") for name in ("aws-vault", "aws-okta")},
    "berglas": prog("berglas", "berglas exec -- {x} {y}"),
    "direnv": prog("direnv", "direnv exec . {x} {y}"),
    **{name: prog(name, f"{name} exec -- {{x}} {{y}}") for name in ("mise", "rtx")},
    "nvm": prog("nvm", "nvm exec 20 {x} {y}"),
    "sops": Demo("sops exec-env secrets.json {x}", TOUCH),
    "chamber": prog("chamber", "chamber exec app -- {x} {y}"),
    "pixi": prog("pixi", "pixi run {x} {y}"),
    **{name: Demo(f"{name} ssh -c {{x}}", TOUCH, argv=words(f"{name} ssh -c {{x}}"))
       for name in ("vagrant",)},
    **{name: prog(name, f"{name} exec c1 -- {{x}} {{y}}") for name in ("lxc", "incus", "multipass")},
    **{name: prog(name, f"{name} shell default {{x}} {{y}}") for name in ("limactl", "machinectl")},
    **{name: Demo(f"{name} ssh -- {{x}}", TOUCH) for name in ("colima", "minikube")},
    **{name: prog(name, f"{name} run {{x}} {{y}}") for name in ("toolbox", "heroku", "railway")},
    "distrobox": prog("distrobox", "distrobox enter box -- {x} {y}"),
    **{name: prog(name, f"{name} exec docker://alpine {{x}} {{y}}")
       for name in ("singularity", "apptainer")},
    "gcloud": Demo("gcloud compute ssh vm --command {x}", TOUCH),
    "az": Demo("az vm run-command invoke -g rg -n vm --command-id RunShellScript --scripts {x}",
               TOUCH),
    **{name: Demo(f"{name} ssh console -C {{x}}", TOUCH) for name in ("fly", "flyctl")},
    "aws": Demo("aws ssm send-command --document-name AWS-RunShellScript --parameters {x}",
                {"{x}": "commands=touch MARK"}),
    **{name: Demo(f"{name} install -y {{x}}", {"{x}": "./evil.deb"})
       for name in ("apt", "apt-get", "aptitude")},
    **{name: Demo(f"{name} install -y {{x}}", {"{x}": "./evil.rpm"}) for name in ("dnf", "yum",
                                                                                 "zypper")},
    "apk": Demo("apk add --allow-untrusted {x}", {"{x}": "./evil.apk"}),
    "brew": Demo("brew install {x}", {"{x}": "./evil.rb"}),
    "gem": Demo("gem install {x}", {"{x}": "./evil.gem"}),
    "snap": Demo("snap install --dangerous {x}", {"{x}": "./evil.snap"}),
    "flatpak": prog("flatpak", "flatpak run --command={x} org.example.App {y}"),
    "dpkg": Demo("dpkg -i {x}", {"{x}": "./evil.deb"}),
    **{name: prog(name, f"{name} run -- {{x}} {{y}}") for name in ("nix", "guix")},
    "rails": Demo("rails runner {x}", {"{x}": 'File.write("MARK", "")'}),
    "manage.py": Demo("./manage.py shell -c {x}", {"{x}": 'open("MARK", "w")'}),
    "artisan": Demo("php artisan tinker --execute={x}", {"{x}": 'touch("MARK");'}),
    **{name: prog(name, f"{name} run --rm web {{x}} {{y}}") for name in ("docker-compose",)},
    **{name: prog(name, f"{name} exec c1 {{x}} {{y}}") for name in ("crictl",)},
    "ctr": prog("ctr", "ctr run docker.io/library/alpine:latest c1 {x} {y}"),
    **{name: prog(name, f"{name} exec deploy/web -- {{x}} {{y}}") for name in ("oc", "k3s",
                                                                              "microk8s")},
    # java runs a single source file it is named (the class is code).
    "java": Demo("java {x}", {"{x}": "Job.java"}, argv=("java", "{x}"),
                 files={"Job.java": 'public class Job { public static void main(String[] a) '
                                    'throws Exception { new java.io.File("MARK")'
                                    '.createNewFile(); } }\n'}),
    **{name: Demo(f"{name} -e {{x}}", {"{x}": 'require("fs").writeFileSync("MARK", "")'},
                  argv=(name, "-e", "{x}")) for name in ("ts-node", "tsx")},
    "groovy": Demo("groovy -e {x}", {"{x}": 'new File("MARK").createNewFile()'},
                   argv=words("groovy -e {x}")),
    "elixir": Demo("elixir -e {x}", {"{x}": 'File.touch!("MARK")'}, argv=words("elixir -e {x}")),
    # A helper the browser starts for each renderer: a value becoming that option runs it.
    **{name: Demo(f"{name} --headless --no-sandbox --disable-gpu {{x}} --dump-dom about:blank",
                  {"{x}": "--renderer-cmd-prefix=MARK-pre.sh"},  # an absolute path
                  argv=words(f"{name} --headless --no-sandbox --disable-gpu {{x}} "
                             f"--dump-dom about:blank"),
                  files={"MARK-pre.sh": '#!/bin/sh\ntouch MARK\nexec "$@"\n'},
                  # Its socket goes in TMPDIR: a deep test folder passes the 108-byte limit.
                  env={"TMPDIR": "/tmp"})
       for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable",
                    "chrome", "microsoft-edge", "brave-browser")},
}

#: Rows whose "really runs" half is not run here, and why. Their refusal is still checked.
SKIP_RUNS: dict[str, str] = {
    # Privileges, another user or host, a daemon.
    "su": "runs the value as another user: needs privileges (PAM)",
    "runuser": "runs the program as another user: needs root",
    "sudo": "needs sudo rights",
    "doas": "needs doas rights",
    "pkexec": "needs polkit and an authentication agent",
    "ssh": "runs the value on a remote host: needs a reachable host",
    "sg": "runs the value in another group: needs group membership or a password",
    "newgrp": "starts a new login shell in another group (reads a terminal, needs membership)",
    "at": "hands the job to the atd daemon",
    "batch": "hands the job to the atd daemon",
    "screen": "starts a detached terminal session (a terminal multiplexer server)",
    "chroot": "needs root (CAP_SYS_CHROOT)",
    "unshare": "creates namespaces: needs privileges",
    "nsenter": "enters another process's namespaces: needs privileges",
    "firejail": "sets up a sandbox: needs setuid privileges",
    "systemd-run": "needs a running systemd (user) manager",
    "setuidgid": "changes user: needs root",
    "s6-setuidgid": "changes user: needs root",
    "wish": "needs an X display",
    "evim": "a GUI editor: needs an X display",
    "gdbtui": "the TUI needs a terminal ('Cannot enable the TUI when output is not a terminal')",
    "runcon": "needs an SELinux kernel",
    "pg_virtualenv": "creates a PostgreSQL cluster in the system's directories (and refuses when "
                     "one exists): changes the machine",
    "rlwrap": "needs a terminal",
    "caffeinate": "macOS only",
    "docker": "needs a container daemon and an image",
    "podman": "needs a container image (pulled over the network)",
    "nerdctl": "needs containerd and an image",
    "kubectl": "needs a Kubernetes cluster",
    # Runners that fetch packages or set up a project environment first.
    "uvx": "fetches the tool from a package index (network)",
    "bunx": "fetches the package from a registry (network)",
    "pnpx": "fetches the package from a registry (network)",
    "pipx": "fetches the package from a package index (network)",
    "poetry": "needs a Poetry project and its virtual environment",
    "pipenv": "creates a virtual environment (network)",
    "pdm": "needs a PDM project",
    "hatch": "creates an environment (network)",
    "rye": "needs a Rye project and toolchain",
    "conda": "needs a conda installation and environment",
    "mamba": "needs a conda installation and environment",
    "micromamba": "needs a micromamba environment",
    # Interactive line editing only.
    "bind": "bind -x runs its command on a key press, only in an interactive shell with a terminal",
    "complete": "complete -C/-F run only on interactive completion (a terminal)",
    "compopt": "changes completion options inside a completion function (interactive only)",
    # Listed conservatively: no value is known to run in bash 5.2 or dash.
    "unalias": "only removes aliases; no value is known to run",
    "man": "man runs its pager (-P) only when writing to a terminal",
    "gpg-agent": "the agent daemon waits for its program's end past any short timeout; the "
                 "demo took 25 s",
    "sensible-editor": "it probes for an editor with a terminal first (4 s); vim's own rows "
                       "show the -c/+cmd value running",
    "cargo": "building a crate needs its toolchain and registry, which a test must not fetch",
    "ipython": "IPython reads its profile from HOME and may want a terminal; shown by the "
               "refusal alone",
    "ipython3": "as ipython",
    **{name: "bash 5.2 and dash read this number strictly ('numeric argument required', "
             "1+1 is refused), so no value is known to run; listed conservatively"
       for name in ("ulimit", "caller", "shift", "return", "exit", "break", "continue")},
}

# Added with the wider table (issue 30).
SKIP_RUNS.update({
    **{name: "runs the value on a remote host: needs a reachable host"
       for name in ("mosh", "autossh", "dbclient", "rsh", "rlogin", "pssh", "parallel-ssh",
                    "pdsh", "clush", "dsh", "mussh", "knife", "fab", "salt", "salt-ssh",
                    "vagrant", "lxc", "incus", "multipass", "limactl", "colima", "minikube",
                    "machinectl", "lima", "gcloud", "az", "fly", "flyctl", "heroku", "railway",
                    "aws", "toolbox", "distrobox", "distrobox-enter", "lxc-attach",
                    "lxc-execute")},
    **{name: "needs a terminal or an X display"
       for name in ("zellij", "byobu", "xterm", "uxterm", "gnome-terminal", "konsole", "urxvt",
                    "rxvt", "kitty", "alacritty", "terminator", "xfce4-terminal", "tilix",
                    "wezterm", "foot", "lxterminal", "mate-terminal", "xvfb-run", "psysh")},
    **{name: "watches files and runs the value on each change: never ends by itself"
       for name in ("watchexec", "nodemon", "reflex")},
    "pueue": "hands the command to the pueued daemon",
    "crontab": "would replace the user's crontab: changes the machine",
    **{name: "needs a batch scheduler" for name in ("sbatch", "bsub", "qsub", "srun")},
    "osascript": "macOS only",
    "sandbox-exec": "macOS only",
    "pfexec": "Solaris and illumos only",
    **{name: "needs a database server or account"
       for name in ("sqlcmd", "pgcli", "mycli", "sqlplus", "beeline", "hive", "impala-shell")},
    "jshell": "a JVM REPL: it starts in about 7 s here, too close to the demo's 10 s bound on "
              "a busy machine (java's row shows a JVM running the value)",
    **{name: "needs Spark and a JVM" for name in ("spark-shell", "pyspark")},
    "matlab": "licensed software",
    "nix-shell": "fetches nixpkgs (network)",
    **{name: "needs a container or VM runtime and an image"
       for name in ("docker-compose", "crictl", "ctr", "oc", "k3s", "microk8s", "singularity",
                    "apptainer", "schroot", "systemd-nspawn", "arch-chroot", "flatpak",
                    "flatpak-spawn")},
    **{name: "needs privileges (another user, a cgroup, a namespace, a profile)"
       for name in ("gosu", "su-exec", "run0", "cgexec", "nsjail", "minijail0", "bwrap",
                    "envuidgid")},
    **{name: "needs an account or credentials of a secrets service"
       for name in ("op", "doppler", "infisical", "teller", "aws-vault", "aws-okta", "berglas",
                    "saml2aws", "chamber", "sops", "envchain", "summon")},
    **{name: "fetches the tool or package the value names (network)"
       for name in ("corepack", "volta", "fnm", "mise", "rtx", "pixi", "gem", "brew", "nix",
                    "guix", "asdf")},
    **{name: "installs a package: needs root and changes the machine"
       for name in ("apt", "apt-get", "aptitude", "dnf", "yum", "zypper", "apk", "snap",
                    "dpkg")},
    **{name: "needs the project around it (a Rails or Django app, a Laravel project)"
       for name in ("rails", "manage.py", "artisan", "bundle", "bundler")},
    "systemd-cat": "needs journald's socket",
    "systemd-inhibit": "needs logind on the system bus",
    "gdbserver": "starts the program stopped until a debugger attaches",
    "box64": "runs x86_64 programs on other architectures",
    "box86": "runs x86 programs on other architectures",
    **{name: "needs a Windows program to name" for name in ("wine", "wine64")},
    **{name: "needs a GPU switching setup or a game runtime"
       for name in ("optirun", "primusrun", "prime-run", "gamemoderun", "mangohud",
                    "steam-run")},
    "nvm": "a shell function, not a program on PATH",
    "mpirun": "needs an MPI runtime", "mpiexec": "needs an MPI runtime",
    "dtach": "detaches the program into the background with a terminal",
    "abduco": "detaches the program into the background with a terminal",
})

#: Rows whose refusal is missing (a known hole in the checker, reported to the lead).
CHECKER_HOLES: dict[str, str] = {}


def _names() -> list[str]:
    return [*PROGRAMS, "python3"]


def _installed(name: str, demo: Demo) -> tuple[str, ...]:
    needs = demo.needs if demo.needs is not None else (() if name in BUILTINS else (name,))
    return tuple(n for n in needs if shutil.which(n) is None)


def _row_params(argv_only: bool = False) -> list[Any]:
    params = []
    for name in _names():
        demo = DEMOS.get(name)
        if argv_only and (demo is None or demo.argv is None):
            continue
        missing = _installed(name, demo) if demo else ()
        marks = [pytest.mark.skipif(bool(missing), reason=f"not installed here: {missing}")]
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def _refusal_params() -> list[Any]:
    params = []
    for name in _names():
        marks = []
        if name in CHECKER_HOLES:
            marks.append(pytest.mark.xfail(strict=True, reason=CHECKER_HOLES[name]))
        params.append(pytest.param(name, marks=marks, id=name))
    return params


# --- running a demo with the check skipped -----------------------------------------------

def _env(where: Path, extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"HOME": str(where), "TMPDIR": str(where), "TERM": "dumb",
                "npm_config_update_notifier": "false", "npm_config_offline": "true",
                "npm_config_cache": str(where / ".npm"), "GIT_CONFIG_NOSYSTEM": "1",
                "PGCONNECT_TIMEOUT": "3"})
    env.update(extra)
    return env


def _workspace(tmp_path: Path, label: str, demo: Demo) -> tuple[Path, Path]:
    """A working directory for one run: the demo's files, and the marker path."""
    where = tmp_path / label
    where.mkdir()
    marker = where / "MARK"
    for rel, text in demo.files.items():
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("MARK", str(marker)))
        path.chmod(0o755)
    if demo.prepare:
        subprocess.run(["sh", "-c", demo.prepare], cwd=where, env=_env(where, demo.env),
                       check=True, timeout=60, capture_output=True)
    return where, marker


def _wait_for(markers: list[Path]) -> set[Path]:
    """The markers that exist, waiting a little for asynchronous launchers."""
    deadline = time.monotonic() + POLL_SECONDS
    while True:
        hit = {m for m in markers if m.exists()}
        if hit or time.monotonic() > deadline:
            return hit
        time.sleep(0.1)


def _run(argv: list[str], where: Path, env: Mapping[str, str], timeout: float) -> None:
    try:
        subprocess.run(argv, cwd=where, env=dict(env), stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pass  # the marker decides


def _cleanup(demo: Demo, where: Path) -> None:
    if demo.cleanup:
        subprocess.run(["sh", "-c", demo.cleanup], cwd=where, env=_env(where, demo.env),
                       capture_output=True, timeout=TIMEOUT)


def _lookup(filled: Mapping[str, str]) -> Callable[[Ref], str]:
    return lambda ref: filled[ref.text]


def fill(values: Mapping[str, str], marker: Path) -> dict[str, str]:
    return {k: v.replace("MARK", str(marker)) for k, v in values.items()}


def command_runs(demo: Demo, tmp_path: Path) -> set[str]:
    """The shells in which the template, rendered with the check skipped, runs the value."""
    runs: dict[str, Path] = {}
    spaces = []
    for shell in SHELLS:
        where, marker = _workspace(tmp_path, shell.replace(" ", ""), demo)
        filled = fill(demo.values, marker)
        command = render(demo.template, _lookup(filled), shell_quote=True)
        _run([*SHELLS[shell], command], where, _env(where, demo.env), demo.timeout)
        runs[shell] = marker
        spaces.append(where)
    hit = _wait_for(list(runs.values()))
    for where in spaces:
        _cleanup(demo, where)
    return {shell for shell, marker in runs.items() if marker in hit}


def argv_runs(demo: Demo, tmp_path: Path) -> bool:
    """Whether the argv, each placeholder replaced by its value (no shell), runs the value."""
    assert demo.argv is not None
    where, marker = _workspace(tmp_path, "argv", demo)
    filled = fill(demo.values, marker)
    argv = list(demo.argv)
    for key, value in filled.items():
        argv = [w.replace(key, value) for w in argv]
    _run(argv, where, _env(where, demo.env), demo.timeout)
    hit = _wait_for([marker])
    _cleanup(demo, where)
    return bool(hit)


def _skip_unless_runnable(name: str, demo: Demo) -> None:
    reason = SKIP_RUNS.get(name) or demo.skip
    if reason:
        pytest.skip(reason)
    if demo.probe is not None:
        try:
            done = subprocess.run(demo.probe, capture_output=True, timeout=TIMEOUT,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"{demo.probe[0]} cannot reach its server: {exc}")
        if done.returncode != 0:
            pytest.skip(f"{demo.probe[0]} cannot reach its server here")


needs_shells = pytest.mark.skipif(not all(shutil.which(s[0]) for s in SHELLS.values()),
                                  reason="needs dash and bash")


# --- the table and its demos -------------------------------------------------------------

def test_every_row_of_the_table_has_a_demo() -> None:
    missing = sorted(set(PROGRAMS) - set(DEMOS))
    assert not missing, f"add a demo to DEMOS for: {missing}"
    assert set(SKIP_RUNS) <= set(DEMOS) and set(CHECKER_HOLES) <= set(DEMOS)
    assert "python3" in DEMOS


def test_the_argv_rows_the_issue_names_have_argv_demos() -> None:
    for name in ("uvx", "npx", "uv", "pkexec", "expect", "gdb", "vim", "pwsh", "env", "sh",
                 "python3"):
        assert DEMOS[name].argv is not None, name


@pytest.mark.parametrize("name", _refusal_params())
def test_the_check_refuses_the_placeholder_where_the_row_says_code(name: str) -> None:
    demo = DEMOS.get(name)
    assert demo is not None, f"no demo for {name}"
    problem = shell_problem(demo.template)
    assert problem is not None, f"{name}: {demo.template!r} is accepted"
    if demo.argv is not None:
        assert argv_problem(list(demo.argv)) is not None, f"{name}: argv {demo.argv} is accepted"


@needs_shells
@pytest.mark.parametrize("name", _row_params())
def test_run_with_the_check_skipped_the_value_really_runs(name: str, tmp_path: Path) -> None:
    demo = DEMOS.get(name)
    assert demo is not None, f"no demo for {name}"
    _skip_unless_runnable(name, demo)
    assert command_runs(demo, tmp_path), f"{name}: {demo.template!r} did not run the value"


@pytest.mark.parametrize("name", _row_params(argv_only=True))
def test_run_as_argv_with_the_check_skipped_the_value_really_runs(name: str,
                                                                   tmp_path: Path) -> None:
    demo = DEMOS[name]
    _skip_unless_runnable(name, demo)
    assert argv_runs(demo, tmp_path), f"{name}: argv {demo.argv} did not run the value"


# --- the reproductions from the issue ----------------------------------------------------

ISSUE_COMMANDS = {
    "sqlite3 cache.db {x}": Demo("sqlite3 cache.db {x}", {"{x}": ".shell touch MARK"},
                                 needs=("sqlite3",)),
    "psql -c {x}": Demo("psql -c {x}", {"{x}": "\\! touch MARK"}, needs=("psql",),
                        env=_PSQL_ENV, probe=_PSQL_PROBE),
    "tmux new-session {x}": Demo("tmux -S tmux.sock new-session -d -s report {x}", TOUCH,
                                 needs=("tmux",), cleanup="tmux -S tmux.sock kill-server"),
    "setarch x86_64 {x}": Demo("setarch x86_64 {x}", {"{x}": "./job.sh"}, files=JOB,
                               needs=("setarch",), skip=None if platform.machine() == "x86_64"
                               else "not an x86_64 machine"),
    "prlimit {x}": Demo("prlimit {x}", {"{x}": "./job.sh"}, files=JOB, needs=("prlimit",)),
}

ISSUE_ARGV = {
    "uvx {x}": Demo("uvx {x}", {"{x}": "evil-tool"}, argv=("uvx", "{x}"), needs=("uvx",),
                    skip=SKIP_RUNS["uvx"]),
    "npx -y {x}": Demo("npx -y {x}", {"{x}": "--call=touch MARK"}, argv=("npx", "-y", "{x}"),
                       needs=("npx", "node")),
    "uv run {x}": Demo("uv run {x}", {"{x}": "./job.sh"}, argv=("uv", "run", "{x}"), files=JOB,
                       needs=("uv",), env={"UV_OFFLINE": "1"}),
    "pkexec {x}": Demo("pkexec {x}", {"{x}": "./job.sh"}, argv=("pkexec", "{x}"), files=JOB,
                       needs=("pkexec",), skip=SKIP_RUNS["pkexec"]),
    "expect -c {x}": Demo("expect -c {x}", {"{x}": "exec touch MARK"},
                          argv=("expect", "-c", "{x}"), needs=("expect",)),
    "gdb -ex {x}": Demo("gdb -ex {x}", {"{x}": "shell touch MARK"}, argv=("gdb", "-ex", "{x}"),
                        needs=("gdb",)),
    "vim -c {x}": Demo("vim -c {x}", {"{x}": "call system('touch MARK') | qa!"},
                       argv=("vim", "-c", "{x}"), needs=("vim",)),
    "pwsh -c {x}": Demo("pwsh -c {x}", {"{x}": "New-Item -ItemType File MARK"},
                        argv=("pwsh", "-c", "{x}"), needs=("pwsh",)),
}


def _issue_params(cases: dict[str, Demo]) -> list[Any]:
    return [pytest.param(key, id=key, marks=[pytest.mark.skipif(
        bool(missing := [n for n in (demo.needs or ()) if shutil.which(n) is None]),
        reason=f"not installed here: {missing}")]) for key, demo in cases.items()]


@pytest.mark.parametrize("key", list(ISSUE_COMMANDS))
def test_issue_command_reproductions_are_refused(key: str) -> None:
    assert shell_problem(ISSUE_COMMANDS[key].template) is not None


@needs_shells
@pytest.mark.parametrize("key", _issue_params(ISSUE_COMMANDS))
def test_issue_command_reproductions_really_run_the_value(key: str, tmp_path: Path) -> None:
    demo = ISSUE_COMMANDS[key]
    _skip_unless_runnable(key, demo)
    assert command_runs(demo, tmp_path), key


@pytest.mark.parametrize("key", list(ISSUE_ARGV))
def test_issue_argv_reproductions_are_refused(key: str) -> None:
    demo = ISSUE_ARGV[key]
    assert demo.argv is not None
    assert argv_problem(list(demo.argv)) is not None
    assert shell_problem(demo.template) is not None


@pytest.mark.parametrize("key", _issue_params(ISSUE_ARGV))
def test_issue_argv_reproductions_really_run_the_value(key: str, tmp_path: Path) -> None:
    demo = ISSUE_ARGV[key]
    _skip_unless_runnable(key, demo)
    assert argv_runs(demo, tmp_path), key


# --- the docs list the table -------------------------------------------------------------

def test_the_docs_name_every_program_of_the_table() -> None:
    text = (ROOT / "docs" / "placeholders.md").read_text()
    # Every token of every `code span`, split at blanks, commas and slashes.
    tokens = {t for span in re.findall(r"`([^`\n]+)`", text)
              for t in re.split(r"[\s,/]+", span) if t}
    missing = [name for name in PROGRAMS if name not in tokens]
    assert not missing, f"docs/placeholders.md does not name: {missing}"
