"""Where a tool's subcommand stands, and what a placeholder may do around it (``npm``,
``uv``, ``docker``, ``git`` …, the ``subcommand`` and ``options`` rows of
:mod:`brain.shell_check.programs`).

The subcommand is the first word that is neither an option nor an option's argument,
and only a tool knows which of its options take an argument: ``npm --userconfig run
exec -- {x}`` runs ``exec`` (``run`` is the file ``--userconfig`` names). The rows list
the global options known to take an argument and those known to take none; for any
other option both readings are kept, so the subcommand may stand at either word. A
placeholder is accepted after a subcommand that runs a program (``uv run script.py
{x}``, ``npm run build -- {x}``) only where that subcommand is certain.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from brain.shell_check.syntax import _literal, _Refused, _text

if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Callable

    from tree_sitter import Node

    from brain.shell_check.programs import Program

# A requirement whose package is written out, then a version operator: "tool=={v}".
_PINNED = re.compile(r"""["']?[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[A-Za-z0-9,._-]*\])?"""
                     r"(?:===|==|>=|<=|~=|!=|<|>)")


def _takes(row: Program, option: str) -> bool | None:
    """Whether global ``option`` takes the next word as its argument: ``True``, ``False``,
    or ``None`` when the row does not know (it may)."""
    if option.startswith("--") and "=" in option:
        return False  # --userconfig=FILE: the value is glued
    if option in row.global_options or option in row.arg_options:
        return True
    if option in row.global_flags or option.startswith(("--no-", "+")):
        return False  # a negation takes no value; cargo +nightly picks a toolchain
    short = option[:2]
    if not option.startswith("--") and len(option) > 2 and short in row.global_options:
        return False  # -Cdir: the value is glued
    return None


def subcommand_positions(row: Program, words: list[Node]) -> set[int]:
    """The indices of ``words`` where the subcommand may stand: each reading of the
    options before it, where an option the row does not know may or may not take the next
    word. A word that is not literal stops the options (it may be the subcommand).

    Empty when every word may be an option or an option's argument."""
    positions: set[int] = set()
    todo, seen = [0], set()
    while todo:
        i = todo.pop()
        if i >= len(words) or i in seen:
            continue
        seen.add(i)
        lit = _literal(words[i])
        if lit == "--":
            if i + 1 < len(words):
                positions.add(i + 1)
            continue
        if lit is None or not (lit.startswith(("-", "+")) and len(lit) > 1):
            positions.add(i)
            continue
        takes = _takes(row, lit)
        if takes is not True:
            todo.append(i + 1)
        if takes is not False:
            todo.append(i + 2)
    return positions


def subcommand_of(row: Program, words: list[Node]) -> str | None:
    """The subcommand of an ``options`` row's command when it is certain (``git -C dir
    checkout`` → ``checkout``), else ``None`` (``git --attr-source X checkout`` on a git
    the row does not know that option of)."""
    positions = subcommand_positions(row, words)
    if len(positions) != 1:
        return None
    return _literal(words[positions.pop()])


class _Subcommands:
    """The checks of a ``subcommand`` row's words (mixed into the argument checks)."""

    if TYPE_CHECKING:  # pragma: no cover - provided by the class this is mixed into
        hostile: Callable[[Node], bool]
        check_wrapper: Callable[[str, Program, list[Node]], None]

    def running_at(self, row: Program, words: list[Node]) -> tuple[int, str] | None:
        """The first word of ``words`` that is (or, by the row's own reading, names) one of
        the row's program-running subcommands, with its index; ``None`` when none is.
        Anywhere, not only where the subcommand stands: ``docker compose run``,
        ``gcloud compute ssh`` run a program too."""
        for i, word in enumerate(words):
            lit = _literal(word)
            if lit is None:
                continue
            name = row.canonical(lit) if row.canonical is not None else lit
            if name in row.subcommands:
                return i, name
        return None

    def certain_running(self, row: Program, words: list[Node]) -> tuple[int, str] | None:
        """:meth:`running_at`, when that word is certainly the subcommand."""
        found = self.running_at(row, words)
        if found is None or subcommand_positions(row, words) != {found[0]}:
            return None
        return found

    def check_subcommand(self, name: str, row: Program, words: list[Node]) -> None:
        """``uv run``, ``npm exec``, ``docker compose run``…: where a subcommand that runs a
        program appears anywhere, no placeholder may; nor may one stand where it could be
        the subcommand, or an option or option's argument before it (``npm --prefix . exec``:
        ``--prefix`` takes ``.``). The exceptions, ``uv run script.py {x}`` (the program
        written out, checked in turn) and ``npm run build -- {x}``, need the subcommand to
        be certain. Other subcommands' arguments are data."""
        positions = subcommand_positions(row, words)
        end = max(positions, default=len(words) - 1)
        for i, word in enumerate(words[:end + 1]):
            if self.hostile(word) or (i in positions and _literal(word) is None):
                raise _Refused(f"an argument of {name} where it could be the subcommand or "
                               f"one of {name}'s options, and {name} {row.why}",
                               "write the subcommand literally first")
        found = self.running_at(row, words)
        if found is None:
            return
        index, running = found
        if positions == {index}:
            rest = words[index + 1:]
            if running in row.wraps:
                # uv run script.py {x}: the program is written out, and checked in turn
                self.check_wrapper(f"{name} {running}", row, rest)
                return
            if running in row.data_after_dashes and self.data_after_dashes(row, running, rest):
                return  # npm run build -- {x}: npm quotes the words after -- for the script
        if name in ("pip", "pip3") and all(
                _PINNED.match(_text(w)) for w in words if self.hostile(w)):
            return  # pip install "tool=={v}": the value picks a version of a named package
        raise _Refused(f"an argument of {name} {running}, which {row.why}",
                       "pass the value through env= (and use \"$VAR\") or stdin=")

    def data_after_dashes(self, row: Program, running: str, rest: list[Node]) -> bool:
        """Whether every placeholder among ``rest`` (the words after subcommand ``running``)
        comes after a ``--``, with the script named literally before it where the
        subcommand names one (``npm run build -- {x}``)."""
        dash = next((i for i, w in enumerate(rest) if _literal(w) == "--"), None)
        if dash is None:
            return False
        before = [_literal(w) for w in rest[:dash]]
        if any(lit is None for lit in before) or any(map(self.hostile, rest[:dash])):
            return False
        return running not in row.names_script or any(
            lit is not None and not lit.startswith("-") for lit in before)
