"""Shell safety under fire (SPEC §3): generated command templates, run for real.

Hypothesis composes whole templates from a grammar of shell contexts (plain
arguments, every kind of quote, ``$( )``, backticks, arithmetic, ``[[ ]]``,
``case``, here-documents, comments, backslashes, assignments, subscripts,
``let``, ``eval``, ``.``, ``sh -c``, ``declare``/``unset``/``read``/
``printf -v``/``test -v``, wrappers, redirections, pipes, lists …) with
placeholders at random places. Every template the checker accepts is rendered
exactly as the runner renders it, with hostile values, and run under both
``dash -c`` and ``bash --posix -c``: the marker file those values try to
create must never appear.

The grammar leaves out one thing on purpose: template code that itself
evaluates data it received another way (``… | sh``, ``eval "$1"`` in a
function, ``read n; $((n))``). That is the author's own code, like using a
value passed with ``env=``; the check is about where substitution puts data.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brain.placeholders import Ref, refs
from brain.shell_check import render_command, shell_problem

SHELLS = {"dash": ["dash", "-c"], "bash --posix": ["bash", "--posix", "-c"]}
pytestmark = pytest.mark.skipif(not all(shutil.which(s[0]) for s in SHELLS.values()),
                                reason="needs dash and bash")

BATCH = 16            # templates per hypothesis example
# 1,920 generated templates (about 1,150 accepted, each run 4 times: some 4,600 shells),
# a fresh draw every session; SHELL_FUZZ_EXAMPLES=5000 for a longer soak. (Halved from 240
# for the suite's time: the largest single test, and its grammar is covered anew each run.)
EXAMPLES = int(os.environ.get("SHELL_FUZZ_EXAMPLES", "120"))
VALUE_SETS = 2        # hostile value sets per accepted template and shell
MIN_ACCEPTED = int(EXAMPLES * BATCH * 0.45)  # accepted templates, each run under both shells

# --- the grammar ------------------------------------------------------------------------
# A hand-written random grammar seeded by hypothesis: far faster to draw than nested
# strategies (and than ``st.randoms()``, whose every call fills hypothesis' buffer); a
# failure names the seed, so hypothesis replays it.

PHS = ["{a}", "{b}", "{trigger.body}", "{previous.a}"]
LITS = ["-n", "--", "-v", "-e", "-c", "%s", "1", "a=b", "'lit'", '"lit"', "$HOME", "$v", "~",
        ":", "/dev/null", "'$(x)'", "\\$x", "-", "x:y", '"{{b}}"', "{}", "'{print $2}'"]
# Commands that only read their arguments (accepted with placeholder arguments).
SAFE_NAMES = ["echo", "printf '%s\\n'", "printf %s", "printf -- %s", "cat", "true", ":",
              "grep -e", "grep --", "ls -d", "pwd", "echo -e", "timeout 2 echo", "nice -n 1 echo",
              "env -i X=1 printf %s", "sh -c 'printf %s \"$1\"' sh",
              "bash -c 'printf %s \"$1\"' bash", "f", "command echo", "exec 3>&1; echo",
              "builtin echo", "test -n", "[ -n"]
# Commands whose arguments are risky in some position.
RISKY_NAMES = ["printf", "printf -v", "test", "test -v", "test !", "type", "cd", "shift", "wait",
               "ulimit", "umask", "exit", "return", "env", "env -i", "exec", "command",
               "command -v", "builtin", "time", "coproc", "nohup", "xargs", "xargs echo",
               "env sh -c", "timeout 2 sh -c", "timeout -s KILL 2 sh -c", "nice -n 1 printf -v",
               "builtin printf -v", "e", "select", "hash", "set --", "set", "getopts ab", "sh -c",
               "bash -c", "dash -c", "sh", "sh -s", "bash --norc -c", "sh -ec", "kill -0", "eval",
               ".", "source", "trap", "alias", "let", "declare", "typeset", "local", "export",
               "readonly", "unset", "read", "read -r", "mapfile", "readarray", "declare -i",
               "local -a", "bind", "complete -C", "compgen -C", "enable -f", "fc -s", "jobs -x",
               "printf -v x", "printf -v 'a[0]'", "[", "[ -v", "[ !", "[[", "echo -n", "echo"]
OPS = ["=", "!=", "-eq", "-lt", "-a", "-o", "-nt", "<", ">", "==", "=~"]
PIPE_RHS = ["cat", "wc -c", "head -n 1", "tr a b", "grep -c x", "sort"]
EXPANSION_OPS = [":-", "-", ":+", "+", "#", "##", "%", "%%", ":=", "=", ":?", "/", "//", ":",
                 "^", ","]


class Grammar:
    """Random shell templates; ``danger`` is the chance of each risky choice."""

    def __init__(self, rnd: random.Random, danger: float) -> None:
        self.r = rnd
        self.danger = danger

    def risky(self) -> bool:
        return self.r.random() < self.danger

    def ph(self) -> str:
        return self.r.choice(PHS)

    def cmd(self, depth: int) -> str:
        if depth > 1 or self.r.random() < 0.3:
            return self.r.choice(["date", "true", "echo hi", "printf %s x"])
        return self.simple(depth + 1)

    def piece(self, depth: int) -> str:
        r, ph = self.r, self.ph()
        if self.risky():
            c = self.cmd(depth)
            inner = r.choice([ph, r.choice(LITS), f"$({c})"])
            return r.choice([
                f"'{ph}'", f'"{ph}"', f'"pre {ph} post"', f"$'{ph}'", f'$"{ph}"', "\\" + ph,
                f"$(( {ph} + 1 ))", f"$(({ph}))", "$(( _ ))", "$_", "${_}", "$1", "$@",
                f"`{c}`", f'"`{c}`"', f"<({c})",
                "${v" + r.choice(EXPANSION_OPS) + inner + "}", '"${v:-' + inner + '}"',
                "${a[" + ph + "]}", "${!" + ph + "}", f"$v{ph}", f"~{ph}", f"[{ph}]", f"*{ph}",
                "{a," + ph + "}", f"$1{ph}", f"{ph}>o", f"{ph}\\\n", f"{ph}<o", "\\\\" + ph,
                "$(" + "echo " + ph + ")#" + '"' + ph + '"', "'{a}'",
                f"$[ {ph} ]", f"$(({c}))", f"$(({c}) )",
                f"$( ({c}) )", f"a#{ph}", f" #{ph}", f">({c})",
                f"$(case x in x) {c};; esac)", f"{ph}\r", f"\r{ph}",
                f"$(cat <<EOF\n{ph}\nEOF\n)", f"$(echo {ph} # c\n)", f"{ph}#",
                f"$(echo {ph})$(( 1 ))", f"\\\n{ph}",
            ])
        if r.random() < 0.08:
            return f'"$({self.simple(depth + 1) if depth < 2 else "echo " + ph})"'
        return r.choice([ph, ph, ph, ph, r.choice(LITS), f"pre{ph}post", f"/tmp/{ph}.txt",
                         f'"$(printf %s {ph})"', "${v:-" + ph + "}", "${v#" + ph + "}",
                         "${v%%" + ph + "}", f"--opt={ph}", f'"{ph}"', f"'{ph}'",
                         f'"Hello, {ph}!"', f"'it'\\''s {ph}'", f'"$HOME/{ph} $v"',
                         f'"a {ph} \\"b\\" {ph}"', f"'\"{ph}\"'", f'"\'{ph}\'"',
                         f'"$(echo "{ph}")"', f"\"$(echo '{ph}')\"", f'"$(date): {ph}"'])

    def word(self, depth: int) -> str:
        return "".join(self.piece(depth) for _ in range(self.r.choice([1, 1, 1, 2, 3])))

    def words(self, depth: int, most: int = 3) -> str:
        return " ".join(self.word(depth) for _ in range(self.r.randint(0, most)))

    def redirect(self, depth: int) -> str:
        r = self.r
        if r.random() < 0.6:
            return ""
        if self.risky():
            return f" {r.choice(['>', '>>', '<', '2>', '<<<', '>&', '<&', '>|'])} {self.word(depth)}"
        return r.choice([f" > {self.ph()}", f" <<< {self.ph()}", " >/dev/null", " 2>&1",
                         f" 2> {self.ph()}", f" >> out{self.ph()}"])

    def simple(self, depth: int = 0) -> str:
        r = self.r
        prefix = ""
        if self.risky() and r.random() < 0.2:
            prefix = r.choice([f"X={self.word(depth)} ", "X=1 "])
        if self.risky():
            kind = r.random()
            if kind < 0.6:
                name = r.choice(RISKY_NAMES)
                if name in ("[", "[ -v", "[ !"):
                    return f"{name} {self.words(depth)} ]"
                if name == "[[":
                    return (f"[[ {self.word(depth)} {r.choice([*OPS, '-v'])} "
                            f"{self.word(depth)} ]]")
            elif kind < 0.75:
                return f"{self.word(depth)} {self.words(depth, 2)}".rstrip()
            else:
                name = r.choice(["[", "test"])
                args = [self.word(depth) if r.random() < 0.5 else r.choice(OPS + LITS)
                        for _ in range(r.randint(1, 4))]
                return f"{name} {' '.join(args)}" + (" ]" if name == "[" else "")
        else:
            name = r.choice(SAFE_NAMES)
            if name in ("[ -n", "test -n"):
                operand = r.choice([self.ph(), f"pre{self.ph()}post", f'"$(echo {self.ph()})"'])
                return f"{name} {operand}" + (" ]" if name == "[ -n" else "")
        tail = self.words(depth, 1) if r.random() < 0.2 else ""
        return f"{prefix}{name} {self.words(depth)}{self.redirect(depth)} {tail}".rstrip()

    def statement(self) -> str:
        r = self.r
        s1, s2 = self.simple(), self.simple()
        if not self.risky():
            return r.choice([
                s1, s2, s1, s2,
                f"if {s1}; then {s2}; fi",
                f"{{ {s1}; }}", f"( {s2} )", f"! {s1}",
                f"{s2} | {r.choice(PIPE_RHS)}",
                f"while false; do {s1}; done",
                f"case x in x) {s2};; esac",
                f"cat <<EOF\nliteral text\nEOF\n{s1}",
                f"cat <<EOF > {self.ph()}\nbody $HOME\nEOF\n:",
                f"f() {{ printf '%s\\n' \"$1\"; }}; {s2}",
                f"{s1} # a comment\n:",
            ])
        w = self.word(0)
        dl = r.choice(["EOF", "'EOF'", '"EOF"', "\\EOF", "-EOF"])
        tab = "\t" if dl == "-EOF" else ""
        return r.choice([
            f"n={w}", f"n={w}; echo $(( n + 1 ))", f"declare -i n; n={w}", f"a[{w}]=1",
            f"(( {w} ))", f"for (( i={w}; i<1; i++ )); do :; done",
            f"read n <<< {w}; echo $(( n ))", f"set -- {w}; echo $(( $1 ))",
            f"case {w} in {self.word(0)}) {s2};; esac",
            f"case x in {w}) {s1};; esac",
            f"for i in {w}; do {s2}; done", f"for i in {w}; do echo $(( i )); done",
            f"cat <<{dl}\nhdr\n{tab}EOF\\\n{r.choice(['', chr(10), chr(10) * 2])}{s1}",
            f"cat <<{dl}\nhdr \\\n{tab}EOF\n{s1}", f"{s1} <<< {w}", f"sh <<< {w}",
            f"bash -s <<< {w}", f". /dev/stdin <<< {w}", f"python3 <<< {w}",
            f"{s1} <<{dl}{r.choice(['', ' | cat', ' > o', ' && echo done'])}\n"
            f"{tab}{self.words(0) or w}\n{tab}EOF",
            f"{s2} # {self.words(0)}\necho after",
            f"{s1} \\\n {w}", f"alias e=eval\n{s2}",
            f"{s1}; echo $(( _ ))", f"{s2}; [[ $_ -eq 1 ]]",
            f"{s1}; x=$_; echo $(( x ))", f"{s2} | {{ read -r y; }}",
            f"echo {w}; let n={self.word(0)}", f"echo $(( {w} ))", f"echo $(date)#\"{w}\"",
            f"[[ {w} -eq 1 ]]", f"let n={w}", f"echo C:\\{w}",
            f"cat <<E\"O\"F\n{w}\nEOF", f"cat << EOF\n{w}\nEOF", f"cat <<EOF\n{w}\nEOF \n",
            f"cat <<EOF; echo {w}\nbody\nEOF", f"cat <<A; cat <<B\na\nA\n{w}\nB",
            f"function g {{ {s1}; }}; g", f"until true; do {s2}; done",
            f"select s in {w}; do break; done", f"time {s1}",
            f"coproc {s2}", f"{s1} &\nwait",
        ])

    def template(self) -> str:
        parts = [self.statement() for _ in range(self.r.choice([1, 1, 2, 3]))]
        out = parts[0]
        for part in parts[1:]:
            out += self.r.choice(["; ", "\n", " && ", " || "]) + part
        if not refs(out):
            out += f"; echo {self.ph()}"
        return out


# Values that try to run `touch MARK` once inserted; MARK is an absolute path.
HOSTILE = ["$(touch MARK)", "`touch MARK`", ";touch MARK;#", "\ntouch MARK #", "'", '"', "\\",
           "a[$(touch MARK)]", "a[`touch MARK`]", "-v", "x=$(touch MARK)", "'$(touch MARK)'",
           '"$(touch MARK)"', "}$(touch MARK)", ")$(touch MARK)", "$(touch MARK)'", "-c",
           "touch MARK", "touch${IFS}MARK", "-e", "--", "2", ">", "EOF\ntouch MARK\nEOF", "!",
           "&touch MARK&", "|touch MARK", "-v a[$(touch MARK)]", "*", "$((a[$(touch MARK)]))",
           "\ntouch MARK\n", "' ; touch MARK ; '", "-p", "e", "x]", "a[$(touch MARK)]=1", "",
           '\\"$(touch MARK)"', '$(touch MARK)\\', "\\$(touch MARK)", "\\`touch MARK`",
           "'\\''$(touch MARK)", "open('MARK', 'w')", "\\\n$(touch MARK)"]
VALUES = st.one_of(*(st.just(v) for v in HOSTILE),
                   st.text(alphabet=st.sampled_from(list("$(){}[]`'\"\\;|&<> \n#-=av")),
                           max_size=8).map(lambda s: s + "$(touch MARK)"))


def _run(shell: list[str], command: str, where: Path) -> None:
    subprocess.run([*shell, command], cwd=where, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10,
                   env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(where),
                        "LC_ALL": "C"}, start_new_session=True)


def _lookup(values: dict[str, str]) -> Callable[[Ref], str]:
    return lambda ref: values[ref.text]


def test_accepted_templates_never_run_a_placeholder_value_under_dash_or_bash_posix(
        tmp_path: Path) -> None:
    stats: Counter[str] = Counter()
    injected: list[str] = []
    safe_refused: list[str] = []
    started = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=max(4, 2 * (os.cpu_count() or 2)))

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 2**64), st.lists(VALUES, min_size=4, max_size=4))
    def batch(seed: int, drawn: list[str]) -> None:
        rnd = random.Random(seed)
        jobs = []
        for _ in range(BATCH):
            danger = rnd.choice([0.0, 0.03, 0.08, 0.2, 0.5])
            template = Grammar(rnd, danger).template()
            stats["generated"] += 1
            if not refs(template):
                stats["no placeholder"] += 1
                continue
            if shell_problem(template) is not None:
                stats["refused"] += 1
                if danger == 0.0:  # the known-safe family must always pass
                    safe_refused.append(f"{template!r}: {shell_problem(template)}")
                continue
            stats["accepted"] += 1
            names = sorted({r.text for r in refs(template)})
            for value_set in range(VALUE_SETS):
                picks = [rnd.choice(HOSTILE) if value_set or rnd.random() < 0.7 else drawn[i]
                         for i in range(len(names))]
                for shell_name, shell in SHELLS.items():
                    stats[f"run {shell_name}"] += 1
                    where = tmp_path / f"r{stats['runs']}"
                    stats["runs"] += 1
                    where.mkdir()
                    marker = where / "MARKER"
                    values = {n: v.replace("MARK", str(marker))
                              for n, v in zip(names, picks, strict=True)}
                    command = render_command(template, _lookup(values))
                    jobs.append((shell_name, template, values, marker,
                                 pool.submit(_run, shell, command, where)))
        for shell_name, template, values, marker, job in jobs:
            try:
                job.result()
            except subprocess.TimeoutExpired:
                stats["timed out"] += 1
                print(f"timed out: {shell_name}: {template!r}")
            if marker.exists():
                injected.append(f"{shell_name}: {template!r} with {values!r}")
        assert not injected, "placeholder values ran as code:\n" + "\n".join(injected[:10])

    try:
        batch()
    finally:
        pool.shutdown(wait=True)
    elapsed = time.monotonic() - started
    print(f"\nshell fuzz: {dict(stats)} in {elapsed:.1f}s")
    assert not list(tmp_path.rglob("MARKER"))
    assert stats["accepted"] >= MIN_ACCEPTED, stats
    for shell_name in SHELLS:
        assert stats[f"run {shell_name}"] == VALUE_SETS * stats["accepted"], stats
    # The checker is a whitelist, not "refuse everything": the safe family (arguments,
    # redirection targets, $(…), ${v:-…}, pipes, if/while/case bodies …) always passes.
    assert not safe_refused, "safe templates refused:\n" + "\n".join(safe_refused[:10])
    assert stats["accepted"] >= 0.3 * (stats["generated"] - stats["no placeholder"]), stats
