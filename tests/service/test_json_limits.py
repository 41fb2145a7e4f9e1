"""The JSON rules of The Brain's doors (:mod:`brain.service.json_limits`): a value parsed
elsewhere (the MCP SDK's arguments) is judged exactly as the API judges the same JSON text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brain.service.json_limits import MAX_JSON_NUMBER_CHARS, value_problem

NUMBERS = st.one_of(st.integers(), st.integers(-10**120, 10**120), st.floats(),
                    st.sampled_from([10**99, 10**100, -10**99, -10**100, 2**400]))
VALUES = st.recursive(st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=4)),
                      lambda inner: st.one_of(st.lists(inner, max_size=3),
                                              st.dictionaries(st.text(max_size=3), inner,
                                                              max_size=3)),
                      max_leaves=8)


def _api_takes(text: str) -> bool:
    """The oracle: the API's own reading of a request body."""
    from litestar.exceptions import HTTPException

    from brain.server.json_input import parse_json

    try:
        parse_json(text.encode("utf-8", "surrogatepass"))
    except HTTPException:
        return False
    return True


def _written(value: Any) -> str:
    """The value as JSON text as Python writes it (NaN and the infinities by name, text
    escaped to ASCII, so a lone surrogate shows as ``\\ud800`` the way a client sends it)."""
    return json.dumps(value)


@given(VALUES)
def test_a_parsed_value_is_refused_exactly_when_its_json_text_is(value: Any) -> None:
    text = _written(value)
    found = value_problem(value)
    assert (found is None) == _api_takes(text), (text, found)


@pytest.mark.parametrize(("value", "where", "words"), [
    ({"x": float("nan")}, ("x",), "NaN is not JSON"),
    ({"x": [1, float("-inf")]}, ("x", 1), "-Infinity is not JSON"),
    ({"n": 10**MAX_JSON_NUMBER_CHARS}, ("n",), "too long"),
    ({"n": -(10**5000)}, ("n",), "too long"),
    ({"s": {"t": "\ud800"}}, ("s", "t"), "lone surrogate"),
    ({"\udfff": 1}, ("\udfff",), "lone surrogate"),
])
def test_a_refusal_names_where_it_is(value: Any, where: tuple[Any, ...], words: str) -> None:
    found = value_problem(value)
    assert found is not None
    assert found[0] == where and words in found[1]


def test_depth_is_counted_as_the_api_counts_it() -> None:
    def nested(levels: int) -> Any:
        value: Any = 1
        for _ in range(levels):
            value = [value]
        return value

    for levels in (99, 100, 101, 5000):
        assert (value_problem(nested(levels)) is None) == _api_takes(
            "[" * levels + "1" + "]" * levels)
