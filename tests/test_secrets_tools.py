"""Secrets in the encodings tools print (SPEC §11): base64 wrapped and indented, in quoted
lines or a JSON array, in groups; hex with spaces or colons; ``xxd`` and ``hexdump -C``
dumps. None of them keeps the secret, its base64 or its hex, nor, in a dump's character
column, a piece of the secret 8 characters long."""

from __future__ import annotations

import base64
import json
import shutil
import string
import subprocess
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import remembered

from brain._secrets import MIN_SECRET_LENGTH


def _scrubbed(value: str, text: str) -> str:
    from brain._secrets import scrub

    with remembered(value):
        return scrub(text) or ""


def _recoverable(value: str, text: str) -> bool:
    """Whether ``text`` still holds ``value``, its base64 or its hex once the spaces,
    quotes, commas, colons, brackets and line breaks around them are taken out."""
    dense = "".join(c for c in text if c not in " \t\r\n\"',:[]")
    data = value.encode()
    b64 = base64.b64encode(data).decode()
    return value in text or b64.rstrip("=")[1:-2] in dense or data.hex() in dense.lower()


def _wrap(text: str, width: int) -> list[str]:
    return [text[i:i + width] for i in range(0, len(text), width)]


def _dump(data: bytes, hexdump: bool) -> str:
    """``data`` as ``hexdump -C`` (or ``xxd``) prints it."""
    lines = []
    for i in range(0, len(data), 16):
        row = data[i:i + 16]
        chars = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        if hexdump:
            pairs = " ".join(f"{b:02x}" for b in row[:8]) + "  " + " ".join(f"{b:02x}" for b in row[8:])
            lines.append(f"{i:08x}  {pairs:<48}  |{chars}|")
        else:
            groups = " ".join(row[j:j + 2].hex() for j in range(0, len(row), 2))
            lines.append(f"{i:08x}: {groups:<39}  {chars}")
    return "\n".join(lines) + "\n"


FORMS: dict[str, Callable[[bytes, int, int], str]] = {
    "base64 wrapped and indented": lambda d, w, n: "\n".join(
        " " * n + line for line in _wrap(base64.b64encode(d).decode(), w)),
    "base64 lines in a JSON array": lambda d, w, n: json.dumps(
        _wrap(base64.b64encode(d).decode(), w), indent=n or None),
    "base64 lines quoted": lambda d, w, n: "\n".join(
        f'"{line}",' for line in _wrap(base64.b64encode(d).decode(), w)),
    "base64 in groups": lambda d, w, n: " ".join(_wrap(base64.b64encode(d).decode(), w % 8 + 1)),
    "hex with spaces": lambda d, w, n: "\n".join(
        " " + " ".join(f"{b:02x}" for b in d[i:i + 16]) for i in range(0, len(d), 16)),
    "hex with colons": lambda d, w, n: ":".join(f"{b:02X}" for b in d),
    "hexdump -C": lambda d, w, n: _dump(d, hexdump=True),
    "xxd": lambda d, w, n: _dump(d, hexdump=False),
}


@settings(max_examples=250, deadline=None)
@given(value=st.text(string.ascii_letters + string.digits + "-_.~!", min_size=MIN_SECRET_LENGTH,
                     max_size=60),
       how=st.sampled_from(sorted(FORMS)), prefix=st.binary(max_size=20),
       width=st.integers(4, 76), indent=st.integers(0, 8))
def test_a_secret_in_an_encoding_tools_print_is_scrubbed(value: str, how: str, prefix: bytes,
                                                         width: int, indent: int) -> None:
    """Anywhere in the encoded bytes (after ``prefix``), at any width and indentation."""
    text = FORMS[how](prefix + value.encode(), width, indent)
    out = _scrubbed(value, text)
    assert not _recoverable(value, out), (text, out)
    if how in ("hexdump -C", "xxd"):
        chars = "".join(line[-17:] for line in out.splitlines())  # the character columns
        assert not any(value[i:i + 8] in chars for i in range(len(value) - 7)), (text, out)


@pytest.mark.parametrize("argv", [["xxd"], ["hexdump", "-C"], ["od", "-An", "-tx1"],
                                  ["base64", "-w", "16"]])
def test_what_the_real_tools_print_is_scrubbed(argv: list[str]) -> None:
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed")
    value = "S3cr3tTok-Abc_123xyz-and-more"
    printed = subprocess.run(argv, input=b"user:" + value.encode(), capture_output=True,
                             timeout=10, check=True).stdout.decode()
    out = _scrubbed(value, "\n".join("    " + line for line in printed.splitlines()))
    assert not _recoverable(value, out), out
    assert not any(value[i:i + 8] in out for i in range(len(value) - 7)), out
