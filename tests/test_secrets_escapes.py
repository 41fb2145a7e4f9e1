"""Secrets spelled by URL and JSON escapes (SPEC §11), whichever characters the writer
escaped: every occurrence goes, the words around stay, and the work is linear in the text."""

from __future__ import annotations

import json
import string
from urllib.parse import unquote

from hypothesis import given, settings
from hypothesis import strategies as st
from support import remembered

from brain._secrets import MIN_SECRET_LENGTH

#: No ``%``, ``\\``, quote, ``+`` or space: characters that end an escaped run or change
#: how it decodes, so the secret's own characters stay what they are.
_SECRET_CHARS = string.ascii_uppercase + string.digits + "-_.~!*@:/=éß€😀"
#: Words with none of the secret's characters: no word holds it.
_WORD_CHARS = string.ascii_lowercase




def _escaped(value: str, how: list[int]) -> str:
    """``value`` with each character written as itself (0), URL-escaped (1) or as a JSON
    ``\\uXXXX`` escape (2, a UTF-16 pair for a character beyond the BMP)."""
    out = []
    for char, way in zip(value, how + [0] * len(value), strict=False):
        if way == 1:
            out.append("".join(f"%{b:02X}" for b in char.encode()))
        elif way == 2:
            out.append(json.dumps(char)[1:-1] if ord(char) > 0x7F else f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def _decoded(text: str) -> str:
    return unquote(json.loads(json.dumps(text).replace("\\\\u", "\\u")))


@settings(max_examples=150, deadline=None)
@given(value=st.text(_SECRET_CHARS, min_size=MIN_SECRET_LENGTH, max_size=30),
       how=st.lists(st.integers(0, 2), max_size=30),
       words=st.lists(st.text(_WORD_CHARS, min_size=1, max_size=8),
                      min_size=2, max_size=8),
       times=st.integers(1, 3))
def test_every_occurrence_of_an_escaped_secret_goes_and_the_words_around_stay(
        value: str, how: list[int], words: list[str], times: int) -> None:
    """However many times a line spells the secret, escaped in any mix of ways, none of
    them is left, and every word around them is."""
    from brain._secrets import scrub

    written = _escaped(value, how)
    line = " ".join(w + " " + written for w in words[:times]) + " " + " ".join(words[times:])
    with remembered(value):
        out = scrub(line) or ""
    assert value not in _decoded(out), (line, out)
    kept = out.split()
    assert all(w in kept for w in words), (line, out)
    assert out.count("***") == min(times, len(words)), (line, out)


def test_scrubbing_an_escaped_secret_decodes_the_line_a_bounded_number_of_times(
        monkeypatch: object) -> None:
    """A long line of words ending in a URL-quoted secret is decoded as a whole a few
    times, not once per word (which made a 40 KB line take 13 s, on the event loop when
    it is a live log line)."""
    import pytest

    from brain._secrets import escapes, scrub

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    decoded = []
    unescaped = escapes._unescaped

    def counted(run: str) -> set[str]:
        decoded.append(len(run))
        return unescaped(run)

    monkeypatch.setattr(escapes, "_unescaped", counted)
    value = "Secret-00-abcdefghXYZ"
    line = "a " * 5000 + _escaped(value, [1])
    with remembered(value):
        assert (scrub(line) or "").endswith(" a ***")
    assert sum(decoded) <= 3 * len(line), f"{len(decoded)} decodings, {sum(decoded)} characters"
