"""How the API reads a JSON request body: the one place its input rules live.

Litestar decodes bodies with msgspec, which takes nesting hundreds of levels deep, whose
errors ("Number out of range") do not say what to do, and whose conversion into the
handler's type is lenient (``"true"`` for ``true``). So the API's JSON endpoints use
:class:`JsonApiRequest`, whose :meth:`~JsonApiRequest.json` reads the body under these
rules before Litestar converts it into the handler's ``data`` type:

* :func:`json_only` (a guard): ``application/json`` only, so a page of another origin
  must preflight (no "simple" ``text/plain`` or form POST); an empty body needs no type.
* :func:`parse_json`: UTF-8, valid JSON, and the rules of :mod:`brain.service.json_limits`
  (which the MCP server applies too): no ``NaN``/``Infinity``, numbers of at most 100
  characters, at most 100 levels, no lone surrogates.
* :func:`check_fields`: the value is an object with only the body type's fields, each of
  the right type, refused with messages that name the field.

Each refusal is a 400 (415 for the type) whose ``detail`` says what was wrong.
"""

from __future__ import annotations

import json
import typing
from typing import Annotated, Any

import msgspec
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException
from litestar.handlers.base import BaseRouteHandler

from brain.service.json_limits import (
    MAX_JSON_DEPTH,
    JsonRefused,
    parse_number,
    refuse_constant,
    value_problem,
)


class JsonApiRequest(Request[Any, Any, Any]):
    """A request whose JSON body is read by :func:`parse_json` and :func:`check_fields`."""

    async def json(self) -> Any:
        """The body's JSON value (``None`` for a blank body), checked against the handler's
        ``data`` type; a 400 with a useful ``detail`` otherwise."""
        raw = await self.body()
        if not raw.strip():
            return None
        value = parse_json(raw)
        body_type = _struct_of(self.route_handler)
        if body_type is not None:
            check_fields(value, body_type)
        return value


def _struct_of(handler: BaseRouteHandler) -> type[msgspec.Struct] | None:
    """The Struct in the handler's ``data`` annotation (``RunRequest | None``), if any."""
    field = handler.parsed_data_field
    if field is None:
        return None
    for candidate in (field.annotation, *typing.get_args(field.annotation)):
        if isinstance(candidate, type) and issubclass(candidate, msgspec.Struct):
            return candidate
    return None


async def json_only(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: the body is ``application/json``, or empty with no ``Content-Type`` (415 else)."""
    given = connection.headers.get("content-type")
    media_type = (given or "").split(";", 1)[0].strip().lower()
    if media_type == "application/json":
        return
    if given is None and isinstance(connection, Request) and not await connection.body():
        return
    shown = f"Content-Type {given[:100]!r}" if given is not None else "no Content-Type"
    raise HTTPException(status_code=415, detail=f"this endpoint takes JSON: send the body with "
                                                f"Content-Type: application/json (got {shown})")


def parse_json(raw: bytes) -> Any:
    """The JSON value of a request body, or a 400 whose ``detail`` says what is wrong.

    Refused: bytes that are not UTF-8, invalid JSON, ``NaN``/``Infinity``, numbers longer
    than 100 characters, nesting deeper than 100 levels, and text with lone surrogates
    (which cannot be stored).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(status_code=400, detail=f"the request body is not UTF-8 text "
                                                    f"(byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=refuse_constant, parse_int=parse_number(int),
                           parse_float=parse_number(float))
    except RecursionError:
        raise HTTPException(status_code=400, detail=f"the request body is nested too deeply "
                                                    f"(at most {MAX_JSON_DEPTH} levels)") from None
    except JsonRefused as exc:
        raise HTTPException(status_code=400, detail=f"the request body is refused: {exc}") from None
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise HTTPException(status_code=400,
                            detail=f"the request body is not valid JSON: {exc}") from None
    found = value_problem(value)
    if found:
        raise HTTPException(status_code=400, detail=f"the request body is refused: {found[1]}")
    return value


#: How a wrong value of a field is worded, by the field's type.
_EXPECTED = {bool: "true or false", str: "a string", int: "a whole number", float: "a number"}


def check_fields(value: Any, body_type: type[msgspec.Struct]) -> None:
    """A 400 unless ``value`` is an object with only ``body_type``'s fields, each of its
    type (strictly: ``"true"`` is not ``true``).

    >>> check_fields({"wait": "yes"}, RunRequest)  # doctest: +SKIP
    HTTPException: 400: wait must be true or false
    """
    fields = msgspec.structs.fields(body_type)
    names = [f.encode_name for f in fields]
    if not isinstance(value, dict):
        example = ", ".join(f'"{f.encode_name}": {_example(f)}' for f in fields)
        raise HTTPException(status_code=400, detail=f"the request body must be a JSON object "
                                                    f"like {{{example}}}")
    unknown = set(value) - set(names)
    if unknown:
        spoken = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        raise HTTPException(status_code=400, detail=f"unknown fields {sorted(unknown)}: use {spoken}")
    for field in fields:
        if field.encode_name not in value:
            continue
        try:
            msgspec.convert(value[field.encode_name], field.type, strict=True)
        except msgspec.ValidationError as exc:
            plain = typing.get_args(field.type)[0] if typing.get_origin(field.type) is Annotated \
                else field.type
            wanted = _EXPECTED.get(plain, f"valid ({exc})")
            raise HTTPException(status_code=400,
                                detail=f"{field.encode_name} must be {wanted}") from None


def _example(field: msgspec.structs.FieldInfo) -> str:
    """How a field shows in the example of an object: its default, else ``...``."""
    if field.default is msgspec.NODEFAULT or field.default is None:
        return "..."
    return json.dumps(field.default)
