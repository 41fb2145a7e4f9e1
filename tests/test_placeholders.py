"""The placeholder engine (SPEC §3): grammar, escapes, one-pass rendering and shell safety.

``brain.placeholders`` is pure text processing; the last tests prove the shell
quoting end to end with a real ``/bin/sh`` and a real workflow run.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import brain
from brain import PlaceholderError, shell, trigger, workflow
from brain.placeholders import Ref, escape, has_placeholders, parse, refs, render
from brain.shell_check import shell_problem


def values(mapping: dict[str, str]) -> Callable[[Ref], str]:
    """A ``lookup`` for render(): step refs by name, anything else by its placeholder text."""

    def lookup(ref: Ref) -> str:
        return mapping[ref.name] if ref.kind == "step" else mapping[ref.text]

    return lookup


def no_lookup(ref: Ref) -> str:
    raise AssertionError(f"render() looked up {ref.text} in text that has no placeholder")


def run_sh(command: str) -> bytes:
    """Run ``command`` through /bin/sh as the shell executor does; return stdout bytes."""
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, check=True, timeout=10)
    return done.stdout


# --- grammar ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{fetch}", Ref("step", "fetch")),
        ("{step_2-b}", Ref("step", "step_2-b")),
        ("{previous.fetch}", Ref("previous", "fetch")),
        ("{trigger.event}", Ref("trigger", "event")),
        ("{trigger.body}", Ref("trigger", "body")),
        ("{trigger.path}", Ref("trigger", "path")),
        ("{trigger.headers.x-github-event}", Ref("trigger", "headers.x-github-event")),
        ("{trigger.headers.X-GitHub-Event}", Ref("trigger", "headers.x-github-event")),
        ("{trigger.headers.X_TOKEN}", Ref("trigger", "headers.x_token")),
    ],
)
def test_every_form_of_the_grammar_is_one_placeholder(text: str, expected: Ref) -> None:
    assert parse(text) == (expected,)
    assert refs(text) == [expected]
    assert has_placeholders(text)


def test_header_names_are_case_insensitive() -> None:
    spellings = ["{trigger.headers.Content-Type}", "{trigger.headers.content-type}",
                 "{trigger.headers.CONTENT-TYPE}"]
    assert {refs(s)[0] for s in spellings} == {Ref("trigger", "headers.content-type")}


def test_placeholders_mix_with_literal_text_in_order() -> None:
    assert parse("cp {src} /tmp/{previous.dst}.{trigger.event}!") == (
        "cp ", Ref("step", "src"), " /tmp/", Ref("previous", "dst"), ".",
        Ref("trigger", "event"), "!")


def test_adjacent_placeholders_are_separate() -> None:
    assert parse("{a}{b}") == (Ref("step", "a"), Ref("step", "b"))


def test_ref_text_is_the_placeholder_as_written_in_canonical_form() -> None:
    assert [r.text for r in refs("{a} {previous.a} {trigger.body} {trigger.headers.X-Id}")] == [
        "{a}", "{previous.a}", "{trigger.body}", "{trigger.headers.x-id}"]


@pytest.mark.parametrize(
    "text",
    [
        "awk '{print $2}'",
        "${HOME}",
        "echo ${HOME}/${previous.x}",
        '{"a": {"b": 1}}',
        '{"a":{"b":{"c":[1,2]}}}',
        "{not a placeholder}",
        "{ x }",
        "{}",
        "{a.b}",
        "{previous.}",
        "{previous.a.b}",
        "{trigger.unknown}",
        "{trigger.body.x}",
        "{trigger.headers.}",
        "{trigger.headers.a.b}",
        "find . -exec rm {} \\;",
        "f() { echo hi; }",
        "{{not a placeholder}}",
    ],
)
def test_text_matching_no_form_is_left_exactly_as_written(text: str) -> None:
    assert parse(text) == (text,)
    assert refs(text) == []
    assert not has_placeholders(text)
    assert render(text, no_lookup) == text
    assert render(text, no_lookup, shell_quote=True) == text


def test_braces_directly_after_dollar_are_shell_syntax() -> None:
    assert refs("echo ${fetch} ${previous.fetch} ${trigger.body}") == []
    assert refs("echo $ {fetch}") == [Ref("step", "fetch")]


def test_empty_text_has_no_parts() -> None:
    assert parse("") == ()
    assert render("", no_lookup) == ""


# --- the {{X}} escape ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "literal"),
    [
        ("{{fetch}}", "{fetch}"),
        ("{{previous.fetch}}", "{previous.fetch}"),
        ("{{trigger.body}}", "{trigger.body}"),
        ("{{trigger.headers.X-Id}}", "{trigger.headers.X-Id}"),
        ("say {{hi}} twice {{hi}}", "say {hi} twice {hi}"),
    ],
)
def test_double_braces_escape_a_placeholder(text: str, literal: str) -> None:
    assert not has_placeholders(text)
    assert refs(text) == []
    assert render(text, no_lookup) == literal


def test_escape_and_placeholder_side_by_side() -> None:
    text = "literal {{x}}, value {x}"
    assert refs(text) == [Ref("step", "x")]
    assert render(text, values({"x": "X"})) == "literal {x}, value X"


def test_double_braces_around_non_placeholder_text_stay_double() -> None:
    assert render("{{not a placeholder}} {{a.b}}", no_lookup) == "{{not a placeholder}} {{a.b}}"


_BRACED = st.lists(st.sampled_from(["{", "}", "{{", "}}", "$", "x", "a.b", "previous.", "params.",
                                     "trigger.body", "each.", "-", " ", "'", "é"]),
                   max_size=16).map("".join)


@settings(max_examples=300, deadline=None)
@given(_BRACED)
def test_escaped_text_reads_back_as_the_same_literal(text: str) -> None:
    """``escape`` of any text parses back to that text, with no placeholder in it."""
    parts = parse(escape(text))
    assert not any(isinstance(p, Ref) for p in parts)
    assert "".join(p for p in parts if isinstance(p, str)) == text


def test_an_escaped_placeholder_in_argv_is_a_literal_not_a_refused_script(
        tmp_path: Path) -> None:
    """``argv=['sh', '-c', '... {{x}} ...', 'sh', '{x}']``: the script holds the literal
    text ``{x}``, not a value, so it is accepted (and runs), where ``{x}`` itself is
    refused."""

    @workflow(name="literal_script")
    def literal_script() -> None:
        x = shell("x", argv=["printf", "hi"])
        shell("use", argv=["sh", "-c", 'printf "%s|%s" "{{x}}" "$1"', "sh", x])

    result = literal_script.run(store=f"sqlite:///{tmp_path}/l.db")
    assert result.succeeded, result.error
    assert result.steps["use"].output == "{x}|hi"
    with pytest.raises(brain.WorkflowDefinitionError, match="script of sh"):
        @workflow(name="value_script")
        def value_script() -> None:
            x = shell("x", argv=["printf", "hi"])
            shell("use", argv=["sh", "-c", 'printf "%s" "{x}"', "sh"], after=[x])


# --- rendering ---------------------------------------------------------------------------------


def test_render_fills_every_kind_of_placeholder() -> None:
    lookup = values({"fetch": "F", "{previous.fetch}": "P", "{trigger.event}": "manual",
                     "{trigger.body}": "B", "{trigger.path}": "/x", "{trigger.headers.x-id}": "7"})
    text = "{fetch}|{previous.fetch}|{trigger.event}|{trigger.body}|{trigger.path}|{trigger.headers.X-Id}"
    assert render(text, lookup) == "F|P|manual|B|/x|7"


def test_render_is_one_pass_inserted_values_are_never_scanned() -> None:
    lookup = values({"a": "{b} and {{b}} and {trigger.body}", "b": "B"})
    assert render("{a} / {b}", lookup) == "{b} and {{b}} and {trigger.body} / B"


def test_render_without_shell_quote_inserts_values_raw() -> None:
    assert render("echo {x}", values({"x": "a 'b' $c"})) == "echo a 'b' $c"


def test_render_with_shell_quote_makes_each_value_one_word() -> None:
    rendered = render("printf '<%s>' {a} {b} {c}",
                      values({"a": "two words", "b": "", "c": "it's; $(echo no)"}), shell_quote=True)
    assert run_sh(rendered) == b"<two words><><it's; $(echo no)>"


def test_shell_quote_leaves_the_literal_text_alone() -> None:
    rendered = render("awk '{print $1}' {f} | tr a b", values({"f": "my file"}), shell_quote=True)
    assert rendered.startswith("awk '{print $1}' ")
    assert rendered.endswith(" | tr a b")


@pytest.mark.parametrize("shell_quote", [False, True])
def test_a_nul_byte_in_a_value_is_refused(shell_quote: bool) -> None:
    with pytest.raises(PlaceholderError, match=r"\{trigger\.body\}"):
        render("echo {trigger.body}", values({"{trigger.body}": "a\x00b"}), shell_quote=shell_quote)


def test_placeholder_error_is_public_and_a_brain_error() -> None:
    assert brain.PlaceholderError is PlaceholderError
    assert issubclass(PlaceholderError, brain.BrainError)


def test_a_nul_byte_in_a_value_fails_the_step_at_run_time() -> None:
    @workflow(name="nul-body")
    def nul_body():
        shell("echo", command="printf '%s' {trigger.body}")

    result = nul_body(trigger={"body": "before\x00after"})
    assert result.status == "failed"
    assert result.steps["echo"].status == "failed"
    assert "NUL" in (result.steps["echo"].error or "")


# --- shell safety: where a placeholder may stand in a command -------------------------------


@pytest.mark.parametrize(
    ("command", "context"),
    [
        ('echo "${VAR:-{x}}"', "quotes within ${…}"),
        ("echo ${VAR:-'{x}'}", "quotes within ${…}"),
        ("echo $'{x}'", "$'"),
        ('echo $"{x}"', '$"'),
        ("echo `cat {x}`", "backticks"),
        ('echo "`cat {x}`"', "backticks"),
        ("cat <<EOF\n{x}\nEOF", "here-document"),
        ("cat <<EOF\nhello {x} there\nEOF", "here-document"),
        ("cat <<-EOF\n\t{x}\n\tEOF", "here-document"),
        ("cat <<'EOF'\n{x}\nEOF", "here-document"),
        ('cat <<"EOF"\n{x}\nEOF', "here-document"),
        ("cat <<EOF\n$(echo {x})\nEOF", "here-document"),
        ("cat <<EOF\n\"{x}\"\nEOF", "here-document"),
        ("cat <<A\nfirst\nA\ncat <<B\n{x}\nB", "here-document"),
    ],
)
def test_placeholder_inside_here_document_or_odd_quotes_is_a_problem(command: str,
                                                                     context: str) -> None:
    problem = shell_problem(command)
    assert problem is not None
    assert context in problem
    assert refs(command)[0].text in problem


@pytest.mark.parametrize(
    ("command", "quoting"),
    [
        ("echo '{x}'", ("single",)),
        ("echo 'line one\n{x}\n'", ("single",)),
        ('echo "{x}"', ("double",)),
        ('echo "hello {x}!"', ("double",)),
        ('echo "$(printf "%s" "{x}")"', ("double",)),
        ("cat <<< '{x}'", ("single",)),
        ("echo '{previous.x}' {x}", ("single", "bare")),
        ('echo "{trigger.headers.X-Id}"', ("double",)),
        ("""echo "it's {x}" '"{y}"' {z}""", ("double", "single", "bare")),
        ('echo "$(echo \'{x}\')"', ("single",)),
        ('echo "$(echo {x})"', ("bare",)),
    ],
)
def test_placeholder_inside_quotes_is_escaped_for_its_quotes(
        command: str, quoting: tuple[str, ...]) -> None:
    from brain.shell_check import _check

    assert _check(command) == (None, quoting)


@pytest.mark.parametrize(
    "command",
    [
        "echo {x}",
        "grep -e {x} -- {y} | wc -l",
        'echo "$(cat {x})"',
        'echo "$(echo "$(cat {x})")"',
        "cat <<< {x}",
        "echo ${VAR:-{x}}",
        "awk '{print $2}' {x}",
        "echo 'quoted' {x} \"also quoted\"",
        "echo \\'{x}\\'",
        "echo '{{x}}' \"{{x}}\" {x}",
        "cat <<EOF\nliteral {{x}}\nEOF",
        "cat <<EOF\nhello\nEOF\necho {x}",
        "cat <<EOF > {x}\nbody\nEOF",
        "echo no placeholders at all 'here'",
    ],
)
def test_placeholder_standing_as_a_bare_word_is_fine(command: str) -> None:
    assert shell_problem(command) is None


def test_bare_placeholders_from_allowed_contexts_really_run_as_data() -> None:
    """The allowed contexts are allowed because the quoted value stays data there."""
    lookup = values({"x": "a b; echo INJECTED"})
    for command, expected in [
        ("printf '%s' {x}", b"a b; echo INJECTED"),
        ('printf "%s" "$(printf %s {x})"', b"a b; echo INJECTED"),
        ("unset V; printf '%s' ${V:-{x}}", b"a b; echo INJECTED"),
    ]:
        assert run_sh(render(command, lookup, shell_quote=True)) == expected, command


# --- property: any text survives the trip through the shell byte for byte ---------------------

_TRICKY = [";", "$(echo INJECTED)", "`echo INJECTED`", "'", '"', "\\", "\n", "-n", "--", "-e",
           "$HOME", "${HOME}", "{x}", "{trigger.body}", "*", "~", "&", "|", ">", "#", "!", "%s",
           "\t", " ", "é", "日本語", "🙂", "\u202e", "\r"]
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
payloads = st.lists(st.one_of(st.sampled_from(_TRICKY), _TEXT), max_size=12).map("".join)


@settings(max_examples=200, deadline=None)
@given(payloads)
@example("; echo INJECTED")
@example("'; echo INJECTED; '")
@example("$(echo INJECTED)")
@example("-n")
@example("")
@example("trailing newlines\n\n")
def test_any_text_is_printed_back_byte_identical_by_sh(text: str) -> None:
    command = render("printf '%s' {x}", values({"x": text}), shell_quote=True)
    assert run_sh(command) == text.encode()


_QUOTED_FORMS = [
    ("printf '%s|' \"{x}\"", "{v}|"),
    ("printf '%s|' \"pre {x} post\"", "pre {v} post|"),
    ("printf '%s|' '{x}'", "{v}|"),
    ("printf '%s|' 'it''s {x}'\"!\"", "its {v}!|"),
    ("printf '%s|' \"$(printf '%s' \"{x}\")\"", "{vstrip}|"),
    ("printf '%s|' \"$(printf '%s' '{x}')\"", "{vstrip}|"),
    ("printf '%s|' \"a {x} b\" '{x}' {x}", "a {v} b|{v}|{v}|"),
]


@settings(max_examples=120, deadline=None)
@given(payloads)
@example("\\")
@example("'\"$(echo INJECTED)`echo INJECTED`\\\n")
def test_values_inside_quotes_come_back_byte_identical_from_dash_and_bash(text: str) -> None:
    """Inside "…" and '…' each value is escaped for its quotes: it stays the same text."""
    from brain.shell_check import render_command

    for template, expected in _QUOTED_FORMS:
        want = expected.replace("{vstrip}", text.rstrip("\n")).replace("{v}", text)
        command = render_command(template, values({"x": text}))
        for shell_argv in (["dash", "-c"], ["bash", "--posix", "-c"]):
            done = subprocess.run([*shell_argv, command], capture_output=True, timeout=10)
            assert done.stdout == want.encode(), (shell_argv, template, command)


@settings(max_examples=25, deadline=None)
@given(payloads.map(lambda s: s.rstrip("\n")))
@example("; echo INJECTED `echo INJECTED` $(echo INJECTED) 'q' \"dq\"\nline two")
def test_any_trigger_body_comes_back_byte_identical_from_a_workflow(text: str) -> None:
    @workflow(name="echo-body")
    def echo_body():
        shell("echo", command="printf '%s' {trigger.body}")

    result = echo_body(trigger={"body": text})
    assert result.succeeded, result.error
    assert result.steps["echo"].output == text


def test_trigger_fields_given_as_nodes_render_like_the_written_placeholder() -> None:
    """``trigger.body`` in a command and the text ``{trigger.body}`` are the same step."""

    @workflow(name="node-vs-text")
    def node_vs_text():
        shell("node", command=f"printf '%s' {trigger.body}")
        shell("text", command="printf '%s' {trigger.body}")

    steps = node_vs_text.spec.steps
    assert steps[0].command == steps[1].command == "printf '%s' {trigger.body}"
    result = node_vs_text(trigger={"body": "x'; echo INJECTED"})
    assert result.steps["node"].output == result.steps["text"].output == "x'; echo INJECTED"


def test_dollar_single_quotes_anywhere_are_refused_dash_reads_them_differently() -> None:
    problem = shell_problem("echo $'it\\'s' {x}")
    assert problem is not None and "$'" in problem
