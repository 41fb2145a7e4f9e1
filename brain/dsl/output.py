"""What a workflow returns (SPEC §21): recorded as an output template when it is traced,
resolved into the run's ``output`` at the end of a succeeded run.

A template is plain JSON data: ``{"step": NAME}`` (a step's output), ``{"param": [NAME,
FIELD...]}`` (a parameter), ``{"value": V}`` (a literal), ``{"dict": {...}}`` and
``{"list": [...]}`` of these.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any

from brain._errors import WorkflowDefinitionError
from brain.dsl.nodes import PreviousNode, StepNode, _Lazy
from brain.dsl.params import ParamNode, lookup_param

_RETURNS = ("a workflow returns a step's output, a parameter, or a dict or list of these "
            "(or plain JSON values)")


def output_template(value: Any, where: str, steps: Collection[str]) -> Any:
    """The template of what a traced workflow function returned (``None``: it returned
    nothing); a :class:`WorkflowDefinitionError` for anything else."""
    if value is None:
        return None
    return _template(value, where, steps)


def _template(value: Any, where: str, steps: Collection[str]) -> Any:
    if isinstance(value, ParamNode):
        return {"param": list(value._path)}
    if isinstance(value, StepNode) and not isinstance(value, PreviousNode):
        if value._name not in steps:
            raise WorkflowDefinitionError(f"{where}: it returns {value._name!r}, which is not "
                                          f"a step of this workflow")
        return {"step": value._name}
    if isinstance(value, _Lazy):
        raise WorkflowDefinitionError(f"{where}: it returns {value._where()}: {_RETURNS}")
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise WorkflowDefinitionError(f"{where}: a returned dict's keys are strings, "
                                              f"not {k!r}")
            out[k] = _template(v, where, steps)
        return {"dict": out}
    if isinstance(value, (list, tuple)):
        return {"list": [_template(v, where, steps) for v in value]}
    if value is None or isinstance(value, (str, bool, int, float)):
        return {"value": value}
    raise WorkflowDefinitionError(f"{where}: it returns a {type(value).__name__}: {_RETURNS}")


def accepts_text(schema: Any, root: Any = None) -> bool:
    """Whether a JSON Schema (of a parameter; ``$ref`` read in ``root``'s ``$defs``) takes
    a string: ``type`` string (or a list with it), a string ``enum``/``const``, any
    ``anyOf``/``oneOf`` branch that does, or no type at all (``Any``)."""
    if not isinstance(schema, dict):
        return True
    ref = schema.get("$ref")
    if isinstance(ref, str):
        defs = (root.get("$defs") or {}) if isinstance(root, dict) else {}
        target = defs.get(ref.rsplit("/", 1)[-1]) if ref.startswith("#/$defs/") else None
        return accepts_text(target, root) if isinstance(target, dict) else False
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return any(accepts_text(branch, root) for branch in schema[key])
    if isinstance(schema.get("allOf"), list):
        return all(accepts_text(branch, root) for branch in schema["allOf"])
    if "const" in schema:
        return isinstance(schema["const"], str)
    if isinstance(schema.get("enum"), list):
        return any(isinstance(v, str) for v in schema["enum"])
    kind = schema.get("type")
    if kind is None:
        return True
    return kind == "string" or (isinstance(kind, list) and "string" in kind)


def text_only(schema: Any, root: Any = None) -> bool:
    """Whether a JSON Schema takes strings and nothing else (every ``anyOf``/``oneOf``
    branch does): a value of it stored as text reads back as the same value."""
    if not isinstance(schema, dict):
        return False
    ref = schema.get("$ref")
    if isinstance(ref, str):
        defs = (root.get("$defs") or {}) if isinstance(root, dict) else {}
        return text_only(defs.get(ref.rsplit("/", 1)[-1]), root)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return all(text_only(branch, root) for branch in schema[key])
    if isinstance(schema.get("allOf"), list):
        return any(text_only(branch, root) for branch in schema["allOf"])
    if "const" in schema:
        return isinstance(schema["const"], str)
    if isinstance(schema.get("enum"), list):
        return all(isinstance(v, str) for v in schema["enum"])
    return schema.get("type") == "string"


def typed_output(step: Any) -> bool:
    """Whether a step's output is a JSON value rather than text: a ``@step`` annotated to
    return something other than ``str``, an ``llm(schema=)``, a child run whose return
    type takes no string (a child returning ``str`` gives text, as a ``@step`` does; an
    unannotated child gives JSON)."""
    kind = getattr(step, "kind", None)
    if kind == "llm":
        return getattr(step, "output_schema", None) is not None
    if kind == "workflow":
        schema = getattr(getattr(step, "child", None), "output_schema", None)
        return not (isinstance(schema, dict) and text_only(schema, schema))
    if kind != "step":
        return False
    func = getattr(step, "func", None)
    if func is None:
        return False
    try:
        hint = typing.get_type_hints(func).get("return", inspect.Parameter.empty)
    except Exception:
        hint = inspect.signature(func).return_annotation
    return hint not in (str, "str", inspect.Parameter.empty, typing.Any)


def _json_of(text: str | None, typed: bool) -> Any:
    if text is None:
        return None
    if not typed:
        return text
    if text == "":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def resolve_output(template: Any, steps: Mapping[str, Any], outputs: Mapping[str, str],
                   params: Mapping[str, Any],
                   group_of: Callable[[str], bool] = lambda _: False) -> Any:
    """The value of ``template`` at the end of a run: a step's output (``None`` when it was
    skipped) as text, or as its JSON value when the step is typed (a step of a ``for_each``
    block: the list of its instances' outputs); a parameter's value; literals as they are."""
    if template is None:
        return None
    if "value" in template:
        return template["value"]
    if "param" in template:
        try:
            return lookup_param(params, template["param"])
        except KeyError:
            return None
    if "dict" in template:
        return {k: resolve_output(v, steps, outputs, params, group_of)
                for k, v in template["dict"].items()}
    if "list" in template:
        return [resolve_output(v, steps, outputs, params, group_of) for v in template["list"]]
    name = template["step"]
    text = outputs.get(name)
    typed = typed_output(steps.get(name))
    if group_of(name):  # a block's step: the JSON list of its instances' outputs
        items = _json_of(text, True)
        if isinstance(items, list):
            return [_json_of(v, typed) if isinstance(v, str) else v for v in items]
        return items
    return _json_of(text, typed)
