"""Where a secret hides in hex or base64 text: the runs of encoded characters that hold
one, found whole whatever their wrapping. This module imports nothing of The Brain."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

#: A run of base64 (either alphabet) or hex, and the line breaks that wrap it, up to its
#: ``=`` padding: an ``=`` before it belongs to what comes before (``token=``).
RUN = re.compile(r"[A-Za-z0-9+/_\-\r\n]+=*")


#: The last character before a run: any but the run's own (``=`` included: it ends one).
_BEFORE_RUN = re.compile(r"(?s).*[^A-Za-z0-9+/_\-\r\n]")


#: What tools put between the pieces of an encoding they print: line breaks (``base64``
#: wraps), indentation (a YAML block), quotes, commas and brackets (lines in a JSON array),
#: spaces (base64 in groups, ``od``'s hex) and colons (a fingerprint).
_SEPARATORS = " \t\r\n\"',[]:"
_JOIN = str.maketrans(dict.fromkeys(_SEPARATORS))
_SEPARATOR = re.compile("[" + re.escape(_SEPARATORS) + "]")


def encoded_spans(text: str, needles: Iterable[str]) -> list[tuple[int, int]]:
    """The runs of ``text`` that hold one of ``needles`` (a secret hex- or
    base64-encoded), and whatever separates them from the runs that go on with it.

    A run is a stretch of base64 (or hex) characters, line breaks included, up to its
    ``=`` padding. The secret's core (see :func:`brain._secrets.forms.encoded_forms`) is
    looked for in the text with every separator taken out (:data:`_SEPARATORS`), so the
    secret may sit anywhere in a longer encoded text, at any alignment, in either
    alphabet, wrapped at any width, indented, quoted or grouped: when found, the whole
    runs it spans go, not only the core (the characters at its edges hold a few of the
    secret's bits as well, and what a run encodes is the secret's context:
    ``user:TOKEN``). Costs one ``str.find`` per needle and one copy of the text when
    nothing is found; each run found is measured from the match outwards, so a hit in a
    long text costs no list of its runs or separators."""
    joined = text.translate(_JOIN)
    found: list[tuple[int, int]] = []
    for form in needles:
        start = joined.find(form)
        while start != -1:
            found.append((start, start + len(form) - 1))
            start = joined.find(form, start + 1)
    if not found:
        return []
    at = dict(zip(sorted({j for hit in found for j in hit}),
                  _unjoined(text, sorted({j for hit in found for j in hit})), strict=True))
    spans: list[tuple[int, int]] = []
    for first, last in sorted((at[a], at[b]) for a, b in found):
        if spans and last < spans[-1][1]:
            continue  # in the runs just found
        run = RUN.match(text, last)  # a needle ends there: its run goes on from it
        spans.append(trimmed(text, _run_start(text, first), run.end() if run else last + 1))
    return spans


def _run_start(text: str, at: int) -> int:
    """Where the run holding ``text[at]`` begins: looked for backwards in windows that
    double, so a long run costs its own length, not the text's."""
    width = 256
    while True:
        lo = max(at - width, 0)
        before = _BEFORE_RUN.match(text, lo, at)
        if before is not None:
            return before.end()
        if lo == 0:
            return 0
        width *= 2


def trimmed(text: str, start: int, stop: int) -> tuple[int, int]:
    """The span without the line breaks at its ends (those around a run stay)."""
    while start < stop and text[start] in "\r\n":
        start += 1
    while stop > start and text[stop - 1] in "\r\n":
        stop -= 1
    return start, stop


def _unjoined(text: str, positions: list[int]) -> Iterator[int]:
    """Each of the sorted ``positions`` in ``text`` with its separators taken out, as a
    position in ``text``: one pass over the separators, none of them kept."""
    breaks = _SEPARATOR.finditer(text)
    passed = 0  # breaks before the position in text
    upcoming = next(breaks, None)
    for j in positions:
        # The joined index j is at j plus the number of breaks before it.
        while upcoming is not None and upcoming.start() - passed <= j:
            passed += 1
            upcoming = next(breaks, None)
        yield j + passed
