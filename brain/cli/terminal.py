"""Text from runs and servers made safe for a terminal: what the CLI prints of it is shown,
never obeyed.

A step's output, a server's tool description, a reviewer's comment can hold a terminal's
escape sequences (``ESC ] 0 ; title``, ``ESC [ 2 J``, OSC 52 that writes the clipboard)
or characters that reorder the text around them on screen. Every human-readable line the
CLI prints of such text goes through :func:`shown`; JSON output is escaped by JSON itself
(:func:`json_text`).
"""

from __future__ import annotations

import json
import re
from typing import Any

#: What is shown as its code rather than written: C0 but for the tab and the line feed,
#: DEL, C1 (``\\x9b`` is a CSI of its own), the line and paragraph separators, and the
#: bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069), with
#: which a text can show its characters in another order than they are read.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

#: What JSON leaves as is but a terminal may still act on: DEL and C1 (C0 JSON escapes).
_JSON_CONTROL = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _code(match: re.Match[str]) -> str:
    point = ord(match.group())
    return f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}"


def shown(text: str) -> str:
    """``text`` with each control character as its code, so none reaches the terminal.

    Line feeds and tabs stay (they only move to the next line or column).

    >>> shown("\\x1b]0;PWNED\\x1b\\\\ ok\\n")
    '\\\\x1b]0;PWNED\\\\x1b\\\\ ok\\n'
    """
    return _CONTROL.sub(_code, text)


def json_text(value: Any, **options: Any) -> str:
    """``value`` as JSON (``json.dumps(value, ensure_ascii=False, **options)``) with the
    characters JSON would leave as they are but a terminal may act on written as ``\\u``
    escapes: the same JSON once read, safe to print."""
    return _JSON_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}",
                             json.dumps(value, ensure_ascii=False, **options))
