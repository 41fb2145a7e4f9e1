"""A workflow's run form, read from its ``params_schema``: one typed field per parameter.

``str`` is a text box, ``int`` and ``float`` number boxes, ``bool`` a checkbox, a
``Literal`` or an enum a list to pick from, and anything else (a list, a dict, a model) a
JSON text area. Required parameters are marked; defaults are filled in. The page's script
(``static/run_form.js``) reads each field by its ``kind``, posts ``{"params": ...}`` to
``POST /api/workflows/{name}/runs``, and shows a 422's errors beside the fields they
name (an error's ``loc`` starts with the parameter's name).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The field kinds the page draws (and its script reads).
KINDS = ("text", "number", "checkbox", "select", "json")


@dataclass(frozen=True)
class Option:
    """A choice of a ``select`` field: its JSON (the value sent) and how it reads."""

    value: str
    label: str
    selected: bool


@dataclass(frozen=True)
class FormField:
    """One parameter's field in the run form."""

    name: str
    kind: str
    required: bool
    label: str
    description: str | None = None
    value: str = ""  # the default, as the field shows it ("" for none)
    checked: bool = False  # a checkbox's default
    step: str | None = None  # a number box's: "1" for an int, "any" for a float
    options: list[Option] = field(default_factory=list)


def _resolved(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """A property's schema with its ``$ref`` (or a lone ``allOf``) read from ``$defs``,
    keeping the property's own keys (its default, description, title)."""
    own = dict(schema)
    ref = own.pop("$ref", None)
    if ref is None and isinstance(own.get("allOf"), list) and len(own["allOf"]) == 1:
        ref = own.pop("allOf")[0].get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref.removeprefix("#/$defs/"), {})
        return {**_resolved(target, defs), **own}
    return own


def _non_null(schema: dict[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """``X | None`` as ``X`` (an empty field leaves such a parameter at its default);
    any other schema as it is."""
    choices = schema.get("anyOf")
    if not isinstance(choices, list):
        return schema
    others = [c for c in choices if c.get("type") != "null"]
    if len(others) == 1 and len(others) < len(choices):
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        return {**_resolved(others[0], defs), **rest}
    return schema


def _choices(schema: Mapping[str, Any]) -> list[Any] | None:
    if isinstance(schema.get("enum"), list):
        return list(schema["enum"])
    if "const" in schema:
        return [schema["const"]]
    return None


def form_field(name: str, schema: Mapping[str, Any], *, required: bool,
               defs: Mapping[str, Any]) -> FormField:
    """The field of the parameter ``name`` whose JSON Schema is ``schema``."""
    prop = _non_null(_resolved(schema, defs), defs)
    has_default = "default" in prop
    default = prop.get("default")
    common: dict[str, Any] = {
        "name": name, "required": required, "label": name, "description": prop.get("description")}
    choices = _choices(prop)
    kind = prop.get("type")
    if choices is not None:
        options = [Option(json.dumps(c), c if isinstance(c, str) else json.dumps(c),
                          has_default and c == default) for c in choices]
        return FormField(kind="select", options=options, **common)
    if kind == "boolean":
        return FormField(kind="checkbox", checked=default is True, **common)
    shown = "" if not has_default or default is None else str(default)
    if kind in ("integer", "number"):
        if isinstance(default, bool):
            shown = ""
        return FormField(kind="number", step="1" if kind == "integer" else "any",
                         value=shown, **common)
    if kind == "string":
        return FormField(kind="text", value=shown, **common)
    value = "" if not has_default or default is None else json.dumps(default, indent=2)
    return FormField(kind="json", value=value, **common)


def form_fields(params_schema: Mapping[str, Any]) -> list[FormField]:
    """The run form's fields, one per parameter of a workflow, in the signature's order."""
    defs = params_schema.get("$defs") or {}
    required = set(params_schema.get("required") or ())
    props: Mapping[str, Any] = params_schema.get("properties") or {}
    return [form_field(name, prop, required=name in required, defs=defs)
            for name, prop in props.items()]
