"""Counting the JSON values of an answer as its bytes stream in (SPEC §17, §18): the count
of :class:`StructureCounter` is checked against one computed from the parsed value, for
JSON of any shape and text of any content, written any way, split into chunks anywhere.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from json_values import structure_count

from brain.executors.json_budget import StructureCounter, structure_limit

#: Text of any content, weighted towards what JSON writes as structure or escapes.
TEXT = st.text(alphabet=st.one_of(st.sampled_from('{}[],:"\\\n\r\t\x01 '),
                                  st.characters(blacklist_categories=("Cs",))),
               max_size=40)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                    TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=6), st.dictionaries(TEXT, inner, max_size=6)), max_leaves=40)
#: How a JSON text may be written: compact, spaced, indented, with or without escapes.
WRITINGS = st.fixed_dictionaries({
    "ensure_ascii": st.booleans(),
    "indent": st.sampled_from([None, 0, 2, "\t"]),
    "separators": st.sampled_from([None, (",", ":"), (" , ", " : ")]),
})




def chunks(raw: bytes, cuts: list[int]) -> list[bytes]:
    """``raw`` cut at the given offsets (each taken modulo its length, so anywhere)."""
    points = sorted({c % (len(raw) + 1) for c in cuts})
    return [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]


@settings(max_examples=300, deadline=None)
@given(value=VALUES, writing=WRITINGS, cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_the_count_is_the_parsed_values_whatever_the_writing_and_the_chunks(
        value: Any, writing: dict[str, Any], cuts: list[int]) -> None:
    """Split anywhere (inside a string, an escape, a multibyte character), any spacing,
    escaped or raw UTF-8: the count is the reference count of the parsed value, and the
    limit passes exactly when the count is within it."""
    raw = json.dumps(value, **writing).encode()
    expected = structure_count(json.loads(raw))
    for limit, within in ((expected, True), (expected - 1, False)):
        counter = StructureCounter(limit)
        results = [counter.feed(chunk) for chunk in chunks(raw, cuts)]
        assert counter.count == expected
        assert all(results) is within


@settings(max_examples=200, deadline=None)
@given(values=st.lists(VALUES, min_size=1, max_size=4), newline=st.sampled_from(
    ["\n", "\r\n", "\r"]), cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_each_event_of_a_stream_is_counted_apart(values: list[Any], newline: str,
                                                 cuts: list[int]) -> None:
    """A ``text/event-stream``: each event is a message of its own (its ``event:`` and
    ``data:`` lines add a ``:`` each); a message over the limit fails, its neighbours'
    counts never add to it, whatever line breaks and chunks."""
    events = [f"event: message{newline}data: {json.dumps(v)}{newline}{newline}"
              for v in values]
    raw = "".join(events).encode()
    largest = max(structure_count(v) + 2 for v in values)
    for limit, within in ((largest, True), (largest - 1, False)):
        counter = StructureCounter(limit, events=True)
        results = [counter.feed(chunk) for chunk in chunks(raw, cuts)]
        assert all(results) is within


@settings(max_examples=50, deadline=None)
@given(text=TEXT.filter(bool), max_output=st.integers(min_value=1, max_value=1 << 20))
def test_text_of_any_content_up_to_the_output_never_counts(text: str,
                                                           max_output: int) -> None:
    """An answer carrying ``max_output_bytes`` of text, braces and commas included, counts
    only its envelope, far within the limit for any ``max_output_bytes``."""
    body = (text * (max_output // len(text.encode()) + 1)).encode()[:max_output]
    content = body.decode("utf-8", errors="ignore")
    answer = {"choices": [{"message": {"role": "assistant", "content": content}}],
              "structuredContent": {"text": content}}
    counter = StructureCounter(structure_limit(max_output))
    raw = json.dumps(answer).encode()
    assert all(counter.feed(raw[i:i + 65536]) for i in range(0, len(raw), 65536))
    assert counter.count == structure_count(answer) == 13  # the envelope alone


def test_a_string_torn_by_a_line_break_ends_there() -> None:
    """JSON allows no raw line break in a string: one ends the string here, so a quote in
    an event's framing line (``id: "``) cannot hide the next line's structure."""
    counter = StructureCounter(10, events=True)
    assert not counter.feed(b'id: "\ndata: [' + b"{}," * 10 + b"{}]\n\n")
    counter = StructureCounter(10)
    counter.feed(b'"abc\n[{},{}]')
    assert counter.count == 4
