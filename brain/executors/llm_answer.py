"""Reading what an LLM endpoint answers (SPEC §2, §18), whatever it sends: the body read as
it streams in, within bounds made from the step's ``max_output_bytes``; decoded (gzip and
deflate, though not asked for); parsed as JSON; its ``usage`` counted; its content taken.

Two bounds hold before anything is parsed: the bytes (:func:`answer_limit`, 7 MiB for the
default 1 MiB output) and the JSON values they may hold
(:func:`~brain.executors.json_budget.structure_limit`, counted as they stream in): 7 MiB of
``{},{},…`` would be millions of Python objects. Past either, the step fails at once (an
answer that large would come again).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from brain._errors import StepFailed
from brain._secrets import longest, scrub
from brain.executors.json_budget import StructureCounter

if TYPE_CHECKING:
    import httpx

    from brain.executors.steplog import StepLog

#: The most characters of a body shown in an error.
BODY_PREVIEW = 300
#: The most characters of a body read (and scrubbed) to make its preview.
PREVIEW_SCAN = 16384
#: The most bytes of an error answer read: its preview and usage are in its first few.
ERROR_BODY_BYTES = 65536
#: An answer may be this many times bigger than its content: JSON writes a character of
#: text in at most 6 bytes (``\u0001``; ``\ud83d\ude00`` is 12 bytes for 4 of UTF-8).
ANSWER_BYTES_PER_OUTPUT_BYTE = 6
#: Room in an answer for what is not its content: ids, usage, and the ``reasoning_content``
#: of a reasoning model (tens of thousands of tokens).
ANSWER_MARGIN_BYTES = 1 << 20
#: The most tokens one answer's ``usage`` may report per kind; more is not a real count.
MAX_USAGE_TOKENS = 10**9
EMPTY_CONTENT = ("the model returned empty content; a reasoning model likely needs larger "
                 "max_tokens and timeout_seconds (e.g. max_tokens=8000, timeout_seconds=600)")


def answer_limit(max_output_bytes: int) -> int:
    """The most bytes of an HTTP answer read for a step whose output may be
    ``max_output_bytes``: its content at its most escaped, plus room for the rest."""
    return ANSWER_BYTES_PER_OUTPUT_BYTE * max_output_bytes + ANSWER_MARGIN_BYTES


def output_bytes(limit: int) -> int:
    """The ``max_output_bytes`` an answer ``limit`` was made for (see :func:`answer_limit`)."""
    return (limit - ANSWER_MARGIN_BYTES) // ANSWER_BYTES_PER_OUTPUT_BYTE


def preview(text: str, *, cut: bool = False) -> str:
    """The start of a body, on one line, scrubbed of secrets: only its first
    :data:`PREVIEW_SCAN` characters are read (scrubbing megabytes would hold the loop).
    ``cut``: ``text`` is already the start of a longer body."""
    cut = cut or len(text) > PREVIEW_SCAN
    # Scrubbed before its whitespace is folded (a secret may hold a newline or two spaces),
    # and after (folding may put together a secret's words).
    text = scrub(" ".join((scrub(text[:PREVIEW_SCAN]) or "").split())) or ""
    if cut:  # its last characters may be the start of a secret the cut split: dropped
        text = text[:max(len(text) - longest(), 0)]
    return text[:BODY_PREVIEW] + ("…" if cut or len(text) > BODY_PREVIEW else "")


def shown_body(raw: bytes) -> str:
    """:func:`preview` of a body as received (only its start is decoded)."""
    return preview(raw[:PREVIEW_SCAN].decode("utf-8", errors="replace"),
                   cut=len(raw) > PREVIEW_SCAN)


async def read_within(response: httpx.Response, limit: int, shown: str,
                      values: StructureCounter | None = None) -> tuple[bytes, bool]:
    """The body of ``response`` as it comes, decoded, and whether it is whole: reading stops
    past ``limit`` bytes (or before any, when its announced length is over), so whatever a
    server sends, no more than ``limit`` plus one read is held. With ``values``, the decoded
    bytes are counted too, and past its limit the step fails at once (``shown``: the
    endpoint as it may be shown)."""
    decode = _decoder(response.headers.get("content-encoding"), shown)
    if decode is None:
        announced = response.headers.get("content-length", "")
        if announced.isdigit() and int(announced) > limit:
            return b"", False
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        part = chunk if decode is None else decode(chunk, limit - size + 1)
        parts.append(part)
        size += len(part)
        if size > limit:
            return b"".join(parts)[:limit], False
        if values is not None and not values.feed(part):
            raise StepFailed(f"the answer from {shown} holds more than {values.limit} JSON "
                             f"values (counted as the braces, brackets, commas and colons "
                             f"outside its strings), more than an output of max_output_bytes "
                             f"({output_bytes(limit)} bytes) needs; stopped reading it",
                             retryable=False)
    return b"".join(parts), True


def _decoder(encoding: str | None, shown: str) -> Callable[[bytes, int], bytes] | None:
    """How to decode a body sent with Content-Encoding ``encoding`` yielding at most the
    bytes asked for at each step (``None``: not encoded). gzip and deflate are read (a server
    may compress though asked not to); any other coding fails the step, saying so."""
    codings = [c for c in (encoding or "").lower().replace(" ", "").split(",")
               if c and c != "identity"]
    if not codings:
        return None
    if codings not in (["gzip"], ["x-gzip"], ["deflate"]):
        raise StepFailed(f"the answer from {shown} is encoded as {encoding!r}, which an llm() "
                         f"step does not read (it asks for no encoding)", retryable=False)
    import zlib

    unpack = zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or a zlib header, as it comes

    def decode(data: bytes, most: int) -> bytes:
        try:
            return unpack.decompress(data, most)
        except zlib.error as exc:
            raise StepFailed(f"the answer from {shown} does not decode as {encoding}: {exc}",
                             retryable=False) from None

    return decode


class _LongNumber:
    """A JSON integer too long to be any count (``int()`` of over 4300 digits raises)."""

    __slots__ = ("digits",)

    def __init__(self, digits: str) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"{self.digits[:12]}… ({len(self.digits)} digits)"


def _whole_number(text: str) -> int | _LongNumber:
    return int(text) if len(text) <= 30 else _LongNumber(text)


#: What :func:`json_of` gives for a body that is not JSON.
NOT_JSON = object()


def json_of(raw: bytes) -> Any:
    """The body parsed as JSON, or :data:`NOT_JSON` when it is not JSON. Read as UTF-8 only
    (what the JSON standard allows, a leading BOM aside): values were counted on its bytes as
    such, and ``json.loads`` would read UTF-16 or UTF-32 bytes too."""
    try:
        return json.loads(raw.decode("utf-8-sig"), parse_int=_whole_number)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # nested past the limit
        return NOT_JSON


def _sane_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) \
        and 0 <= value <= MAX_USAGE_TOKENS


def count_usage(data: Any, log: StepLog | None) -> None:
    """Count an answer's ``usage`` (SPEC §18) in the step's log: whole numbers from 0 to
    :data:`MAX_USAGE_TOKENS`; any other value is left out, with a line of the log saying so."""
    if log is None or not isinstance(data, dict):
        return
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return
    counts: dict[str, int] = {}
    for kind in ("prompt_tokens", "completion_tokens"):
        if kind not in usage:
            continue
        value = usage[kind]
        if _sane_count(value):
            counts[kind] = value
        else:
            shown = json.dumps(value, default=repr, ensure_ascii=False)
            shown = shown[:40] + ("…" if len(shown) > 40 else "")
            log.say(f"usage: {kind} ignored, not a whole number from 0 to "
                    f"{MAX_USAGE_TOKENS}: {shown}")
    if counts:
        log.count_usage(counts.get("prompt_tokens", 0), counts.get("completion_tokens", 0))


def answer_content(raw: bytes, shown: str, log: StepLog | None,
                   seen: dict[str, Any] | None = None) -> str:
    """The content text of a whole successful answer, ``choices[0].message.content`` (its
    usage counted in ``log``; ``seen["answer"]``: the answer's JSON object, for its trace);
    an answer that is not JSON, has no such text or an empty one fails the step at once,
    saying so."""
    data = json_of(raw)
    if seen is not None and isinstance(data, dict):
        seen["answer"] = data
    if data is NOT_JSON:
        raise StepFailed(f"the answer from {shown} is not JSON: {shown_body(raw)}",
                         retryable=False)
    count_usage(data, log)
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        content = False
    if content is False or not (content is None or isinstance(content, str)):
        raise StepFailed(f"the answer from {shown} has no choices[0].message.content text: "
                         f"{shown_body(raw)}", retryable=False)
    if not content:
        raise StepFailed(EMPTY_CONTENT, retryable=False)
    return str(content)
