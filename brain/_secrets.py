"""Every secret value this process knows, and the one scrubber applied to what is stored.

A secret read for one step must not show up in another step's output (a step
that runs ``env``, a log it prints): so the values are remembered process-wide
as they are read, and everything the runner records passes through
:func:`scrub`. Values shorter than :data:`MIN_SECRET_LENGTH` are refused where
they are read: replacing a one-letter secret would mangle every text and give
the secret away by the holes it leaves.

This module imports nothing of The Brain.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
from collections.abc import Iterable

MIN_SECRET_LENGTH = 8
REDACTED = "***"

_lock = threading.Lock()
#: Every form of every secret, as scrubbed.
_values: set[str] = set()
#: Every hex and base64 form of every secret (see :func:`_encoded_spans`): looked for in
#: the text with its line breaks taken out, and scrubbed with the whole run around them.
_encoded: set[str] = set()
#: The secrets themselves, as given to :func:`remember` (a value may also be a form of
#: another, so this is not a subset check on ``_values``).
_given: set[str] = set()
_names: set[str] = set()
_made_undumpable = False


def remember(value: str | None) -> None:
    """Add a secret value to those scrubbed from everything stored (short ones ignored).

    The forms the value takes when code quotes it are remembered too: inside a
    JSON string, inside Python's ``repr``, URL-quoted (with and without ``/`` kept, as a
    path or a query value), and as non-UTF-8 bytes read back
    with replacement characters. So are its encodings (hex, base64 wherever it falls in
    a longer encoded text, wrapped at any width: see :func:`_encoded_spans`), and each
    line of a value of several lines (a key printed line by line), where long enough.
    """
    if not value or len(value) < MIN_SECRET_LENGTH or value in _given:
        return
    from urllib.parse import quote, quote_plus

    forms = {value, json.dumps(value)[1:-1], repr(value)[1:-1],
             json.dumps(value, ensure_ascii=False)[1:-1],
             json.dumps(json.dumps(value))[3:-3], repr(repr(value))[2:-2],
             quote(value, safe=""), quote(value), quote_plus(value), quote_plus(value, safe="/"),
             value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")}
    forms |= {_lower_escapes(f) for f in forms if "%" in f}  # %2f as well as %2F
    forms |= {f.replace("/", "\\/") for f in forms if "/" in f}  # JSON as PHP writes it
    forms |= {f.translate(_GO_JSON) for f in forms if any(c in f for c in "<>&")}
    forms |= {f.strip() for f in forms}  # as printed: a trailing newline is often dropped
    forms |= {line.strip() for line in value.splitlines()}
    encoded = {form for plain in {value, value.strip()} for form in _encoded_needles(plain)}
    with _lock:
        _given.add(value)
        _values.update(f for f in forms if len(f) >= MIN_SECRET_LENGTH)
        _encoded.update(encoded)


_URLSAFE = str.maketrans("+/", "-_")
#: How Go's encoding/json writes the characters HTML gives meaning to.
_GO_JSON = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})
#: Where the usual tools break an encoding into lines: ``base64`` (and Python's
#: ``encodebytes``) every 76 characters, PEM every 64, ``xxd -p`` every 60.
_WRAP_WIDTHS = (76, 64, 60)


def _lower_escapes(text: str) -> str:
    """``text`` with its URL escapes in lower case (``%2f``)."""
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), text)


def wrapped_forms(value: str) -> set[str]:
    """The lines of ``value``'s hex and base64 encodings as the usual tools wrap them
    (see :data:`_WRAP_WIDTHS`), where an encoding is longer than a line: each line of
    it is printed, and scrubbed, alone. Lines shorter than :data:`MIN_SECRET_LENGTH`
    are left out."""
    data = value.encode("utf-8", "surrogateescape")
    whole = (data.hex(), base64.b64encode(data).decode("ascii"))
    lines: set[str] = set()
    for encoded in whole:
        for width in _WRAP_WIDTHS:
            if len(encoded) > width:
                lines |= {encoded[i:i + width] for i in range(0, len(encoded), width)}
    return {line for line in lines if len(line) >= MIN_SECRET_LENGTH}


def encoded_forms(value: str) -> set[str]:
    """How ``value``'s UTF-8 bytes look hex- and base64-encoded, wherever they fall.

    Hex in lower and upper case. Base64 in the standard and URL-safe alphabets: the
    value encoded alone (with and without ``=`` padding), and, for each of the three
    offsets at which it can start in a longer encoded stream (a token inside
    ``user:token``, a JSON body), its *core*: the characters made of its bits only,
    without the partial character at each edge that neighbouring bytes also shape.
    Forms shorter than :data:`MIN_SECRET_LENGTH` are left out (too likely to occur
    by chance).

    >>> base64.b64encode(b"id:secret-value").decode()  # the value starts at offset 0
    'aWQ6c2VjcmV0LXZhbHVl'
    >>> "c2VjcmV0LXZhbHVl" in encoded_forms("secret-value")
    True
    """
    try:
        data = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no decoding made: as stored, replaced
        data = value.encode("utf-8", "replace")
    forms = {data.hex(), data.hex().upper()}
    whole = base64.b64encode(data).decode("ascii")
    forms |= {whole, whole.rstrip("=")}
    for offset in range(3):
        # ``offset`` bytes before the value, zeros after it up to a whole 3-byte group: the
        # characters from the first whose 6 bits all lie inside the value to the last
        # such one depend on the value alone.
        padded = bytes(offset) + data + bytes(-(offset + len(data)) % 3)
        first = -(-8 * offset // 6)
        last = 8 * (offset + len(data)) // 6
        forms.add(base64.b64encode(padded).decode("ascii")[first:last])
    forms |= {form.translate(_URLSAFE) for form in forms}
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


def _encoded_needles(value: str) -> set[str]:
    """What :func:`_encoded_spans` looks for: ``value``'s hex (both cases) and, in both
    alphabets, its base64 *core* at each of the three offsets (see :func:`encoded_forms`).
    Every base64 text whose decoding, read at the right character, holds the value
    contains one of the cores; so the value encoded alone, padded or not, needs no form
    of its own."""
    try:
        data = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = value.encode("utf-8", "replace")
    forms = {data.hex(), data.hex().upper()}
    for offset in range(3):
        padded = bytes(offset) + data + bytes(-(offset + len(data)) % 3)
        core = base64.b64encode(padded).decode("ascii")[-(-8 * offset // 6):8 * (offset + len(data)) // 6]
        forms |= {core, core.translate(_URLSAFE)}
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


#: A run of base64 (either alphabet) or hex, and the line breaks that wrap it, up to its
#: ``=`` padding: an ``=`` before it belongs to what comes before (``token=``).
_RUN = re.compile(r"[A-Za-z0-9+/_\-\r\n]+=*")


def _encoded_spans(text: str) -> list[tuple[int, int]]:
    """The runs of ``text`` that hold a secret hex- or base64-encoded: each whole.

    A run is a stretch of base64 (or hex) characters, line breaks included (``base64``
    wraps at 76, ``openssl base64`` at 64, anything at any width, with CRLF or LF), up to
    its ``=`` padding. The secret's core (see :func:`encoded_forms`) is looked for in the
    text with every line break taken out, so the secret may sit anywhere in a longer
    encoded text, at any alignment, in either alphabet, wrapped at any width: when found,
    the whole run around it goes, not only the core (the characters at its edges hold a
    few of the secret's bits as well, and what the run encodes is the secret's context:
    ``user:TOKEN``). Costs one ``str.find`` per form when nothing is found."""
    joined = text.replace("\r", "").replace("\n", "") if "\n" in text or "\r" in text else text
    found: list[tuple[int, int]] = []
    for form in list(_encoded):
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
    import bisect

    runs = [(m.start(), m.end()) for m in _RUN.finditer(text)]  # only now: a secret is there
    starts = [start for start, _ in runs]
    spans = []
    for hit, _ in found:
        start, stop = runs[bisect.bisect_right(starts, hit) - 1]
        while text[start] in "\r\n":  # the line breaks around the run stay
            start += 1
        while text[stop - 1] in "\r\n":
            stop -= 1
        spans.append((start, stop))
    return spans


def _unjoined(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` of ``text`` with its line breaks taken out, as spans of ``text``."""
    import bisect

    # Where each break would be in the joined text: the joined index j is at j plus the
    # number of breaks that come before it.
    breaks = [m.start() - i for i, m in enumerate(re.finditer(r"[\r\n]", text))]

    def at(j: int) -> int:
        return j + bisect.bisect_right(breaks, j)

    return [(at(start), at(stop - 1) + 1) for start, stop in spans]


def remember_environment(names: Iterable[str]) -> None:
    """Remember the values of these environment variables (the ones that are set)."""
    for name in names:
        remember(os.environ.get(name))


def scrub(text: str | None, extra: Iterable[str] = ()) -> str | None:
    """``text`` with every known secret value (and each of ``extra``) replaced by ``***``.

    Overlapping secrets are replaced as one stretch, so no part of either is left. A
    stretch of URL or JSON text whose escapes (``%7E``, ``\\u002B``), decoded, spell a
    secret is replaced whole, whichever characters its writer chose to escape; so is a
    base64 or hex run, wrapped or not, that encodes a secret anywhere in it (see
    :func:`_encoded_spans`).
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
        spans += _escaped_spans(text)
    if _encoded:
        spans += _encoded_spans(text)
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
    for m in _RUN.finditer(text):
        dense = m.group().translate(_DENSE)
        if len(dense) < (8 * (2 * PIECE_BYTES - 1) + 5) // 6:
            continue  # too short to hold 11 bytes
        if any(piece in decoded for decoded in _decodings(dense) for piece in pieces):
            start, stop = m.span()
            while text[start] in "\r\n":
                start += 1
            while text[stop - 1] in "\r\n":
                stop -= 1
            spans.append((start, stop))
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


def _escaped_spans(text: str) -> list[tuple[int, int]]:
    """The stretches of ``text`` whose escapes, decoded, spell a secret (however its writer
    chose which characters to escape: Java's URLEncoder, .NET's JSON writer...)."""
    spans = []
    given = [v for v in _given if len(v) >= MIN_SECRET_LENGTH]
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
