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
    its writer chose which characters to escape: Java's URLEncoder, .NET's JSON writer...),
    each narrowed to the fewest whole words that hold it (the words around stay readable).

    A run is decoded once (:func:`_spells`) to see whether it spells a secret; only then
    once more keeping where each decoded character came from (:func:`_mapped`), so a
    secret found in the decoded text is its source span: linear in the run's length."""
    spans = []
    for m in _ESCAPED_RUN.finditer(text):
        run = m.group()
        if "%" not in run and "\\u" not in run:
            continue
        if _spells(run, given):
            spans += [(m.start() + lo, m.start() + hi) for lo, hi in _located(run, given)]
    return spans


def _spells(run: str, given: list[str]) -> bool:
    return any(v in decoded for decoded in _unescaped(run) for v in given)


def _located(run: str, given: list[str]) -> list[tuple[int, int]]:
    """Every stretch of whole words of ``run`` holding a secret ``run`` spells (the whole
    run should the decoding below ever read it otherwise than :func:`_unescaped`)."""
    found = []
    for decoded, starts, ends in _mapped(run):
        for value in given:
            at = decoded.find(value)
            while at != -1:
                found.append((starts[at], ends[at + len(value) - 1]))
                at = decoded.find(value, at + 1)
    if not found:
        return [(0, len(run))]
    found.sort()
    words: list[tuple[int, int]] = []
    for lo, hi in found:
        floor = words[-1][1] if words else 0  # no word is walked twice: linear overall
        while lo > floor and not run[lo - 1].isspace():
            lo -= 1
        while hi < len(run) and not run[hi].isspace():
            hi += 1
        words.append((lo, max(hi, floor)))
    return words


def _mapped(run: str) -> list[tuple[str, list[int], list[int]]]:
    """What :func:`_unescaped` reads in ``run``, each decoded character with the span of
    ``run`` it came from: ``\\uXXXX`` escapes decoded, then ``%XX`` ones, with ``+`` as
    ``+`` and as a space."""
    chars, starts, ends = _units(run)
    if "%" not in chars:
        return [(chars, starts, ends)]
    return [(chars, starts, ends), _percent(chars, starts, ends, plus=False),
            _percent(chars, starts, ends, plus=True)]


def _units(run: str) -> tuple[str, list[int], list[int]]:
    """``run`` with its ``\\uXXXX`` escapes decoded (a UTF-16 pair as one character, a
    lone surrogate as U+FFFD), each character's source span beside it."""
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for m in _U_ESCAPE.finditer(run):
        out += run[pos:m.start()]
        starts += range(pos, m.start())
        ends += range(pos + 1, m.start() + 1)
        pos = m.end()
        units = [(int(u.group(1), 16), u.start(), u.end())
                 for u in re.finditer(r"u([0-9A-Fa-f]{4})", m.group())]
        spans = [(m.start() + (0 if i == 0 else units[i - 1][2]), m.start() + end)
                 for i, (_, _, end) in enumerate(units)]  # each unit with its backslashes
        i = 0
        while i < len(units):
            unit = units[i][0]
            if 0xD800 <= unit < 0xDC00 and i + 1 < len(units) and 0xDC00 <= units[i + 1][0] < 0xE000:
                out.append(chr(0x10000 + ((unit - 0xD800) << 10) + units[i + 1][0] - 0xDC00))
                starts.append(spans[i][0])
                ends.append(spans[i + 1][1])
                i += 2
                continue
            out.append("\ufffd" if 0xD800 <= unit < 0xE000 else chr(unit))
            starts.append(spans[i][0])
            ends.append(spans[i][1])
            i += 1
    out += run[pos:]
    starts += range(pos, len(run))
    ends += range(pos + 1, len(run) + 1)
    return "".join(out), starts, ends


_HEX = frozenset("0123456789abcdefABCDEF")


def _percent(chars: str, starts: list[int], ends: list[int], *,
             plus: bool) -> tuple[str, list[int], list[int]]:
    """``chars`` with its ``%XX`` escapes decoded as :func:`urllib.parse.unquote` does
    (bytes as UTF-8, an invalid sequence as U+FFFD, a non-ASCII character passing
    through), and a ``+`` as a space when ``plus`` (as :func:`~urllib.parse.unquote_plus`),
    each decoded character's source span kept."""
    out: list[str] = []
    new_starts: list[int] = []
    new_ends: list[int] = []
    escaped = bytearray()  # the bytes of %XX escapes in a row above 0x7F, not decoded yet
    spans: list[tuple[int, int]] = []

    def flush() -> None:
        at = 0
        while at < len(escaped):
            size = _sequence(bytes(escaped[at:at + 4]))
            out.append(bytes(escaped[at:at + size]).decode("utf-8", "replace")[:1])
            new_starts.append(spans[at][0])
            new_ends.append(spans[at + size - 1][1])
            at += size
        escaped.clear()
        spans.clear()

    i, n = 0, len(chars)
    while i < n:
        c = chars[i]
        if c == "%" and i + 2 < n and chars[i + 1] in _HEX and chars[i + 2] in _HEX:
            byte = int(chars[i + 1:i + 3], 16)
            span = (starts[i], ends[i + 2])
            i += 3
            if byte >= 0x80:
                escaped.append(byte)
                spans.append(span)
                continue
            c = chr(byte)
        else:
            span = (starts[i], ends[i])
            i += 1
            if plus and c == "+":
                c = " "
        flush()
        out.append(c)
        new_starts.append(span[0])
        new_ends.append(span[1])
    flush()
    return "".join(out), new_starts, new_ends


def _sequence(data: bytes) -> int:
    """How many bytes at the start of ``data`` the UTF-8 decoder reads as one character,
    or replaces with one U+FFFD (the longest start of a valid sequence, at least one)."""
    for size in range(1, len(data) + 1):
        try:
            data[:size].decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.reason != "unexpected end of data":
                return max(size - 1, 1)
            continue
        return size
    return max(len(data), 1)
