"""The forms a secret value takes when code prints it: quoted, escaped, encoded.

:func:`quoted_forms` are looked for as they are; :func:`encoded_needles` inside encoded
runs (see :mod:`brain._secrets.runs`). This module imports nothing of The Brain.
"""

from __future__ import annotations

import base64
import json
import re

MIN_SECRET_LENGTH = 8

_URLSAFE = str.maketrans("+/", "-_")
#: How Go's encoding/json writes the characters HTML gives meaning to.
_GO_JSON = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})
#: Where the usual tools break an encoding into lines: ``base64`` (and Python's
#: ``encodebytes``) every 76 characters, PEM every 64, ``xxd -p`` every 60.
_WRAP_WIDTHS = (76, 64, 60)


def quoted_forms(value: str) -> set[str]:
    """``value`` inside a JSON string, inside Python's ``repr``, URL-quoted (with and
    without ``/`` kept, as a path or a query value), as non-UTF-8 bytes read back with
    replacement characters, and each of its lines; those long enough to scrub."""
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
    return {f for f in forms if len(f) >= MIN_SECRET_LENGTH}


def _lower_escapes(text: str) -> str:
    """``text`` with its URL escapes in lower case (``%2f``)."""
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), text)


def _utf8(value: str) -> bytes:
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no decoding made: as stored, replaced
        return value.encode("utf-8", "replace")


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


def _core(data: bytes, offset: int) -> str:
    """The base64 characters made of ``data``'s bits only when it starts ``offset`` bytes
    into a longer encoded stream: ``offset`` bytes before it, zeros after it up to a whole
    3-byte group, and the characters from the first whose 6 bits all lie inside ``data``
    to the last such one."""
    padded = bytes(offset) + data + bytes(-(offset + len(data)) % 3)
    first = -(-8 * offset // 6)
    last = 8 * (offset + len(data)) // 6
    return base64.b64encode(padded).decode("ascii")[first:last]


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
    data = _utf8(value)
    whole = base64.b64encode(data).decode("ascii")
    forms = {data.hex(), data.hex().upper(), whole, whole.rstrip("=")}
    forms |= {_core(data, offset) for offset in range(3)}
    forms |= {form.translate(_URLSAFE) for form in forms}
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


def encoded_needles(value: str) -> set[str]:
    """What encoded runs are searched for: ``value``'s hex (both cases) and, in both
    alphabets, its base64 *core* at each of the three offsets (see :func:`encoded_forms`).
    Every base64 text whose decoding, read at the right character, holds the value
    contains one of the cores; so the value encoded alone, padded or not, needs no form
    of its own."""
    data = _utf8(value)
    forms = {data.hex(), data.hex().upper()}
    for offset in range(3):
        core = _core(data, offset)
        forms |= {core, core.translate(_URLSAFE)}
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}
