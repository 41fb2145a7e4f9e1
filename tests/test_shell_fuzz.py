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

from brain.placeholders import Ref, refs, render
from brain.shell_check import shell_problem

SHELLS = {"dash": ["dash", "-c"], "bash --posix": ["bash", "--posix", "-c"]}
pytestmark = pytest.mark.skipif(not all(shutil.which(s[0]) for s in SHELLS.values()),
                                reason="needs dash and bash")

BATCH = 16            # templates per hypothesis example
EXAMPLES = 260        # 4,160 generated templates
MIN_RUN_PER_SHELL = 2000

# --- the grammar ------------------------------------------------------------------------

PH = st.sampled_from(["{a}", "{b}", "{trigger.body}", "{previous.a}"])
LIT = st.sampled_from(["-n", "--", "-v", "-e", "-c", "%s", "1", "a=b", "'lit'", '"lit"', "$HOME",
                       "$v", "~", ":", "/dev/null", "'$(x)'", "\\$x", "-", "x:y"])


def _pieces(cmd: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """One piece of a word; pieces glue into words."""
    ph = PH
    inner = st.one_of(PH, LIT, cmd.map(lambda c: f"$({c})"))
    return st.one_of(
        ph, ph, ph, ph, ph, LIT, LIT,
        ph.map(lambda p: f"'{p}'"),
        ph.map(lambda p: f'"{p}"'),
        ph.map(lambda p: f'"pre {p} post"'),
        ph.map(lambda p: f"$'{p}'"),
        ph.map(lambda p: f'$"{p}"'),
        ph.map(lambda p: "\\" + p),
        ph.map(lambda p: "\\\\" + p),
        ph.map(lambda p: f"$(( {p} + 1 ))"),
        ph.map(lambda p: f"$(({p}))"),
        st.sampled_from(["$(( _ ))", "$_", "${_}", "$1", "$@"]),
        cmd.map(lambda c: f"$({c})"),
        cmd.map(lambda c: f"$({c})"),
        cmd.map(lambda c: f'"$({c})"'),
        cmd.map(lambda c: f"`{c}`"),
        cmd.map(lambda c: f'"`{c}`"'),
        cmd.map(lambda c: f"<({c})"),
        st.tuples(st.sampled_from([":-", "-", ":+", "+", "#", "##", "%", "%%", ":=", "=", ":?",
                                   "/", "//", ":", "^", ","]), inner)
        .map(lambda t: "${v" + t[0] + t[1] + "}"),
        inner.map(lambda w: '"${v:-' + w + '}"'),
        ph.map(lambda p: "${a[" + p + "]}"),
        ph.map(lambda p: "${!" + p + "}"),
        ph.map(lambda p: f"$v{p}"),
        ph.map(lambda p: f"~{p}"),
        ph.map(lambda p: f"[{p}]"),
        ph.map(lambda p: f"*{p}"),
        ph.map(lambda p: "{a," + p + "}"),
        ph.map(lambda p: f"$1{p}"),
        ph.map(lambda p: f"{p}>o"),
        ph.map(lambda p: f"{p}\\\n"),
    )


def _word(cmd: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(_pieces(cmd), min_size=1, max_size=3).map("".join)


def _ph_word(cmd: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A word that surely holds a placeholder (arguments of commands that run code)."""
    return st.tuples(_word(cmd), PH, _word(cmd), st.integers(0, 2)).map(
        lambda t: (t[1], t[0] + t[1], t[1] + t[2])[t[3]])


# Commands that only read their arguments, and those that run them or take names.
_PLAIN = ["echo", "echo", "printf '%s\\n'", "printf %s", "printf", "printf -v", "printf -- %s",
          "cat", "true", ":", "grep -e", "grep --", "ls -d", "test", "type", "cd", "pwd", "shift",
          "wait", "ulimit", "umask", "exit", "return", "timeout 2", "nice -n 1", "env", "env -i",
          "exec", "command", "command -v", "builtin", "builtin echo", "time", "coproc",
          "nohup", "xargs", "xargs echo", "env sh -c", "timeout 2 sh -c", "nice -n 1 printf -v",
          "sh -c 'printf %s \"$1\"' sh", "bash -c 'printf %s \"$1\"' bash", "echo -e", "f", "e",
          "select", "hash", "set --", "set", "getopts ab", "test -v", "test -n", "test !",
          "sh -c", "bash -c", "dash -c", "sh", "sh -s", "bash --norc -c", "sh -ec", "kill -0"]
_CODE = ["eval", ".", "source", "trap", "alias", "let", "declare", "typeset", "local", "export",
         "readonly", "unset", "read", "read -r", "mapfile", "readarray", "declare -i", "local -a",
         "bind", "complete -C", "compgen -C", "enable -f", "fc -s", "jobs -x"]
_OPS = ["=", "!=", "-eq", "-lt", "-a", "-o", "-nt", "<", ">"]
_PIPE_RHS = ["cat", "wc -c", "head -n 1", "tr a b", "grep -c x", "sort"]


def _simple(cmd: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    word, ph_word = _word(cmd), _ph_word(cmd)
    redirect = st.one_of(
        st.just(""), st.just(""), st.just(""),
        st.tuples(st.sampled_from([">", ">>", "<", "2>", "<<<", ">&", "<&", ">|"]), word)
        .map(lambda t: f" {t[0]} {t[1]}"),
        st.just(" >/dev/null"), st.just(" 2>&1"),
    )
    prefix = st.one_of(st.just(""), st.just(""), st.just(""), st.just(""),
                       word.map(lambda w: f"X={w} "), st.just("X=1 "))
    plain = st.tuples(prefix, st.sampled_from(_PLAIN), st.lists(word, max_size=3), redirect,
                      st.lists(word, max_size=1)).map(
        lambda t: f"{t[0]}{t[1]} {' '.join(t[2])}{t[3]} {' '.join(t[4])}".rstrip())
    code = st.tuples(st.sampled_from(_CODE), st.lists(word, max_size=1), ph_word, redirect).map(
        lambda t: f"{t[0]} {' '.join(t[1])} {t[2]}{t[3]}")
    as_name = st.tuples(word, st.lists(word, max_size=2)).map(
        lambda t: f"{t[0]} {' '.join(t[1])}".rstrip())
    bracket = st.one_of(
        word.map(lambda w: f"[ {w} ]"),
        st.tuples(st.sampled_from(["-n", "-z", "-v", "!", "-f", "-R"]), word)
        .map(lambda t: f"[ {t[0]} {t[1]} ]"),
        st.tuples(word, st.sampled_from(_OPS), word).map(lambda t: f"[ {t[0]} {t[1]} {t[2]} ]"),
        st.tuples(word, word).map(lambda t: f"[ {t[0]} {t[1]} ]"),
        st.tuples(word, word, word, word).map(lambda t: "[ " + " ".join(t) + " ]"),
        st.tuples(st.sampled_from(["!", "-n", "-v"]), word, st.sampled_from(_OPS), word)
        .map(lambda t: "[ " + " ".join(t) + " ]"),
        st.tuples(word, st.sampled_from(["-eq", "==", "=~", "-lt"]), word)
        .map(lambda t: f"[[ {t[0]} {t[1]} {t[2]} ]]"),
        word.map(lambda w: f"[[ -v {w} ]]"),
        word.map(lambda w: f"[[ -n {w} ]]"),
    )
    return st.one_of(plain, plain, plain, plain, plain, plain, code, as_name, bracket, bracket)


def _statement(cmd: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    word, simple = _word(cmd), _simple(cmd)
    body = st.lists(word, min_size=1, max_size=3).map(" ".join)
    heredoc = st.tuples(st.sampled_from(["EOF", "'EOF'", '"EOF"', "\\EOF", "-EOF"]), simple, body,
                        st.sampled_from(["", " | cat", " > o", " && echo done"])).map(
        lambda t: (f"{t[1]} <<{t[0]}{t[3]}\n" + ("\t" if t[0] == "-EOF" else "") + f"{t[2]}\n"
                   + ("\t" if t[0] == "-EOF" else "") + "EOF"))
    return st.one_of(
        simple, simple, simple, simple, simple, simple, simple, simple,
        word.map(lambda w: f"n={w}"),
        word.map(lambda w: f"n={w}; echo $(( n + 1 ))"),
        word.map(lambda w: f"declare -i n; n={w}"),
        word.map(lambda w: f"a[{w}]=1"),
        word.map(lambda w: f"(( {w} ))"),
        word.map(lambda w: f"for (( i={w}; i<1; i++ )); do :; done"),
        word.map(lambda w: f"read n <<< {w}; echo $(( n ))"),
        word.map(lambda w: f"set -- {w}; echo $(( $1 ))"),
        st.tuples(word, word, simple).map(lambda t: f"case {t[0]} in {t[1]}) {t[2]};; esac"),
        st.tuples(word, simple).map(lambda t: f"case x in x) {t[1]} {t[0]};; esac"),
        st.tuples(word, simple).map(lambda t: f"for i in {t[0]}; do {t[1]}; done"),
        st.tuples(word, simple).map(lambda t: f"for i in {t[0]}; do echo $(( i )); done"),
        st.tuples(simple, simple).map(lambda t: f"if {t[0]}; then {t[1]}; fi"),
        simple.map(lambda s: f"while false; do {s}; done"),
        simple.map(lambda s: f"{{ {s}; }}"),
        simple.map(lambda s: f"( {s} )"),
        simple.map(lambda s: f"! {s}"),
        heredoc, heredoc,
        st.tuples(simple, body).map(lambda t: f"{t[0]} # {t[1]}"),
        st.tuples(simple, word).map(lambda t: f"{t[0]} \\\n {t[1]}"),
        simple.map(lambda s: f"alias e=eval\n{s}"),
        simple.map(lambda s: f"f() {{ printf '%s\\n' \"$1\"; }}; {s}"),
        simple.map(lambda s: f"{s}; echo $(( _ ))"),
        simple.map(lambda s: f"{s}; [[ $_ -eq 1 ]]"),
        simple.map(lambda s: f"{s}; x=$_; echo $(( x ))"),
        simple.map(lambda s: f"{s} | {{ read -r y; }}"),
        st.tuples(simple, st.sampled_from(_PIPE_RHS)).map(lambda t: f"{t[0]} | {t[1]}"),
    )


_COMMAND: st.SearchStrategy[str] = st.deferred(
    lambda: st.one_of(st.sampled_from(["date", "true", "echo hi", "printf %s x"]),
                      _simple(st.sampled_from(["date", "echo hi"])),
                      _simple(_COMMAND)))

TEMPLATES = st.tuples(st.lists(_statement(_COMMAND), min_size=1, max_size=3),
                      st.lists(st.sampled_from(["; ", "\n", " && ", " || "]),
                               min_size=3, max_size=3)).map(
    lambda t: "".join(s + (t[1][i] if i < len(t[0]) - 1 else "") for i, s in enumerate(t[0])))

# Values that try to run `touch MARK` once inserted; MARK is an absolute path.
HOSTILE = ["$(touch MARK)", "`touch MARK`", ";touch MARK;#", "\ntouch MARK #", "'", '"', "\\",
           "a[$(touch MARK)]", "a[`touch MARK`]", "-v", "x=$(touch MARK)", "'$(touch MARK)'",
           '"$(touch MARK)"', "}$(touch MARK)", ")$(touch MARK)", "$(touch MARK)'", "-c",
           "touch MARK", "touch${IFS}MARK", "-e", "--", "2", ">", "EOF\ntouch MARK\nEOF", "!",
           "&touch MARK&", "|touch MARK", "-v a[$(touch MARK)]", "*", "$((a[$(touch MARK)]))",
           "\ntouch MARK\n", "' ; touch MARK ; '", "-p", "e", "x]", "a[$(touch MARK)]=1", ""]
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
    started = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=max(4, 2 * (os.cpu_count() or 2)))

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(TEMPLATES, st.lists(VALUES, min_size=4, max_size=4)),
                    min_size=BATCH, max_size=BATCH))
    def batch(items: list[tuple[str, list[str]]]) -> None:
        jobs = []
        for template, drawn in items:
            stats["generated"] += 1
            if not refs(template):
                stats["no placeholder"] += 1
                continue
            if shell_problem(template) is not None:
                stats["refused"] += 1
                continue
            stats["accepted"] += 1
            for shell_name, shell in SHELLS.items():
                stats[f"run {shell_name}"] += 1
                where = tmp_path / f"r{stats['runs']}"
                stats["runs"] += 1
                where.mkdir()
                marker = where / "MARKER"
                names = sorted({r.text for r in refs(template)})
                values = {n: drawn[i % 4].replace("MARK", str(marker)) for i, n in
                          enumerate(names)}
                command = render(template, _lookup(values), shell_quote=True)
                jobs.append((shell_name, template, values, marker,
                             pool.submit(_run, shell, command, where)))
        for shell_name, template, values, marker, job in jobs:
            try:
                job.result()
            except subprocess.TimeoutExpired:
                stats["timed out"] += 1
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
    for shell_name in SHELLS:
        assert stats[f"run {shell_name}"] >= MIN_RUN_PER_SHELL, stats
    # The checker is a whitelist, not "refuse everything".
    assert stats["accepted"] >= 0.3 * (stats["generated"] - stats["no placeholder"]), stats
