"""``shell(stdin=...)`` holding a placeholder (SPEC §3, shell safety): a value never
becomes code, so the program that reads the step's standard input must read it as data.
A shell or an interpreter reading its program there (``sh``, ``python3 -``, ``env node``,
``cat | sh``, ``bash -c 'perl'``) is a definition error, for every kind of placeholder;
programs that read data (``cat``, ``wc``, ``jq``, ``python3 job.py``) get the value byte
for byte, in real subprocesses.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brain import WorkflowDefinitionError, shell, trigger, workflow
from brain.shell_check import stdin_problem

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

#: Programs that read their standard input as their program, as argv words. The command=
#: form is the same words shell-quoted.
CODE_READERS: list[list[str]] = [
    ["sh"], ["bash"], ["dash"], ["zsh"], ["ksh"], ["fish"], ["/bin/sh"], ["bash", "-s"],
    ["sh", "-s", "--", "a"], ["bash", "-"], ["sh", "/dev/stdin"], ["bash", "-x"],
    ["busybox", "sh"], ["python3"], ["python3", "-"], ["python"], ["python3.12", "-u"],
    ["python3", "-i", "job.py"], ["pypy3"], ["node"], ["node", "-"], ["perl"], ["perl", "-w"],
    ["ruby"], ["php"], ["lua"], ["Rscript", "-"], ["osascript"], ["psql"], ["sqlite3", "x.db"],
    ["mysql"], ["awk", "-f", "-"], ["sed", "-f", "/dev/stdin"], ["irb"],
    ["env", "sh"], ["env", "-i", "python3"], ["/usr/bin/env", "PATH=/bin", "bash"],
    ["sudo", "bash"], ["nice", "-n", "5", "python3"], ["timeout", "5", "node"],
    ["stdbuf", "-oL", "perl"], ["nohup", "sh"], ["xargs", "sh", "-c", "x"], ["xargs", "python3"],
    ["sh", "-c", "cat | sh"], ["bash", "-c", "python3 -"], ["sh", "-ec", "env perl"],
    ["bash", "-c", "-e", "sh"], ["sh", "-c", "sh -c 'sh -c \"ruby\"'"],
]

#: The same, only writable as a shell command.
COMMAND_ONLY = ["cat | sh", "tr a b | bash -s", "echo start; python3 -", "f() { node; }; f",
                "grep -v '^#' | env sh", "x=$(cat); echo \"$x\" | sh", "$PROGRAM",
                "if true; then sudo -u nobody sh; fi", "cat |\\\nsh", "s\\\nh"]

#: Programs that read their standard input as data.
DATA_READERS: list[list[str]] = [
    ["cat"], ["wc", "-c"], ["tr", "a-z", "A-Z"], ["sort"], ["head", "-c", "100000"],
    ["sh", "-c", "cat"], ["bash", "-c", "while IFS= read -r l; do printf '%s\\n' \"$l\"; done"],
    ["env", "LC_ALL=C", "cat"], ["timeout", "5", "cat"], ["grep", "-c", ""],
]

KINDS = ["params", "trigger", "step"]


def define(kind: str, program: list[str] | str, stdin_prefix: str = "") -> Callable[..., Any]:
    """A workflow feeding a ``kind`` placeholder through stdin= to ``program`` (argv words,
    or a command text)."""
    form: dict[str, Any] = {"command": program} if isinstance(program, str) \
        else {"argv": program}

    @workflow
    def feeds(note: str = "x") -> Any:
        value: Any = {"params": note, "trigger": trigger.body}.get(kind)
        if kind == "step":
            value = shell("made", argv=["printf", "%s", f"{note}"])
        return shell("fed", stdin=f"{stdin_prefix}{value}", **form)

    return feeds


@settings(max_examples=300, deadline=None)
@given(program=st.sampled_from(CODE_READERS), kind=st.sampled_from(KINDS),
       as_command=st.booleans())
def test_a_placeholder_fed_to_a_program_reader_is_refused(program: list[str], kind: str,
                                                           as_command: bool) -> None:
    written: list[str] | str = " ".join(map(_quote, program)) if as_command else program
    with pytest.raises(WorkflowDefinitionError) as caught:
        define(kind, written)
    message = str(caught.value)
    assert "stdin=" in message and "env=" in message, message
    assert "{" in message and "}" in message  # the placeholder is named


@settings(max_examples=100, deadline=None)
@given(command=st.sampled_from(COMMAND_ONLY), kind=st.sampled_from(KINDS))
def test_a_command_whose_script_reads_input_as_program_is_refused(command: str,
                                                                  kind: str) -> None:
    with pytest.raises(WorkflowDefinitionError, match=r"stdin="):
        define(kind, command)


def test_the_message_names_the_placeholder_and_what_to_do() -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        define("params", ["sh"])
    message = str(caught.value)
    assert "step 'fed'" in message and "{params.note}" in message, message
    assert "sh reads from standard input" in message, message
    assert "env=" in message and "script file" in message, message


def test_the_attack_is_refused_before_anything_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for program in (["sh"], ["python3"], "python3 -", "cat | sh"):
        with pytest.raises(WorkflowDefinitionError):
            define("params", program)
    assert not marker.exists()


def test_stdin_without_placeholders_is_the_author_s_own_code() -> None:
    @workflow
    def own() -> Any:
        return shell("run", argv=["sh"], stdin="printf '%s' ok")

    result = own()
    assert result.status == "succeeded", result.error
    assert result.output == "ok"


def test_a_here_string_into_a_shell_c_script_that_runs_its_input_is_refused() -> None:
    """The same rule for ``<<<``: a ``-c`` script's commands inherit the shell's input."""
    with pytest.raises(WorkflowDefinitionError, match="sh reads from standard input"):
        @workflow
        def here(note: str = "x") -> None:
            shell("a", command="bash -c 'cat | sh' <<< {params.note}")

    @workflow
    def here_data(note: str = "x") -> None:
        shell("a", command="bash -c 'cat | wc -c' <<< {params.note}")


def test_quote_false_does_not_lift_the_stdin_rule() -> None:
    with pytest.raises(WorkflowDefinitionError, match="stdin="):
        @workflow
        def raw(note: str = "x") -> None:
            shell("a", command="sh", stdin=f"{note}", quote=False)


# --- data readers: accepted, and the value arrives exactly ------------------------------

PIECES = ["'", '"', "\\", "$(touch pwned)", "`id`", "$HOME", "\n", "\t", ";", "|", "&",
          "-rf", "{x}", "{params.note}", "é", "日本", "😀", "import os; os.system('id')"]
HOSTILE = st.lists(st.one_of(st.sampled_from(PIECES),
                             st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                            blacklist_characters="\x00"),
                                     max_size=12)),
                   max_size=6).map("".join)


@pytest.mark.parametrize("program", DATA_READERS, ids=" ".join)
def test_a_data_reader_is_accepted(program: list[str]) -> None:
    assert stdin_problem(program, "{params.note}") is None
    assert stdin_problem(" ".join(map(_quote, program)), "{params.note}") is None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(value=HOSTILE, kind=st.sampled_from(KINDS), as_command=st.booleans())
def test_cat_receives_the_value_exactly(tmp_path: Path, value: str, kind: str,
                                        as_command: bool) -> None:
    feeds = define(kind, "cat" if as_command else ["cat"], stdin_prefix="<")
    result = feeds(note=value, trigger={"body": value})
    assert result.status == "succeeded", result.error
    # A step's output loses its trailing newlines (the made step's too).
    expected = "<" + (value.rstrip("\n") if kind == "step" else value)
    assert result.steps["fed"].inputs["stdin"] == expected
    assert result.output == expected.rstrip("\n")
    assert not (tmp_path / "pwned").exists()


def test_jq_wc_and_a_python_script_read_the_value_as_data(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("import sys\nsys.stdout.write(repr(sys.stdin.read()))\n")
    value = "__import__('os').system('touch pwned')\n$(touch pwned)"

    @workflow
    def readers(note: str = "x") -> Any:
        return {
            "jq": shell("jq", argv=["jq", "-r", "."], stdin=f"{note}"),
            "wc": shell("wc", command="wc -c", stdin=f"{note}"),
            "py": shell("py", argv=[sys.executable, str(script)], stdin=f"{note}"),
            "sh": shell("sh", argv=["sh", "-c", "cat | tr a A"], stdin=f"{note}"),
        }

    # jq reads JSON: the parameter text is written in as is, here a JSON string.
    result = readers(note=json.dumps(value))
    assert result.status == "succeeded", result.error
    out = result.output
    assert out["jq"] == value
    assert out["wc"].strip() == str(len(json.dumps(value).encode()))
    assert out["py"] == repr(json.dumps(value))
    assert out["sh"] == json.dumps(value).replace("a", "A")
    assert not (tmp_path / "pwned").exists()
    assert not Path("pwned").exists()


def _quote(word: str) -> str:
    import shlex

    return shlex.quote(word)
