"""Where a secret hides in URL or JSON escapes (``%7E``, ``\\u002B``), whichever characters
its writer chose to escape. This module imports nothing of The Brain."""

from __future__ import annotations

import re

#: A stretch of URL or JSON text that may hold escapes (``%7E``, ``\\u002B``): within a
#: line, no quotes or backslashes but those of ``\\uXXXX`` (a JSON string's content).
_ESCAPED_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2}|\\{1,2}u[0-9A-Fa-f]{4}|[^\r\n\"'\\%])+")
#: ``\\uXXXX`` escapes in a row, as written or escaped once more (``repr`` of JSON).
_U_ESCAPE = re.compile(r"(?:\\{1,2}u[0-9A-Fa-f]{4})+")


def _unescaped(run: str) -> set[str]:
    """What a stretch of escaped text says: its ``\\uXXXX`` escapes decoded (UTF-16 pairs
    joined), then its ``%XX`` escapes, with ``+`` as ``+`` and as a space."""
    from urllib.parse import unquote, unquote_plus

    def units(m: re.Match[str]) -> str:
        raw = bytes.fromhex("".join(re.findall(r"u([0-9A-Fa-f]{4})", m.group())))
        return raw.decode("utf-16-be", "surrogatepass").encode(
            "utf-16", "surrogatepass").decode("utf-16", "replace")

    text = _U_ESCAPE.sub(units, run)
    return {text, unquote(text, errors="replace"), unquote_plus(text, errors="replace")}


def escaped_spans(text: str, given: list[str]) -> list[tuple[int, int]]:
    """The stretches of ``text`` whose escapes, decoded, spell one of ``given`` (however
    its writer chose which characters to escape: Java's URLEncoder, .NET's JSON writer...)."""
    spans = []
    for m in _ESCAPED_RUN.finditer(text):
        run = m.group()
        if "%" not in run and "\\u" not in run:
            continue
        if _spells(run, given):
            lo, hi = _narrowed(run, given)
            spans.append((m.start() + lo, m.start() + hi))
    return spans


def _spells(run: str, given: list[str]) -> bool:
    return any(v in decoded for decoded in _unescaped(run) for v in given)


def _narrowed(run: str, given: list[str]) -> tuple[int, int]:
    """The fewest whole words of ``run`` that still spell a secret (the words around it
    stay readable)."""
    lo = 0
    for start in [m.end() for m in re.finditer(r"\s+", run)]:
        if not _spells(run[start:], given):
            break
        lo = start
    hi = len(run)
    for end in reversed([m.start() for m in re.finditer(r"\s+", run)]):
        if end <= lo or not _spells(run[lo:end], given):
            break
        hi = end
    return lo, hi
