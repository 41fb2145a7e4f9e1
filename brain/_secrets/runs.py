"""Where a secret hides in hex or base64 text: the runs of encoded characters that hold
one, found whole whatever their wrapping. This module imports nothing of The Brain."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable

#: A run of base64 (either alphabet) or hex, and the line breaks that wrap it, up to its
#: ``=`` padding: an ``=`` before it belongs to what comes before (``token=``).
RUN = re.compile(r"[A-Za-z0-9+/_\-\r\n]+=*")


def encoded_spans(text: str, needles: Iterable[str]) -> list[tuple[int, int]]:
    """The runs of ``text`` that hold one of ``needles`` (a secret hex- or
    base64-encoded): each whole.

    A run is a stretch of base64 (or hex) characters, line breaks included (``base64``
    wraps at 76, ``openssl base64`` at 64, anything at any width, with CRLF or LF), up to
    its ``=`` padding. The secret's core (see :func:`brain._secrets.forms.encoded_forms`)
    is looked for in the text with every line break taken out, so the secret may sit
    anywhere in a longer encoded text, at any alignment, in either alphabet, wrapped at
    any width: when found, the whole run around it goes, not only the core (the
    characters at its edges hold a few of the secret's bits as well, and what the run
    encodes is the secret's context: ``user:TOKEN``). Costs one ``str.find`` per needle
    when nothing is found."""
    joined = text.replace("\r", "").replace("\n", "") if "\n" in text or "\r" in text else text
    found: list[tuple[int, int]] = []
    for form in needles:
        if form not in joined:
            continue
        start = joined.find(form)
        while start != -1:
            found.append((start, start + len(form)))
            start = joined.find(form, start + 1)
    if not found:
        return []
    if joined is not text:
        found = _unjoined(text, found)
    runs = [(m.start(), m.end()) for m in RUN.finditer(text)]  # only now: a secret is there
    starts = [start for start, _ in runs]
    spans = []
    for hit, _ in found:
        start, stop = runs[bisect.bisect_right(starts, hit) - 1]
        spans.append(trimmed(text, start, stop))
    return spans


def trimmed(text: str, start: int, stop: int) -> tuple[int, int]:
    """The span without the line breaks at its ends (those around a run stay)."""
    while start < stop and text[start] in "\r\n":
        start += 1
    while stop > start and text[stop - 1] in "\r\n":
        stop -= 1
    return start, stop


def _unjoined(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` of ``text`` with its line breaks taken out, as spans of ``text``."""
    # Where each break would be in the joined text: the joined index j is at j plus the
    # number of breaks that come before it.
    breaks = [m.start() - i for i, m in enumerate(re.finditer(r"[\r\n]", text))]

    def at(j: int) -> int:
        return j + bisect.bisect_right(breaks, j)

    return [(at(start), at(stop - 1) + 1) for start, stop in spans]
