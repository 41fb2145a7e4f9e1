"""Where a secret shows in a hex dump as ``xxd`` and ``hexdump -C`` print it: its bytes in
hex, and its printable characters in the column beside them, 16 a line. This module
imports nothing of The Brain."""

from __future__ import annotations

import re
from collections.abc import Iterable

#: A dump line: an offset, bytes in hex (in pairs or groups of two, one or two spaces
#: apart), then, two spaces on, the bytes as characters (``|`` around them for hexdump).
_LINE = re.compile(r"(?m)^[ \t]*[0-9a-fA-F]{6,16}:? {1,2}(?P<hex>(?:[0-9a-fA-F]{2}){1,2}"
                   r"(?: {1,2}(?:[0-9a-fA-F]{2}){1,2})*) {2,}(?P<chars>\|.{1,16}\||.{1,16})[ \t\r]*$")
#: A piece of a secret this long in a dump line takes the line with it.
PIECE = 8


def dump_spans(text: str, given: Iterable[str]) -> list[tuple[int, int]]:
    """The dump lines of ``text`` (from their hex to their last character) that show a
    secret: each line holding :data:`PIECE` consecutive bytes of one (in its hex or in
    its character column: a secret printed 16 bytes a line shows a piece at the end of
    the line it starts on and at the start of the one it ends on), and every line of a
    run of dump lines whose bytes hold a secret whole."""
    if ":" not in text and "|" not in text:
        return []
    lines = [m for m in _LINE.finditer(text)]
    if not lines:
        return []
    secrets = [v.encode("utf-8", "replace") for v in given]
    pieces = {s[i:i + PIECE] for s in secrets for i in range(len(s) - PIECE + 1)}
    spans: list[tuple[int, int]] = []
    block: list[re.Match[str]] = []
    data = b""
    for m in lines:
        if block and m.start() != block[-1].end() + 1 and \
                text[block[-1].end():m.start()].strip() != "":
            spans += _whole(block, data, secrets)
            block, data = [], b""
        line = _bytes(m["hex"])
        chars = m["chars"].strip("|").encode("utf-8", "replace")
        if any(part[i:i + PIECE] in pieces for part in (line, chars)
               for i in range(len(part) - PIECE + 1)):
            spans.append((m.start("hex"), m.end("chars")))
        block.append(m)
        data += line
    return spans + _whole(block, data, secrets)


def _bytes(hex_part: str) -> bytes:
    digits = hex_part.replace(" ", "")
    return bytes.fromhex(digits[:len(digits) // 2 * 2])


def _whole(block: list[re.Match[str]], data: bytes, secrets: list[bytes]) -> list[tuple[int, int]]:
    """Every line of ``block`` when its bytes, ``data``, hold a secret whole."""
    if any(s in data for s in secrets):
        return [(m.start("hex"), m.end("chars")) for m in block]
    return []
