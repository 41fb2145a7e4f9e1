"""``brain run``'s parameters: ``-p NAME=VALUE`` (repeatable) and ``--params JSON``.

A ``-p`` value is JSON when its parameter is not a ``str`` and the value parses as JSON,
else it is the text itself: ``-p dry_run=true`` is ``True``, ``-p count=3`` is ``3``,
``-p service=api`` is ``"api"``, and ``-p version=1.2`` is ``"1.2"`` when ``version`` is a
``str``. ``-p`` values override the keys of ``--params``. The workflow validates what comes
out (:meth:`brain.workflow.Workflow.validate_params`): nothing here decides a value's type.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
from typing import Any


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def param_option(text: str) -> tuple[str, str]:
    """``-p NAME=VALUE`` as ``(name, value)`` (the value as typed: it is read later, once
    the parameter's type is known); anything else is a usage error.

    >>> param_option("service=api=v2")
    ('service', 'api=v2')
    """
    name, equals, value = text.partition("=")
    if not equals or not name.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a parameter: write it as NAME=VALUE, e.g. -p service=api")
    return name.strip(), value


def params_option(text: str) -> dict[str, Any]:
    """``--params JSON``: a JSON object of parameters; anything else is a usage error."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--params is not JSON: {exc}") from None
    except RecursionError:
        raise argparse.ArgumentTypeError("--params is nested too deeply to be read") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            '--params must be a JSON object of parameters, e.g. \'{"service": "api"}\'')
    return value


def is_text_parameter(schema: Mapping[str, Any], name: str) -> bool:
    """Whether the parameter ``name`` of a workflow's ``params_schema`` is a ``str`` (its
    ``-p`` value is then always the text itself). An unknown name is not: its value is
    read as JSON when it parses, and validation says what is wrong with it."""
    prop = (schema.get("properties") or {}).get(name)
    return isinstance(prop, Mapping) and prop.get("type") == "string"


def cli_value(text: str, *, as_text: bool) -> Any:
    """One ``-p`` value: the text itself for a ``str`` parameter, else its JSON value when
    it parses as JSON (``true``, ``3``, ``[1, 2]``, ``{"a": 1}``), else the text.

    >>> cli_value("true", as_text=False), cli_value("true", as_text=True)
    (True, 'true')
    """
    if as_text:
        return text
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # NaN, Infinity (no JSON numbers), absurd nesting
        return text


def raw_params(schema: Mapping[str, Any], options: Iterable[tuple[str, str]],
               base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The parameters ``brain run`` passes on: ``--params``'s object (``base``), each
    ``-p NAME=VALUE`` of ``options`` read by :func:`cli_value` overriding its key."""
    raw = dict(base or {})
    for name, text in options:
        raw[name] = cli_value(text, as_text=is_text_parameter(schema, name))
    return raw
