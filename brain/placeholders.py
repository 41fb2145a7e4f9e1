"""The placeholder engine: parse ``{step}``-style templates, check them, fill them in.

The grammar is strict (SPEC §3): ``{NAME}``, ``{previous.NAME}``,
``{trigger.event|body|path}`` and ``{trigger.headers.HEADER}``. Everything
else is literal text, so ``awk '{print $2}'``, ``${HOME}`` and JSON pass through
untouched. ``{{X}}`` where ``{X}`` would be a placeholder is the literal ``{X}``.
Substitution is one pass: inserted values are never scanned again.

This module depends on nothing else in The Brain but the errors.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from brain._errors import PlaceholderError

_BODY = (
    r"trigger\.(?:event|body|path)"
    r"|trigger\.headers\.[A-Za-z0-9_-]+"
    r"|(?:previous\.)?[A-Za-z0-9_-]+"
)
_SCAN = re.compile(r"\{\{(" + _BODY + r")\}\}|(?<!\$)\{(" + _BODY + r")\}")
NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")

RefKind = Literal["step", "previous", "trigger"]


@dataclass(frozen=True, slots=True)
class Ref:
    """One placeholder: ``kind`` is ``step``, ``previous`` or ``trigger``.

    ``name`` is the step name, or the trigger field (``body``, ``headers.x-id``,
    header names lower-cased).
    """

    kind: RefKind
    name: str

    @property
    def text(self) -> str:
        """The placeholder as written, e.g. ``{previous.fetch}``."""
        if self.kind == "step":
            return "{" + self.name + "}"
        return "{" + self.kind + "." + self.name + "}"


Part = str | Ref


def _ref(body: str) -> Ref:
    if body.startswith("trigger."):
        field = body[len("trigger.") :]
        if field.startswith("headers."):
            field = field.lower()
        return Ref("trigger", field)
    if body.startswith("previous."):
        return Ref("previous", body[len("previous.") :])
    return Ref("step", body)


@lru_cache(maxsize=4096)
def parse(text: str) -> tuple[Part, ...]:
    """Split ``text`` into literal strings and :class:`Ref` placeholders.

    >>> parse("hi {name}!")
    ('hi ', Ref(kind='step', name='name'), '!')
    """
    parts: list[Part] = []
    pos = 0
    literal: list[str] = []
    for m in _SCAN.finditer(text):
        literal.append(text[pos : m.start()])
        if m.group(1) is not None:  # the {{X}} escape
            literal.append("{" + m.group(1) + "}")
        else:
            if any(literal):
                parts.append("".join(literal))
            literal = []
            parts.append(_ref(m.group(2)))
        pos = m.end()
    literal.append(text[pos:])
    if any(literal):
        parts.append("".join(literal))
    return tuple(parts)


def refs(text: str) -> list[Ref]:
    """The placeholders in ``text``, in order."""
    return [p for p in parse(text) if isinstance(p, Ref)]


def has_placeholders(text: str) -> bool:
    """Whether ``text`` holds at least one placeholder (escapes do not count)."""
    return any(isinstance(p, Ref) for p in parse(text))


def render(text: str, lookup: Callable[[Ref], str], *, shell_quote: bool = False) -> str:
    """Fill in ``text`` in one pass; ``lookup`` gives each placeholder's value.

    With ``shell_quote`` each value is inserted shell-quoted, so it stays one
    word of data whatever it holds. A value containing NUL raises
    :class:`PlaceholderError`.
    """
    parts = parse(text)
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        value = lookup(part)
        if "\x00" in value:
            raise PlaceholderError(f"the value of {part.text} contains a NUL byte")
        out.append(shlex.quote(value) if shell_quote else value)
    return "".join(out)


# --- shell-safety check -----------------------------------------------------

_QUOTED_FRAMES = {"dq": 'double quotes "…"', "sq": "single quotes '…'",
                  "dsq": "$'…' quotes", "bt": "backticks `…`"}
_WORD_END = set(" \t\n;|&<>()")


def quoting_problem(command: str) -> str | None:
    """Why a placeholder in shell ``command`` may not stand where it is, or ``None``.

    Values are inserted shell-quoted, which is only right where a bare word
    stands: inside quotes, backticks or a here-document body the quotes would
    become part of the data, so those places are refused at definition time.
    """
    starts: dict[int, tuple[int, Ref | None]] = {}
    for m in _SCAN.finditer(command):
        starts[m.start()] = (m.end(), None if m.group(1) is not None else _ref(m.group(2)))
    if not any(ref is not None for _, ref in starts.values()):
        return None

    stack: list[str] = ["cmd"]
    depth: list[int] = [0]
    pending_heredocs: list[tuple[str, bool]] = []
    i, n = 0, len(command)
    at_word_start = True
    while i < n:
        top = stack[-1]
        if i in starts:
            end, ref = starts[i]
            if ref is not None:
                where = _enclosing_quote(stack)
                if where is not None:
                    return (f"placeholder {ref.text} is inside {where}; write it bare "
                            f"(without quotes): its value is shell-quoted for you")
            i = end
            at_word_start = False
            continue
        c = command[i]
        if top in ("cmd", "sub", "param"):
            if c == "\\":
                i += 2
                at_word_start = False
                continue
            if c == "\n" and pending_heredocs and top != "param":
                problem, i = _skip_heredocs(command, i + 1, pending_heredocs, starts)
                pending_heredocs = []
                if problem:
                    return problem
                at_word_start = True
                continue
            if c == "#" and at_word_start and top != "param":
                while i < n and command[i] != "\n":
                    i += 1
                continue
            if c == "'":
                stack.append("sq")
            elif c == '"':
                stack.append("dq")
            elif c == "`":
                stack.append("bt")
            elif command.startswith("$'", i):
                stack.append("dsq")
                i += 1
            elif command.startswith("$(", i):
                stack.append("sub")
                depth.append(0)
                i += 1
            elif command.startswith("${", i):
                stack.append("param")
                i += 1
            elif top == "param" and c == "}":
                stack.pop()
            elif top == "sub" and c == "(":
                depth[-1] += 1
            elif top == "sub" and c == ")":
                if depth[-1] == 0:
                    stack.pop()
                    depth.pop()
                else:
                    depth[-1] -= 1
            elif command.startswith("<<<", i):
                i += 2
            elif command.startswith("<<", i):
                i += 2
                strip = command.startswith("-", i)
                if strip:
                    i += 1
                while i < n and command[i] in " \t":
                    i += 1
                j = i
                while j < n and command[j] not in _WORD_END:
                    j += 1
                delim = re.sub(r"[\"'\\]", "", command[i:j])
                if delim:
                    pending_heredocs.append((delim, strip))
                i = j
                at_word_start = False
                continue
            at_word_start = c in _WORD_END
            i += 1
            continue
        # inside some kind of quotes
        if top == "sq":
            if c == "'":
                stack.pop()
        elif top in ("dsq", "bt"):
            if c == "\\":
                i += 1
            elif (c == "'" and top == "dsq") or (c == "`" and top == "bt"):
                stack.pop()
        elif top == "dq":
            if c == "\\":
                i += 1
            elif c == '"':
                stack.pop()
            elif c == "`":
                stack.append("bt")
            elif command.startswith("$(", i):
                stack.append("sub")
                depth.append(0)
                i += 1
            elif command.startswith("${", i):
                stack.append("param")
                i += 1
        i += 1
        at_word_start = False
    return None


def _enclosing_quote(stack: list[str]) -> str | None:
    for frame in reversed(stack):
        if frame in ("cmd", "sub"):
            return None
        if frame in _QUOTED_FRAMES:
            return _QUOTED_FRAMES[frame]
    return None


def _skip_heredocs(command: str, i: int, docs: list[tuple[str, bool]],
                   starts: dict[int, tuple[int, Ref | None]]) -> tuple[str | None, int]:
    """Skip here-document bodies starting at ``i``; report a placeholder inside one."""
    n = len(command)
    for delim, strip in docs:
        while i < n:
            end = command.find("\n", i)
            end = n if end == -1 else end
            line = command[i:end]
            if (line.lstrip("\t") if strip else line) == delim:
                i = end + 1
                break
            for pos in range(i, end):
                hit = starts.get(pos)
                if hit is not None and hit[1] is not None:
                    return (f"placeholder {hit[1].text} is inside a here-document body; "
                            f"write it bare in the command (or pass the text with stdin=)"), i
            i = end + 1
    return None, i
