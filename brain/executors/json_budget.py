"""How many JSON values a remote answer holds, counted while its bytes stream in, before it
is parsed (SPEC §17, §18).

Bounding an answer's bytes does not bound the memory its parse takes: 7 MiB of ``{},{},…``
is 2.4 million dicts, hundreds of megabytes once the MCP SDK and pydantic have parsed and
validated it. What a parse builds grows with the answer's *structure*: every value but the
first is announced by a ``,`` or ``:`` outside any string, and every container by its ``{``
or ``[``. :class:`StructureCounter` counts those characters (outside strings only, so text of
any content counts nothing) chunk by chunk, and the reader stops once the count passes
:func:`structure_limit`.

The count is exact for any valid JSON however it is spaced (the tests check it against one
computed from the parsed value). For input that is not valid JSON it never counts less than
the parse would build: a raw line break, which JSON does not allow in a string, ends one
here. In a ``text/event-stream`` (whose ``data:`` lines carry JSON) each event is a message
of its own, counted from zero, its framing adding a ``:`` per line.
"""

from __future__ import annotations

import re

#: An answer may hold one structural character per this many bytes of the step's
#: ``max_output_bytes``...
OUTPUT_BYTES_PER_STRUCTURE = 8
#: ...plus this many, for its envelope (ids, usage, a tool result's fields: a few dozen). An
#: event stream's notifications come as events of their own, each counted apart.
STRUCTURE_MARGIN = 16 * 1024

#: The characters a parse makes something of: a container, or one more value or key.
_STRUCTURAL = b"{[,:"
#: A string, from its opening quote: anything but a quote, a backslash or a line break, or
#: an escape (a backslash and the character after it); then its closing quote (the group),
#: or none where a line break, the chunk's end or a backslash at its end stops it. It always
#: matches at a quote, so a scan never starts again inside a string.
_STRING = re.compile(rb'"[^"\\\r\n]*(?:\\[^\r\n][^"\\\r\n]*)*("?)')
#: The rest of a string begun in an earlier chunk (the same, without its opening quote).
_STRING_REST = re.compile(rb'[^"\\\r\n]*(?:\\[^\r\n][^"\\\r\n]*)*')
#: A blank line, which ends an event: two line breaks in a row (CRLF, CR or LF; a CR at the
#: chunk's end is one, whatever follows it, as for the SDK's parser).
_BLANK_LINE = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")


def structure_limit(max_output_bytes: int) -> int:
    """The most structural characters (``{``, ``[``, ``,`` and ``:`` outside strings) an
    answer may hold for a step whose output may be ``max_output_bytes``:
    ``max_output_bytes // 8 + 16384`` (147,456 for the default 1 MiB).

    Text never counts, whatever it holds (commas and braces in a string are not structure),
    so an answer carrying ``max_output_bytes`` of text always passes. Structured data does:
    a ``structuredContent`` of records like ``{"id": 12, "name": "abc"}`` counts about one
    per five bytes, so up to about 60% of the default output passes as such records. At the
    limit, a message of the tiniest values (``[{},{},…]``) left ``brain run`` peaking at
    about 100 MB, as a small answer does (``bench/hostile_mcp.py``), where the byte bound's
    worth of them (7 MiB) took it to 900 MB."""
    return max_output_bytes // OUTPUT_BYTES_PER_STRUCTURE + STRUCTURE_MARGIN


class StructureCounter:
    """Counts the structural characters of JSON fed in chunks of bytes (UTF-8), split
    anywhere, even inside a string or an escape, and says when a message holds more than
    ``limit``. A message is the whole text, or with ``events`` each event of a
    ``text/event-stream`` (the lines up to a blank one: each is parsed on its own).

    Each chunk is scanned by regular expressions and bytes methods (no Python step per byte;
    one inside the regular expression engine per string), so counting a megabyte takes a few
    milliseconds."""

    def __init__(self, limit: int, *, events: bool = False) -> None:
        self.limit = limit
        self.events = events
        #: Structural characters of the message in progress so far.
        self.count = 0
        self._in_string = False
        self._escaped = False  # inside a string, after a backslash that ended a chunk
        self._breaks = b""  # the line breaks the last chunk ended with (events)

    def feed(self, chunk: bytes) -> bool:
        """Count ``chunk``, the next bytes; ``False`` when a message in it (or the one in
        progress) holds more than the limit."""
        if not self.events:
            return self._scan(chunk) <= self.limit
        # A blank line split between chunks is found with the line breaks ending the last
        # one (they count nothing and end any string: scanning them again changes nothing).
        joined = self._breaks + chunk if self._breaks else chunk
        end = joined[-2:]
        self._breaks = end[len(end.rstrip(b"\r\n")):]
        parts = _BLANK_LINE.split(joined)
        within = self._scan(parts[0]) <= self.limit
        if len(parts) > 1:
            # Events the chunk holds whole: only one longer than the limit can pass it.
            if max(map(len, parts[1:-1]), default=0) > self.limit:
                within = within and all(self._restart(part) <= self.limit
                                        for part in parts[1:-1])
            within = self._restart(parts[-1]) <= self.limit and within
        return within

    def _restart(self, part: bytes) -> int:
        """Count ``part`` as the start of a new message (after a blank line, which ends any
        string)."""
        self.count = 0
        self._in_string = self._escaped = False
        return self._scan(part)

    def _scan(self, chunk: bytes) -> int:
        """Count ``chunk``, the next bytes of the message in progress; return its count."""
        if not chunk:
            return self.count
        start = self._string_rest(chunk) if self._in_string else 0
        if start >= len(chunk):
            return self.count
        # Outside text and strings, alternating (outside, closing quote, outside, ...).
        parts = _STRING.split(chunk[start:] if start else chunk)
        if len(parts) > 1 and not parts[-2] and parts[-1] in (b"", b"\\"):
            # The last string is not closed: the chunk ends in it (after a backslash: in
            # an escape), and it goes on in the next one.
            self._in_string = True
            self._escaped = parts[-1] == b"\\"
        outside = b"".join(parts[::2])
        self.count += len(outside) - len(outside.translate(None, _STRUCTURAL))
        return self.count

    def _string_rest(self, chunk: bytes) -> int:
        """Where the string the last chunk ended in ends in ``chunk`` (past its closing
        quote), or ``len(chunk)`` if it goes on."""
        start = 0
        if self._escaped:
            self._escaped = False
            if chunk[:1] in (b"\r", b"\n"):  # not a JSON escape: a line break ends a string
                self._in_string = False
                return 0
            start = 1
        end = _STRING_REST.match(chunk, start).end()  # type: ignore[union-attr]  # always matches
        if end == len(chunk):
            return end
        stop = chunk[end:end + 1]
        if stop == b"\\":  # a backslash: the chunk ends after it, or a line break follows
            if end + 1 == len(chunk):
                self._escaped = True
                return len(chunk)
            self._in_string = False
            return end + 1
        self._in_string = False
        return end + 1 if stop == b'"' else end
