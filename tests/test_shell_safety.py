"""Where a placeholder may stand in ``shell(command=...)`` (SPEC §3, issue 9).

Each reproduction from the issue is a definition error naming the workflow,
the step and the context, and each is shown to be really injectable when
rendered and run, so the refusal is needed. ``tests/test_shell_fuzz.py``
generates templates at scale; this file pins the cases and the messages.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import definition_error

from brain import WorkflowDefinitionError, shell, trigger, workflow
from brain.placeholders import Ref, render
from brain.shell_check import shell_problem

SHELLS = {"dash": ["dash", "-c"], "bash --posix": ["bash", "--posix", "-c"]}
needs_shells = pytest.mark.skipif(not all(shutil.which(s[0]) for s in SHELLS.values()),
                                  reason="needs dash and bash")


def run_in(shell: str, command: str, where: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*SHELLS[shell], command], cwd=where, capture_output=True, timeout=10,
                          stdin=subprocess.DEVNULL)


def injects(template: str, values: dict[str, str], tmp_path: Path) -> set[str]:
    """The shells in which ``template``, rendered as the runner does, runs ``touch MARK``."""
    hit = set()
    for name in SHELLS:
        marker = tmp_path / f"MARK-{name.replace(' ', '')}"
        filled = {k: v.replace("MARK", str(marker)) for k, v in values.items()}
        command = render(template, lambda ref, f=filled: f[ref.text], shell_quote=True)
        run_in(name, command, tmp_path)
        if marker.exists():
            hit.add(name)
    return hit


# --- the reproductions from issue 9 -------------------------------------------------------

REPRODUCTIONS = [
    # (template, hostile values, words the message must contain)
    ("echo hi # note {trigger.body}\necho after", {"{trigger.body}": "\ntouch MARK #"},
     ["comment"]),
    ("echo C:\\{trigger.body}", {"{trigger.body}": "x; touch MARK; #"}, ["backslash"]),
    ("echo $(( {n} + {trigger.body} ))", {"{n}": "1", "{trigger.body}": "$(touch MARK)"},
     ["arithmetic"]),
    ("[[ {x} -eq 1 ]]", {"{x}": "a[$(touch MARK)]"}, ["[[ … ]]"]),
    ("let n={x}", {"{x}": "a[$(touch MARK)]"}, ["let"]),
    ("n={x}; echo $(( n + 1 ))", {"{x}": "a[$(touch MARK)]"}, ["assignment"]),
    ("X={x} bash -c 'echo $(( X ))'", {"{x}": "a[$(touch MARK)]"}, ["assignment"]),
    ("(( {x} ))", {"{x}": "a[$(touch MARK)]"}, ["arithmetic"]),
    ("case x in {x}) echo;; esac", {"{x}": "'$(touch MARK)'"}, ["case pattern"]),
    ("a[{x}]=1", {"{x}": "$(touch MARK)"}, ["subscript"]),
    ("{x} {y}", {"{x}": "touch", "{y}": "MARK"}, ["command name"]),
    ("eval {x}", {"{x}": "touch MARK"}, ["eval", "shell code"]),
    (". {x}", {"{x}": "/dev/stdin"}, ["."]),
    ("sh -c {x}", {"{x}": "touch MARK"}, ["sh -c"]),
    ("a=(1 2); unset {x}", {"{x}": "a[$(touch MARK)]"}, ["unset"]),
    ("printf -v {x} %s v", {"{x}": "a[$(touch MARK)]"}, ["printf -v"]),
    ("test -v {x}", {"{x}": "a[$(touch MARK)]"}, ["test", "-v"]),
    ("test {x} {y}", {"{x}": "-v", "{y}": "a[$(touch MARK)]"}, ["test", "operator"]),
    ("read n <<< {x}; echo $(( n ))", {"{x}": "a[$(touch MARK)]"}, ["read"]),
    ("declare -i n; n={x}", {"{x}": "a[$(touch MARK)]"}, ["assignment"]),
    ("echo {x} > /dev/null; echo $(( _ ))", {"{x}": "a[$(touch MARK)]"}, ["_"]),
    ("echo hi >& {x}", {"{x}": "x$(touch MARK)"}, [">&"]),
    ("env {x} {y} {z}", {"{x}": "sh", "{y}": "-c", "{z}": "touch MARK"}, ["env", "program"]),
    ("echo `echo {x}`", {"{x}": "`; touch MARK; `"}, ["backticks"]),
    ("cat <<EOF\n{x}\nEOF", {"{x}": "$(touch MARK)"}, ["here-document"]),
    ("cat <<EOF > {x}\nbody\nEOF; echo {y}", {"{x}": "o", "{y}": "$(touch MARK)"},
     ["here-document", "delimiter"]),
]


@pytest.mark.parametrize(("template", "values", "words"), REPRODUCTIONS,
                         ids=[r[0][:40] for r in REPRODUCTIONS])
def test_each_reproduction_is_a_definition_error_naming_workflow_step_and_context(
        template: str, values: dict[str, str], words: list[str]) -> None:
    def body():
        shell("first", command="true")
        shell("x", command="true")
        shell("y", command="true")
        shell("n", command="true")
        shell("z", command="true")
        shell("risky", command=template)

    message = definition_error(body, name="repro")
    assert message.startswith("workflow 'repro', step 'risky': placeholder {")
    for word in words:
        assert word in message, message
    # Every message says what to do instead.
    assert any(hint in message for hint in ("env=", "stdin=", "argv=", "bare", "write")), message


# Refused by the rule's simplicity rather than because the value runs: a quoted
# case pattern is data, and `. {x}` runs a file the value names (not the value).
NOT_INJECTABLE = {"case x in {x}) echo;; esac", ". {x}"}


@needs_shells
@pytest.mark.parametrize(("template", "values", "words"),
                         [r for r in REPRODUCTIONS if r[0] not in NOT_INJECTABLE],
                         ids=[r[0][:40] for r in REPRODUCTIONS if r[0] not in NOT_INJECTABLE])
def test_each_refused_reproduction_really_runs_the_value_in_some_shell(
        template: str, values: dict[str, str], words: list[str], tmp_path: Path) -> None:
    """The refusal is needed: rendered and run anyway, the value becomes code."""
    assert injects(template, values, tmp_path), template


# --- what stays accepted ------------------------------------------------------------------

ACCEPTED = [
    "echo {x}", "grep -- {x} file", "grep -e {x} -- {y} | wc -l", "cat > {x}", "cat >> {x}",
    "sort < {x}", "cat <<< {x}", 'echo "$(printf %s {x})"', 'echo $(date)#"{x}"',
    "echo '{x}'", 'echo "Hello, {x}!"', "echo 'Result: {x}'", 'echo "$(date): {x}" >> log',
    "echo pre{x}post", "cp {x} /tmp/{y}.bak", "echo ${VAR:-{x}}", "awk '{print $2}' {x}",
    "printf '%s\\n' {x}", "printf -- %s {x}", "printf -v out %s {x}", "[ -n {x} ]",
    "[ {x} = {y} ]", "test -f {x}", "if [ -f {x} ]; then cat {x}; fi",
    "sh -c 'printf %s \"$1\"' sh {x}", "timeout 5 grep {x} file", "nice -n 5 echo {x}",
    "env -i PATH=/bin printf %s {x}", "command echo {x}", "xargs printf %s {x}",
    "cat <<EOF > {x}\nbody\nEOF", "cat <<EOF\nhello\nEOF\necho {x}", "echo {x} # {{x}} note",
    "for f in *.txt; do grep -- {x} \"$f\"; done", "case $1 in a) echo {x};; esac",
    "echo $HOME{x}", "echo ${HOME}{x}", "echo {x} {{y}} ${y}", "cat <(echo {x})",
    "f() { printf '%s\\n' \"$1\"; }; f {x}", "echo a#{x}", "! grep -q {x} file",
    "echo {x} 2> {y}.log", "ls -l {x} && rm -f {x}", "exec 3> {x}",
]


@pytest.mark.parametrize("template", ACCEPTED)
def test_placeholders_as_arguments_and_redirection_targets_are_accepted(template: str) -> None:
    assert shell_problem(template) is None


def test_dollar_brace_is_shell_syntax_and_quote_false_skips_the_check() -> None:
    assert shell_problem("echo ${x} '${y}' \"${z}\"") is None

    @workflow(name="raw")
    def raw():
        shell("a", command="true")
        shell("b", command="echo '{a}' $(( {a} )) # {a}", quote=False)

    assert raw.spec.steps[1].command == "echo '{a}' $(( {a} )) # {a}"


def test_a_command_that_does_not_parse_is_refused_only_with_placeholders() -> None:
    assert shell_problem("echo $(( 1 +") is None  # no placeholder: the shell reports it
    problem = shell_problem("echo {x} )")
    assert problem is not None and "does not parse" in problem


def test_a_placeholder_as_the_program_of_argv_is_a_definition_error() -> None:
    def body():
        shell("prog", command="echo /bin/echo")
        shell("run", argv=[f"{trigger.body}", "x"])

    message = definition_error(body, name="argv0")
    assert "step 'run'" in message and "argv[0]" in message and "program" in message

    @workflow(name="argv-ok")
    def argv_ok():
        shell("run", argv=["echo", trigger.body, "{trigger.event}"])

    assert argv_ok.spec.steps[0].argv == ("echo", "{trigger.body}", "{trigger.event}")


def test_the_error_is_raised_when_the_workflow_is_decorated() -> None:
    with pytest.raises(WorkflowDefinitionError, match=r"step 'bad'.*inside arithmetic"):
        @workflow(name="early")
        def early():
            shell("bad", command=f"echo $(( {trigger.body} ))")


def test_the_parser_is_not_imported_by_import_brain() -> None:
    """tree-sitter loads only when a command with placeholders is checked."""
    code = ("import sys, brain\n"
            "assert not [m for m in sys.modules if m.startswith('tree_sitter')]\n"
            "from brain import shell, workflow\n"
            "@workflow(name='w')\n"
            "def w():\n"
            "    shell('a', command='true')\n"
            "assert not [m for m in sys.modules if m.startswith('tree_sitter')]\n"
            "@workflow(name='v')\n"
            "def v():\n"
            "    shell('a', command='echo {trigger.body}')\n"
            "assert 'tree_sitter' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --- property: the accepted forms keep every value byte for byte --------------------------

FORMS = [
    ("printf '%s|' {x}", "{v}|"),
    ("printf '%s|' pre{x}post", "pre{v}post|"),
    ("printf '%s|' \"$(printf '%s' {x})\"", "{vstrip}|"),
    ("unset V; printf '%s|' ${V:-{x}}", "{v}|"),
    ("sh -c 'printf \"%s|\" \"$1\"' sh {x}", "{v}|"),
    ("printf '%s\\n' {x} > out; printf '%s|' \"$(cat out)\"", "{vstrip}|"),
    ("[ -n {x} ] && printf 'set|' || printf 'empty|'", "{nonempty}"),
]
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                max_size=30)
_TRICKY = st.sampled_from(["-v", "a[$(touch M)]", "$(echo INJECTED)", "`echo X`", "'", '"', "\\",
                           "\n", "-n", "--", "}", "${x}", "*", ";", "x=1", "EOF", "#", "", " "])


@needs_shells
@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(_TRICKY, _TEXT), max_size=4).map("".join))
def test_accepted_forms_pass_any_value_through_as_data_in_both_shells(value: str) -> None:
    import tempfile

    expected_values = {"v": value, "vstrip": value.rstrip("\n"),
                       "nonempty": "set|" if value else "empty|"}
    with tempfile.TemporaryDirectory() as where:
        for template, expected in FORMS:
            assert shell_problem(template) is None, template
            command = render(template, lambda ref: value if ref == Ref("step", "x") else "",
                             shell_quote=True)
            want = expected.format(**expected_values) if "{" in expected else expected
            for name in SHELLS:
                done = run_in(name, command, Path(where))
                assert done.stdout.decode("utf-8", "surrogateescape") == want, (name, template)


# --- found by the review after the parser landed --------------------------------------------

REVIEW_REPRODUCTIONS = [
    # Line continuations join what the check saw apart.
    ("echo price: $\\\n{trigger.body}", {"{trigger.body}": "\\'\";touch MARK;#"}),
    ("echo $(\\\n(echo {trigger.body}))", {"{trigger.body}": "$(touch MARK)"}),
    ("cat > run.sh <<EOF\nmake all \\\nEOF\necho {trigger.body}", {"{trigger.body}": "$(touch MARK)"}),
    ("echo {x}; test -v $\\\n_", {"{x}": "a[$(touch${IFS}MARK)]"}),
    # Blanks tree-sitter reads as spaces and the shells do not.
    ("sh -c 'echo hi'\v{trigger.body}", {"{trigger.body}": "$(touch MARK)"}),
    ("sh -c 'echo hi'\\ {trigger.body}", {"{trigger.body}": "$(touch MARK)"}),
    ("sh -c 'echo hi'\u2003{trigger.body}", {"{trigger.body}": "$(touch MARK)"}),
    ("echo start \\\r\n  {a} {trigger.body}", {"{a}": "eval", "{trigger.body}": "touch MARK"}),
    # Aliases and keywords made without writing them as commands.
    ("command alias say=eval\nsay {trigger.body}", {"{trigger.body}": "touch MARK"}),
    ("set -k; : PS4={trigger.body}; set -x; :", {"{trigger.body}": "$(touch MARK)"}),
    # Programs that run their program text or another program.
    ("echo a | sed s/a/{trigger.body}/", {"{trigger.body}": "b/;e touch MARK\n#"}),
    ("find . -maxdepth 0 -exec {x} {a} \\;", {"{x}": "touch", "{a}": "MARK"}),
    # Second round: continuations the shells do not join, forged markers, obfuscated
    # aliases and keywords, wrapper options, $'…', _ and brace expansion.
    ("echo start # see C:\\\ncat <<EOF\nHello {trigger.body}\nEOF",
     {"{trigger.body}": "$(touch MARK)"}),
    ("cat <<'E'\nx\\\nE\ncat <<F\nE\necho {trigger.body}\nF", {"{trigger.body}": "$(touch MARK)"}),
    ("echo _brain\\\nph0_\neval {trigger.body}", {"{trigger.body}": "touch MARK"}),
    ("command al''ias say=eval\nsay {trigger.body}", {"{trigger.body}": "touch MARK"}),
    ("BASH_ALIASES[say]=eval\nsay {trigger.body}", {"{trigger.body}": "touch MARK"}),
    ("env -u HOME {trigger.body} {a}", {"{trigger.body}": "touch", "{a}": "MARK"}),
    ("echo $'\\'' {trigger.body} \\'", {"{trigger.body}": ";touch MARK;#"}),
    ("echo {x}\nlet n=_", {"{x}": "a[$(touch MARK)]"}),
    ("echo {x}\necho ${HOME:_}", {"{x}": "a[$(touch MARK)]"}),
    ("s\\et -k\n: n={x}\necho $((n))", {"{x}": "a[$(touch MARK)]"}),
    ("sh {-c,} {trigger.body}", {"{trigger.body}": "touch MARK"}),
    # Third round: bash-only syntax dash reads differently, shell options' arguments, a
    # script read from a file the value names, word-split $(…) output for find.
    ('[[ a =~ x" ]]\necho {x}\n[[ a =~ x" ]]', {"{x}": "$(touch MARK)"}),
    ("((x <<EOF))\necho {x}\nEOF", {"{x}": "$(touch MARK)"}),
    ("echo $[x <<EOF]\necho {x}\nEOF", {"{x}": "$(touch MARK)"}),
    ("a[x<<EOF]=1\necho {x}\nEOF", {"{x}": "$(touch MARK)"}),
    ("v=a; echo ${v/x'/y}\necho {x}\necho ${v/x'/y}", {"{x}": "$(touch MARK)"}),
    ("printf '%s\\n' {a} > s.sh; sh < {x}", {"{a}": "touch MARK", "{x}": "s.sh"}),
    ("find /dev/null -name $(printf %s {x})", {"{x}": "x -o -exec touch MARK ;"}),
]


@pytest.mark.parametrize(("template", "values"), REVIEW_REPRODUCTIONS,
                         ids=[repr(r[0])[:40] for r in REVIEW_REPRODUCTIONS])
def test_review_reproductions_are_definition_errors(template: str, values: dict[str, str]) -> None:
    def body():
        shell("x", command="true")
        shell("a", command="true")
        shell("risky", command=template)

    message = definition_error(body, name="repro")
    assert message.startswith("workflow 'repro', step 'risky': "), message
    assert any(hint in message for hint in ("env=", "stdin=", "argv=", "bare", "write")), message


@needs_shells
@pytest.mark.parametrize(("template", "values"), REVIEW_REPRODUCTIONS,
                         ids=[repr(r[0])[:40] for r in REVIEW_REPRODUCTIONS])
def test_review_reproductions_really_run_the_value(template: str, values: dict[str, str],
                                                   tmp_path: Path) -> None:
    assert injects(template, values, tmp_path), template


@pytest.mark.parametrize("argv", [["sh", "-c", "{x}"], ["env", "{x}"], ["python3", "-c", "{x}"],
                                  ["find", ".", "-exec", "{x}", ";"],
                                  ["bash", "--rcfile", "{x}", "-i", "-c", "true"]])
def test_argv_follows_the_same_rules_as_a_command(argv: list[str]) -> None:
    def body():
        shell("x", command="true")
        shell("risky", argv=argv)

    assert "argv:" in definition_error(body, name="repro")


@pytest.mark.parametrize("template", [
    "echo a \\\n  {x}", "sed -e s/a/b/ -- {x}", "python3 -c 'import sys; print(sys.argv[1])' {x}",
    "find {x} -name '*.py'", "perl -e 'print' -- {x}", "set -e; echo {x}"])
def test_forms_near_the_review_findings_stay_accepted(template: str) -> None:
    assert shell_problem(template) is None


# --- issue 18: here-document end lines, here-strings feeding a shell, split output ----------

HEREDOC_END = "report header\nEOF\\\n"
ISSUE18_REPRODUCTIONS = [
    # dash does not end the here-document at `EOF\`: it swallows the rest, placeholder too.
    ("cat <<EOF\n" + HEREDOC_END + "\necho body: {trigger.body}", {"{trigger.body}": "$(touch MARK)"}),
    ("cat <<-EOF\n" + HEREDOC_END + "\necho body: {trigger.body}", {"{trigger.body}": "$(touch MARK)"}),
    ("cat <<EOF\n" + HEREDOC_END + "\n\necho body: {trigger.body}", {"{trigger.body}": "$(touch MARK)"}),
    ("cat <<EOF\n" + HEREDOC_END + "echo body: {trigger.body}", {"{trigger.body}": "$(touch MARK)"}),
    # A here-string feeding a shell or `source` runs the value under bash.
    ("sh <<< {x}", {"{x}": "touch MARK"}),
    ("bash <<< {x}", {"{x}": "touch MARK"}),
    ("sh -s <<< {x}", {"{x}": "touch MARK"}),
    (". /dev/stdin <<< {x}", {"{x}": "touch MARK"}),
    ("source /dev/stdin <<< {x}", {"{x}": "touch MARK"}),
    ("bash /dev/stdin <<< {x}", {"{x}": "touch MARK"}),
    ("python3 <<< {x}", {"{x}": "open('MARK', 'w')"}),
    ("{ sh; } <<< {x}", {"{x}": "touch MARK"}),
]


@pytest.mark.parametrize(("template", "values"), ISSUE18_REPRODUCTIONS,
                         ids=[repr(r[0])[:40] for r in ISSUE18_REPRODUCTIONS])
def test_issue18_reproductions_are_definition_errors(template: str, values: dict[str, str]) -> None:
    def body():
        shell("x", command="true")
        shell("risky", command=template)

    message = definition_error(body, name="repro")
    assert message.startswith("workflow 'repro', step 'risky': "), message
    assert any(hint in message for hint in ("env=", "stdin=", "argv=", "write", "feed")), message


@needs_shells
@pytest.mark.parametrize(("template", "values"),
                         [r for r in ISSUE18_REPRODUCTIONS if not r[0].startswith("{ sh")],
                         ids=[repr(r[0])[:40] for r in ISSUE18_REPRODUCTIONS
                              if not r[0].startswith("{ sh")])
def test_issue18_reproductions_really_run_the_value(template: str, values: dict[str, str],
                                                    tmp_path: Path) -> None:
    assert injects(template, values, tmp_path), template


@needs_shells
def test_the_shells_disagree_on_a_here_document_end_line_with_a_backslash(tmp_path: Path) -> None:
    """Why any here-document beside a line continuation is refused: bash joins ``EOF\\``
    with the next line and ends the here-document, dash reads on to the end."""
    script = "cat <<EOF\nhead\nEOF\\\n\necho after\n"
    out = {name: run_in(name, script, tmp_path).stdout for name in SHELLS}
    assert out["dash"] != out["bash --posix"], out
    assert shell_problem(script.replace("after", "{x}")) is not None


@needs_shells
def test_an_unquoted_command_substitution_splits_the_value_so_it_is_refused(tmp_path: Path) -> None:
    template = "mkdir -p $(basename -- {x})"
    problem = shell_problem(template)
    assert problem is not None and '"$(…)"' in problem
    # Rendered anyway, a value with a newline makes two folders; quoted, one.
    value = {"{x}": "one\ntwo"}
    run_in("dash", render(template, lambda ref: value[ref.text], shell_quote=True), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]
    quoted = 'mkdir -p "$(basename -- {x})"'
    assert shell_problem(quoted) is None
    where = tmp_path / "quoted"
    where.mkdir()
    run_in("dash", render(quoted, lambda ref: value[ref.text], shell_quote=True), where)
    assert [p.name for p in where.iterdir()] == ["one\ntwo"]


@pytest.mark.parametrize("template", [
    "cat <<EOF\nhello\nEOF\necho {x}", "cat <<'EOF'\n$HOME \\\nEOF", "cat <<< {x} | sh -c 'wc -c'",
    "sh -c 'cat' <<< {x}", "python3 job.py < {x}", "bash script.sh <<< {x}", "grep -c a <<< {x}",
    'echo "Hello, {x}!"', "echo 'Result: {x}'", 'echo "$(date): {x}" >> log',
    'mkdir -p "$(basename -- {x})"'])
def test_forms_near_the_issue18_findings_stay_accepted(template: str) -> None:
    assert shell_problem(template) is None, shell_problem(template)


# --- issue 18, the attack on the new rules ------------------------------------------------

ATTACK_REPRODUCTIONS = [
    # tree-sitter reads `$ #` as the variable $#; the shells read `$` and a comment.
    ("x=$ # cat {x}", {"{x}": "x\ntouch MARK\n"}),
    ('$ # ; echo "{x}"', {"{x}": "x\ntouch MARK\n"}),
    ("$\t# ; echo {x}", {"{x}": "x\ntouch MARK\n"}),
    # Interpreters that read options after program text given with -e/-f, and perl's loop.
    ("perl -e 'print 1' {x}", {"{x}": "-Mstrict;system(q(touch MARK))"}),
    ("perl -ne print {x}", {"{x}": "touch MARK|"}),
    ("perl -pe 1 -- {x}", {"{x}": "touch MARK|"}),
    ("printf 'BEGIN{}' > p.awk; gawk -f p.awk {x}", {"{x}": '-eBEGIN{system("touch MARK")}'}),
    ("node -p 1 {x}", {"{x}": '--eval=require("child_process").execSync("touch MARK")'}),
    # Programs missing from the table, and other names of listed ones.
    ("x86_64 {x} {y}", {"{x}": "touch", "{y}": "MARK"}),
    ("capsh -- -c {x}", {"{x}": "touch MARK"}),
    ("socat -u {x} -", {"{x}": "SYSTEM:touch MARK"}),
    ("perl5.36.0 -e {x}", {"{x}": "system(q(touch MARK))"}),
    ("vim.basic -u NONE -es -c {x} -c qa!", {"{x}": "!touch MARK"}),
    # A backslash before the placeholder hid the option it makes.
    ("printf x > f; tar -cf a.tar f; tar -xf a.tar \\-{x}", {"{x}": "-to-command=touch MARK"}),
    # `set -o keyword` written through a variable (bash).
    ("o=keyword; set -o $o; sh -c 'touch \"$X\"' sh {x}", {"{x}": "X=MARK"}),
    # The value piped into a program that runs its standard input.
    ("printf %s {x} | sh", {"{x}": "touch MARK"}),
    ("echo {x} | xargs -I% sh -c %", {"{x}": "touch MARK"}),
    ("printf '%s\\n' {x} | sqlite3", {"{x}": ".shell touch MARK"}),
]


@pytest.mark.parametrize(("template", "values"), ATTACK_REPRODUCTIONS,
                         ids=[repr(r[0])[:40] for r in ATTACK_REPRODUCTIONS])
def test_attack_reproductions_are_definition_errors(template: str, values: dict[str, str]) -> None:
    def body():
        shell("x", command="true")
        shell("y", command="true")
        shell("risky", command=template)

    message = definition_error(body, name="repro")
    assert message.startswith("workflow 'repro', step 'risky': "), message
    assert any(hint in message for hint in ("env=", "stdin=", "argv=", "write", "feed")), message


@needs_shells
@pytest.mark.parametrize(("template", "values"), ATTACK_REPRODUCTIONS,
                         ids=[repr(r[0])[:40] for r in ATTACK_REPRODUCTIONS])
def test_attack_reproductions_really_run_the_value(template: str, values: dict[str, str],
                                                   tmp_path: Path) -> None:
    for needed in ("perl", "gawk", "node", "capsh", "socat", "vim.basic", "perl5.36.0", "sqlite3"):
        if needed in template and shutil.which(needed) is None:
            pytest.skip(f"{needed} is not installed")
    assert injects(template, values, tmp_path), template


@pytest.mark.parametrize("argv", [["perl", "-e", "1", "{x}"], ["node", "-e", "1", "{x}"],
                                  ["deno", "run", "{x}"], ["x86_64", "{x}"]])
def test_argv_reproductions_of_the_attack_are_refused(argv: list[str]) -> None:
    from brain.shell_check import argv_problem

    assert argv_problem(argv) is not None


@pytest.mark.parametrize("template", [
    "perl -e 'print 1' -- {x}", "awk -f p.awk -- {x}", "awk '{print $1}' {x}",
    "node -e 1 -- {x}", "python3 -c 'import sys' {x}", "echo {x} | wc -c",
    "echo {x} | xargs rm --", "grep -c '^$' {x}", "grep {x} f | while read -r l; do echo \"$l\"; done",
    "echo \"cost: {x}\" | mail -s \"Report {x}\" ops@example.com"])
def test_forms_near_the_attack_findings_stay_accepted(template: str) -> None:
    assert shell_problem(template) is None, shell_problem(template)


# --- issue 18, the second attack -------------------------------------------------------------

SECOND_ATTACK = [
    ("sh 0<<< {x}", {"{x}": "touch MARK"}),
    ("printf '%s' {y} > e.sh; sh 0< {x}", {"{x}": "e.sh", "{y}": "touch MARK"}),
    ("echo {x} | python3 -m code", {"{x}": "open('MARK', 'w')"}),
    ("echo {x} | python3 -i -c 1", {"{x}": "open('MARK', 'w')"}),
    ("echo {x} | sh //dev/stdin", {"{x}": "touch MARK"}),
    ("echo {x} | sh /dev/./stdin", {"{x}": "touch MARK"}),
    ("f() { echo {x}; }; f | sh", {"{x}": "touch MARK"}),
    ("g() { sh; }; echo {x} | g", {"{x}": "touch MARK"}),
    ('echo {x} | "$0"', {"{x}": "touch MARK"}),
    ("echo {x} | xargs find", {"{x}": ". -maxdepth 0 -exec touch MARK ;"}),
    ('echo {x} | env -S"sh -s" true', {"{x}": "touch MARK"}),
    ("tar cIf {x} /dev/null /dev/null", {"{x}": "touch MARK"}),
    ("echo hi | split -l 1 {x}", {"{x}": "--filter=touch MARK"}),
    ("N=$(echo {x}); $N", {"{x}": "touch MARK"}),
]


@pytest.mark.parametrize(("template", "values"), SECOND_ATTACK,
                         ids=[repr(r[0])[:40] for r in SECOND_ATTACK])
def test_second_attack_reproductions_are_definition_errors(template: str,
                                                           values: dict[str, str]) -> None:
    assert shell_problem(template) is not None, template


@needs_shells
@pytest.mark.parametrize(("template", "values"), SECOND_ATTACK,
                         ids=[repr(r[0])[:40] for r in SECOND_ATTACK])
def test_second_attack_reproductions_really_run_the_value(template: str, values: dict[str, str],
                                                          tmp_path: Path) -> None:
    assert injects(template, values, tmp_path), template


@pytest.mark.parametrize("template", [
    "git commit -m {x}", "git archive -o {x} HEAD", "git merge -m {x} main", "git checkout {x}",
    "tar czf {x} dir", 'pip install --upgrade "mytool=={x}"', "echo {x} | python3 -m json.tool",
    "echo {x} | xargs -n1 curl -fsSO", "python3 job.py < {x}"])
def test_forms_near_the_second_attack_stay_accepted(template: str) -> None:
    assert shell_problem(template) is None, shell_problem(template)
