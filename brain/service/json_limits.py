"""What JSON The Brain takes from outside: the one place the number, depth and text rules of
its doors live (SPEC §7 for the API, §23 for the MCP server).

* No ``NaN``/``Infinity``: they are not JSON, and a run's parameters must be.
* Numbers of at most :data:`MAX_JSON_NUMBER_CHARS` characters as written (longer ones are
  meant as text, or are an attack on what parses them).
* At most :data:`MAX_JSON_DEPTH` levels of nesting.
* Text holds no lone surrogate (which cannot be stored).

The API reads request bodies as text (:mod:`brain.server.json_input` hooks
:func:`parse_number` and :func:`refuse_constant` into its JSON reader, then asks
:func:`value_problem`); the MCP server gets arguments the SDK parsed already, so it asks
:func:`value_problem` only, which checks numbers by their value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NoReturn

# Limits on JSON from outside: deeper or longer than any real payload, far below what costs.
MAX_JSON_DEPTH = 100
MAX_JSON_NUMBER_CHARS = 100
#: Integers this many bits or longer are far past the limit: refused without writing them out
#: (Python refuses to write integers of more than 4300 digits anyway).
_HUGE_INT_BITS = 4 * MAX_JSON_NUMBER_CHARS

#: Where a problem is in a JSON value: the keys and indexes leading to it.
Location = tuple[str | int, ...]


class JsonRefused(ValueError):
    """Valid-looking JSON that The Brain will not take (``NaN``, huge numbers, ...)."""


def constant_problem(name: str) -> str:
    """What is said of ``NaN``, ``Infinity`` or ``-Infinity`` in JSON."""
    return f"{name} is not JSON; send null or a string instead"


def number_problem(text: str, value: float) -> str | None:
    """What is wrong with the JSON number written ``text`` (read as ``value``), if anything."""
    if len(text) > MAX_JSON_NUMBER_CHARS:
        return (f"a number with {len(text)} characters is too long (at most "
                f"{MAX_JSON_NUMBER_CHARS}); send it as a string")
    if not math.isfinite(value):
        return f"the number {text} is out of range; send it as a string"
    return None


def parse_number(kind: type[int] | type[float]) -> Callable[[str], Any]:
    """A ``parse_int``/``parse_float`` hook for :func:`json.loads` that raises
    :class:`JsonRefused` for a number :func:`number_problem` refuses."""

    def parse(text: str) -> Any:
        if len(text) > MAX_JSON_NUMBER_CHARS:  # before converting: int() of it is costly
            raise JsonRefused(number_problem(text, 0))
        value = kind(text)
        problem = number_problem(text, value)
        if problem:
            raise JsonRefused(problem)
        return value

    return parse


def refuse_constant(name: str) -> NoReturn:
    """A ``parse_constant`` hook for :func:`json.loads`: ``NaN`` and the infinities are not
    JSON."""
    raise JsonRefused(constant_problem(name))


def _number_value_problem(value: int | float) -> str | None:
    if isinstance(value, float):
        if math.isnan(value):
            return constant_problem("NaN")
        if math.isinf(value):
            return constant_problem("Infinity" if value > 0 else "-Infinity")
        return number_problem(repr(value), value)
    if value.bit_length() >= _HUGE_INT_BITS:
        return (f"a number with more than {MAX_JSON_NUMBER_CHARS} characters is too long; "
                f"send it as a string")
    return number_problem(str(value), 0)


def value_problem(value: Any) -> tuple[Location, str] | None:
    """Where and what is wrong with a parsed JSON value under the rules above, if anything:
    nested too deep, a number that is not finite or too long, a string with a lone
    surrogate. Walked without recursion (the value may be deep on purpose).

    >>> value_problem({"x": [1, float("nan")]})
    (('x', 1), 'NaN is not JSON; send null or a string instead')
    """
    stack: list[tuple[Any, Location]] = [(value, ())]
    while stack:
        item, where = stack.pop()
        if len(where) >= MAX_JSON_DEPTH:
            return where, f"it is nested more than {MAX_JSON_DEPTH} levels deep"
        if isinstance(item, dict):
            for key, inner in item.items():
                if isinstance(key, str) and (problem := _text_problem(key)):
                    return (*where, key), problem
                stack.append((inner, (*where, str(key))))
        elif isinstance(item, list):
            stack.extend((inner, (*where, index)) for index, inner in enumerate(item))
        elif isinstance(item, str):
            if problem := _text_problem(item):
                return where, problem
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            if problem := _number_value_problem(item):
                return where, problem
    return None


def _text_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return r"a string holds a lone surrogate (such as \ud800), which is not text"
    return None
