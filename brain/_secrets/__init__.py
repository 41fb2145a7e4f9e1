"""Every secret value this process knows, and the one scrubber applied to what is stored.

A secret read for one step must not show up in another step's output (a step
that runs ``env``, a log it prints): so the values are remembered process-wide
as they are read, and everything the runner records passes through
:func:`scrub`. Values shorter than :data:`MIN_SECRET_LENGTH` are refused where
they are read: replacing a one-letter secret would mangle every text and give
the secret away by the holes it leaves.

This package imports nothing else of The Brain; its modules: :mod:`.forms` (what a
secret looks like printed), :mod:`.runs` (encoded runs holding one), :mod:`.dumps` (hex
dumps showing one), :mod:`.escapes` (escaped text spelling one).
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Iterable

from brain._secrets.dumps import dump_spans
from brain._secrets.escapes import escaped_spans
from brain._secrets.forms import (
    MIN_SECRET_LENGTH,
    encoded_forms,
    encoded_needles,
    quoted_forms,
    wrapped_forms,
)
from brain._secrets.runs import RUN, encoded_spans, trimmed

__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "declare_secret_names", "declared_secret_names",
           "encoded_forms", "longest", "make_undumpable", "remember", "remember_environment",
           "scrub", "scrub_part", "url_password_forms", "wrapped_forms"]

REDACTED = "***"

_lock = threading.Lock()
#: Every form of every secret, as scrubbed.
_values: set[str] = set()
#: Every hex and base64 form of every secret (see :func:`.runs.encoded_spans`): looked for
#: in the text with its line breaks taken out, and scrubbed with the whole run around them.
_encoded: set[str] = set()
#: The secrets themselves, as given to :func:`remember` (a value may also be a form of
#: another, so this is not a subset check on ``_values``).
_given: set[str] = set()
_names: set[str] = set()
_made_undumpable = False


def remember(value: str | None) -> None:
    """Add a secret value to those scrubbed from everything stored (short ones ignored).

    The forms the value takes when code quotes it are remembered too (see
    :func:`.forms.quoted_forms`): inside a JSON string, inside Python's ``repr``,
    URL-quoted, as non-UTF-8 bytes read back with replacement characters, and each line of
    a value of several lines (a key printed line by line), where long enough. So are its
    encodings (hex, base64 wherever it falls in a longer encoded text, wrapped at any
    width: see :func:`.runs.encoded_spans`).
    """
    if not value or len(value) < MIN_SECRET_LENGTH or value in _given:
        return
    forms = quoted_forms(value)
    encoded = {form for plain in {value, value.strip()} for form in encoded_needles(plain)}
    with _lock:
        _given.add(value)
        _values.update(forms)
        _encoded.update(encoded)


def remember_environment(names: Iterable[str]) -> None:
    """Remember the values of these environment variables (the ones that are set)."""
    for name in names:
        remember(os.environ.get(name))


def scrub(text: str | None, extra: Iterable[str] = ()) -> str | None:
    """``text`` with every known secret value (and each of ``extra``) replaced by ``***``.

    Overlapping secrets are replaced as one stretch, so no part of either is left. A
    stretch of URL or JSON text whose escapes (``%7E``, ``\\u002B``), decoded, spell a
    secret is replaced whole, whichever characters its writer chose to escape; so is a
    base64 or hex run, wrapped, indented, quoted or grouped, that encodes a secret
    anywhere in it (see :func:`.runs.encoded_spans`), and a hex dump's lines that show
    one (see :func:`.dumps.dump_spans`).
    """
    if not text:
        return text
    for value in extra:
        remember(value)
    # str.find per value beats one big alternation regex by ~10x on long texts (Python's
    # re tries every branch at every position). One pass; `in` first, cheaper than a call.
    spans: list[tuple[int, int]] = []
    for value in list(_values):
        if value not in text:
            continue
        start = text.find(value)
        while start != -1:
            spans.append((start, start + len(value)))
            start = text.find(value, start + 1)
    if ("%" in text or "\\u" in text) and _given:
        spans += escaped_spans(text, [v for v in _given if len(v) >= MIN_SECRET_LENGTH])
    if _encoded:
        spans += encoded_spans(text, list(_encoded))
        spans += dump_spans(text, list(_given))
    return _replaced(text, spans)


def _replaced(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span replaced by ``***``, overlapping ones as one."""
    if not spans:
        return text
    spans.sort()
    out: list[str] = []
    pos = 0
    end = -1
    for start, stop in spans:
        if start > end:
            if end >= 0:
                out.append(REDACTED)
            out.append(text[pos:start])
        end = max(end, stop)
        pos = end
    out.append(REDACTED)
    out.append(text[pos:])
    return "".join(out)


#: A part of a base64 run scrubbed apart from the rest of its run (:func:`scrub_part`)
#: goes when it holds any of a secret's pieces of this many bytes (those at every multiple
#: of it): that is, any ``2 * PIECE_BYTES - 1`` consecutive bytes of the secret.
PIECE_BYTES = 6
#: Line breaks and padding out, the URL-safe alphabet read as the standard one.
_DENSE = str.maketrans({"\r": None, "\n": None, "=": None, "-": "+", "_": "/"})
_HEX = frozenset("0123456789abcdefABCDEF")


def scrub_part(text: str | None, extra: Iterable[str] = ()) -> str | None:
    """:func:`scrub`, for a text that may be only part of a base64 (or hex) run, the rest of
    which was, or will be, scrubbed apart from it: a live log's lines let out before the
    lines that follow them were written.

    The rule: besides every run holding a whole secret, a run goes whole when its decoding
    (read from each of its four first characters, either alphabet, line breaks and
    padding out) holds any of a secret's :data:`PIECE_BYTES`-byte pieces taken at every
    multiple of :data:`PIECE_BYTES`, so any 11 consecutive bytes of it. A part cut from
    the rest of its run shows at most 10 bytes of a secret at each of its two ends.
    Decodes every run: meant for a few lines, not for whole outputs.
    """
    text = scrub(text, extra)
    if not text or not _given:
        return text
    pieces = set()
    for value in list(_given):
        data = value.encode("utf-8", "replace")
        pieces |= {data[i:i + PIECE_BYTES] for i in range(0, len(data) - PIECE_BYTES + 1,
                                                           PIECE_BYTES)}
    spans = []
    for m in RUN.finditer(text):
        dense = m.group().translate(_DENSE)
        if len(dense) < (8 * (2 * PIECE_BYTES - 1) + 5) // 6:
            continue  # too short to hold 11 bytes
        if any(piece in decoded for decoded in _decodings(dense) for piece in pieces):
            spans.append(trimmed(text, *m.span()))
    return _replaced(text, spans)


def _decodings(dense: str) -> list[bytes]:
    """What ``dense`` (base64 characters only) says read from each of its first four
    characters, and as hex from each of its first two when it is hex."""
    import binascii

    out = []
    for shift in range(4):
        chars = dense[shift:]
        out.append(binascii.a2b_base64(chars + "A" * (-len(chars) % 4)))
    if set(dense) <= _HEX:
        out += [bytes.fromhex(dense[shift:][:(len(dense) - shift) // 2 * 2]) for shift in (0, 1)]
    return out



def url_password_forms(url: str) -> list[str]:
    """The password in ``url`` (decoded) and the ``Basic`` credentials it becomes
    (``base64(user:password)``), or nothing when the URL has none (or cannot be parsed)."""
    from urllib.parse import unquote, urlsplit

    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return []
    if not password:
        return []
    password = unquote(password)
    basic = f"{unquote(parts.username or '')}:{password}"
    return [password, base64.b64encode(basic.encode()).decode()]


def longest() -> int:
    """How many characters the longest secret remembered can fill in any form scrubbed
    (0 when none): its encodings wrapped at any width count, up to one character a line
    with CRLF (three characters each), so a margin this wide holds any form whole."""
    given = max((len(v.encode("utf-8", "replace")) for v in _given), default=0)
    return max(max((len(v) for v in _values), default=0), 3 * 2 * given)


def make_undumpable() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)``: processes of the same user (the steps) cannot read
    this one's memory or ``/proc/PID/environ``. Linux only; elsewhere nothing happens."""
    global _made_undumpable
    if _made_undumpable:
        return
    _made_undumpable = True
    import ctypes  # here, not at import: only what runs steps needs it

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def declare_secret_names(names: Iterable[str]) -> None:
    """Note environment variables a workflow defined in this process declares secret
    (``secret()`` and webhook secrets): no step sees them unless it passes them itself,
    whichever workflow it belongs to."""
    with _lock:
        _names.update(names)


def declared_secret_names() -> frozenset[str]:
    """Every variable declared secret in this process so far."""
    with _lock:
        return frozenset(_names)
