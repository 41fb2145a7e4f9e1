"""What reads a step's standard input: ``stdin=`` holding a placeholder may feed only
commands that read it as data (``cat``, ``wc``, ``jq .``, ``python3 job.py``), never a
shell or an interpreter that takes its standard input as its program (``sh``,
``python3 -``, ``env node``, ``cat | sh``), nor the script a shell runs with ``-c``
(``bash -c 'cat | sh'``), which inherits that input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from brain.shell_check.programs import Program, program_of
from brain.shell_check.syntax import (
    _command_words,
    _first_error,
    _join_continuations,
    _literal,
    _parser,
    _Refused,
    _walk,
)
from brain.shell_check.template import _odd_blank

if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Callable

    from tree_sitter import Node

#: How deep ``sh -c 'sh -c …'`` scripts are looked into before the check gives up.
_MAX_DEPTH = 8


class _StepInput:
    """The checks of every command that may read a given standard input (mixed into the
    argument checks, whose :meth:`check_reader` judges one command)."""

    if TYPE_CHECKING:  # pragma: no cover - provided by the class this is mixed into
        hostile: Callable[[Node], bool]
        check_reader: Callable[[str, list[Node], str], None]
        stdin_refusal: Callable[[str, str], _Refused]

    #: How many ``-c`` scripts deep the check is.
    script_depth: int = 0

    def check_readers_in(self, root: Node, how: str) -> None:
        """Every command under ``root`` (in a pipeline, a ``$(…)``, a function…) may read
        the input ``how`` names: each must read it as data, and be named literally."""
        for node in _walk(root):
            if node.type != "command":
                continue
            name_node = node.child_by_field_name("name")
            name = _literal(name_node) if name_node is not None else None
            if name_node is None or name is None or self.hostile(name_node):
                raise self.stdin_refusal(how, "a command the check cannot name")
            base = name.rsplit("/", 1)[-1]
            row = program_of(base)
            if row is not None and row.runs == "names":
                continue  # read line: the text lands in a variable, data
            self.check_reader(base, _command_words(node), how)

    def check_shell_script(self, name: str, row: Program, words: list[Node], how: str) -> None:
        """``sh -c 'SCRIPT'``: the script's commands inherit the shell's standard input
        (``sh -c 'cat | sh'``), so they are checked in turn."""
        script = _c_script(row, words)
        if script is None:
            return  # a script file: what it does with its input is its author's
        if self.script_depth >= _MAX_DEPTH:
            raise _Refused(f"{how} that {name} passes to a script nested too deeply to be "
                           f"checked")
        problem = script_problem(script)
        if problem is not None:
            raise _Refused(f"{how} that {name} passes to its -c script, which {problem}")
        self.script_depth += 1
        try:
            self.check_readers_in(_parser().parse(_join_continuations(script).encode())
                                  .root_node, how)
        finally:
            self.script_depth -= 1


def script_problem(script: str) -> str | None:
    """Why the commands of shell ``script`` cannot be told apart reliably, or ``None``."""
    blank = _odd_blank(script)
    if blank is not None:
        return f"{blank}, which the shells and the check could read differently"
    root = _parser().parse(_join_continuations(script).encode()).root_node
    if root.has_error:
        bad = _first_error(root)
        line = bad.start_point[0] + 1 if bad is not None else 1
        return f"does not parse as a shell script (line {line}), so it cannot be checked"
    return None


def _c_script(row: Program, words: list[Node]) -> str | None:
    """The literal script of ``sh [options] -c [options] SCRIPT``, or ``None`` for a
    script file (``sh job.sh``)."""
    given = False
    i = 0
    while i < len(words):
        lit = _literal(words[i]) or ""
        taking = row.options_taking_next(lit)  # -o pipefail, -eo pipefail
        if lit.startswith(("-", "+")) and not lit.startswith("--") and "c" in lit[1:]:
            given = True
        if taking:
            i += 1 + len(taking)
            continue
        if lit == "--" or not lit.startswith(("-", "+")):
            if lit == "--":
                i += 1
            if given and i < len(words):
                return _literal(words[i])
            return None
        i += 1
    return None
