"""The placeholder engine: parse ``{step}``-style templates, check them, fill them in.

The grammar is strict (SPEC §3, §12): ``{NAME}``, ``{previous.NAME}``,
``{trigger.event|body|path}``, ``{trigger.headers.HEADER}`` and, inside a
``for_each`` block, ``{each.NAME}``, and a run's parameters, ``{params.NAME}`` and
``{params.NAME.FIELD...}`` (SPEC §21). Everything
else is literal text, so ``awk '{print $2}'``, ``${HOME}`` and JSON pass through
untouched. ``{{X}}`` where ``{X}`` would be a placeholder is the literal ``{X}``.
Substitution is one pass: inserted values are never scanned again. Where a
placeholder may stand in a shell command is decided in :mod:`brain.shell_check`.

This module depends on nothing else in The Brain but the errors.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from brain._errors import PlaceholderError

_BODY = (
    r"trigger\.(?:event|body|path)"
    r"|trigger\.headers\.[A-Za-z0-9_-]+"
    r"|params(?:\.[A-Za-z0-9_-]+)+"
    r"|(?:previous\.|each\.)?[A-Za-z0-9_-]+"
)
_SCAN = re.compile(r"\{\{(" + _BODY + r")\}\}|(?<!\$)\{(" + _BODY + r")\}")
_PLACEHOLDER = re.compile(r"(?<!\$)\{(?:" + _BODY + r")\}")
NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")

RefKind = Literal["step", "previous", "trigger", "each", "params"]
#: How a value is written into a shell command: see :func:`quote_for`.
Quoting = Literal["bare", "double", "single"]


@dataclass(frozen=True, slots=True)
class Ref:
    """One placeholder: ``kind`` is ``step``, ``previous``, ``trigger``, ``each`` or
    ``params``.

    ``name`` is the step name, the trigger field (``body``, ``headers.x-id``,
    header names lower-cased), the ``for_each`` element's name, or the parameter's
    path (``service``, ``target.host``).
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
    if body.startswith("each."):
        return Ref("each", body[len("each.") :])
    if body.startswith("params."):
        return Ref("params", body[len("params.") :])
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


def escape(text: str) -> str:
    """``text`` written so that :func:`parse` reads it back as one literal: each
    ``{X}`` that would be a placeholder doubled to the ``{{X}}`` escape.

    >>> escape("{name} or ${HOME}")
    '{{name}} or ${HOME}'
    >>> parse(escape("{name}"))
    ('{name}',)
    """
    return _PLACEHOLDER.sub(r"{\g<0>}", text)


def refs(text: str) -> list[Ref]:
    """The placeholders in ``text``, in order."""
    return [p for p in parse(text) if isinstance(p, Ref)]


def has_placeholders(text: str) -> bool:
    """Whether ``text`` holds at least one placeholder (escapes do not count)."""
    return any(isinstance(p, Ref) for p in parse(text))


def render(text: str, lookup: Callable[[Ref], str], *,
           shell_quote: bool | Sequence[Quoting] = False) -> str:
    """Fill in ``text`` in one pass; ``lookup`` gives each placeholder's value.

    With ``shell_quote=True`` each value is inserted shell-quoted, so it stays
    one word of data whatever it holds. A sequence gives, placeholder by
    placeholder, how each value is written in (``bare``: shell-quoted;
    ``double``: escaped for ``"…"``; ``single``: escaped for ``'…'``), as
    :func:`brain.shell_check.render_command` decides. A value containing NUL
    raises :class:`PlaceholderError`.
    """
    parts = parse(text)
    quoting = iter(shell_quote) if not isinstance(shell_quote, bool) else None
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        value = lookup(part)
        if "\x00" in value:
            raise PlaceholderError(f"the value of {part.text} contains a NUL byte")
        if quoting is not None:
            out.append(quote_for(next(quoting, "bare"), value))
        else:
            out.append(shlex.quote(value) if shell_quote else value)
    return "".join(out)


def quote_for(quoting: Quoting, value: str) -> str:
    r"""``value`` written so that it is plain data where it stands: shell-quoted as a bare
    word, escaped inside ``"…"`` (a backslash before ``$``, a backquote, ``"`` and ``\``),
    or inside ``'…'`` (each ``'`` written ``'\''``).

    >>> print(quote_for("double", 'say "$HOME"'))
    say \"\$HOME\"
    >>> print(quote_for("single", "it's"))
    it'\''s
    """
    if quoting == "double":
        return _DOUBLE_SPECIAL.sub(r"\\\g<0>", value)
    if quoting == "single":
        return value.replace("'", "'\\''")
    return shlex.quote(value)


_DOUBLE_SPECIAL = re.compile(r'[$`"\\]')
