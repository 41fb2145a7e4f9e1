"""How ``brain run`` reads ``-p NAME=VALUE`` and ``--params JSON``: a ``-p`` value is JSON
when its parameter is not a ``str`` and the value parses as JSON, else the text itself;
``-p`` overrides ``--params``' keys. Checked with hypothesis on the functions themselves
(tests/cli/test_params_cli.py runs the command)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brain.cli.params import cli_value, param_option, params_option, raw_params

SCHEMA = {"type": "object", "properties": {
    "service": {"type": "string"}, "version": {"type": "string", "default": "latest"},
    "replicas": {"type": "integer"}, "dry_run": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string"}}}}

# JSON values hypothesis can write (no NaN: JSON has none).
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(), lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


def parses_as_json(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError:
        return False, None


# --- the rule, as a function ----------------------------------------------------------------------


@given(st.text())
def test_a_str_parameter_takes_the_text_itself(text: str) -> None:
    assert cli_value(text, as_text=True) == text
    assert raw_params(SCHEMA, [("service", text)]) == {"service": text}


@given(st.text())
def test_another_parameter_takes_json_when_it_parses_else_the_text(text: str) -> None:
    parses, value = parses_as_json(text)
    got = raw_params(SCHEMA, [("replicas", text)])["replicas"]
    if parses:
        assert got == value and type(got) is type(value)
    else:
        assert got == text


@given(JSON_VALUES)
def test_any_json_value_written_out_comes_back_for_a_typed_parameter(value: Any) -> None:
    assert raw_params(SCHEMA, [("tags", json.dumps(value))]) == {"tags": value}


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_text_not_numbers(text: str) -> None:
    value = cli_value(text, as_text=False)
    assert value == text and not (isinstance(value, float) and math.isnan(value))


def test_p_overrides_params_keys_and_later_p_wins() -> None:
    got = raw_params(SCHEMA, [("replicas", "2"), ("replicas", "3"), ("version", "1.2")],
                     {"service": "api", "replicas": 9, "version": "old"})
    assert got == {"service": "api", "replicas": 3, "version": "1.2"}


@pytest.mark.parametrize("text", ["service", "=api", ""])
def test_a_p_without_name_equals_value_is_a_usage_error(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=VALUE"):
        param_option(text)


@pytest.mark.parametrize("text", ["[1]", '"x"', "{", "NaN", '{"a": NaN}'])
def test_params_must_be_a_json_object(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--params"):
        params_option(text)
