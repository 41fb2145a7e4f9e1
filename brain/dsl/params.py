"""A workflow's typed parameters and its return type, read from the function's signature
(SPEC §21), and the lazy values that stand for parameters while it is traced.

``def deploy(service: str, version: str = "latest", dry_run: bool = False) -> Verdict``
gives a :class:`ParamsSpec`: the JSON Schema of the parameters object, the output schema
of the return annotation, and the validation of a run's parameters (defaults applied)
and of its output. While tracing, each parameter is a :class:`ParamNode`:
``f"{service}"`` is the placeholder ``{params.service}``.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model
from pydantic.errors import PydanticInvalidForJsonSchema, PydanticSchemaGenerationError, PydanticUserError
from pydantic_core import to_jsonable_python

from brain._errors import WorkflowDefinitionError, WorkflowInputError
from brain._secrets import scrub
from brain.dsl.nodes import _Lazy

#: What ``f"{param.field}"`` of a parameter may read: see :meth:`ParamsSpec.field_problem`.
_NO_FIELDS = ("string", "integer", "number", "boolean", "null", "array")


def input_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """Pydantic's errors as :class:`WorkflowInputError` keeps them: ``loc``, ``msg`` and
    ``type`` only (never the input, which may be a secret)."""
    return [{"loc": _loc(e.get("loc", ())), "msg": scrub(e.get("msg", "")) or "",
             "type": e.get("type", "")} for e in exc.errors()]


def _loc(loc: Any) -> list[str | int]:
    """An error's location with any known secret scrubbed from its names (a dict
    parameter's keys are the caller's text)."""
    return [p if isinstance(p, int) else scrub(str(p)) or "" for p in loc]


def json_value(value: Any) -> Any:
    """``value`` if it is one JSON value (no NaN or infinite number anywhere in it), else a
    ``ValueError`` saying ``output does not match the return type: …``."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        raise ValueError("output does not match the return type: NaN and infinite numbers "
                         "are not JSON values") from None
    except TypeError as exc:
        raise ValueError(f"output does not match the return type: {exc}") from None
    return value


class ParamsSpec:
    """The parameters of a workflow and its return type.

    ``schema`` is the JSON Schema of the parameters object; ``output_schema`` that of the
    return annotation (``None`` without one); ``names`` the parameters in signature order;
    ``required`` those without a default.
    """

    def __init__(self, model: type[BaseModel] | None = None,
                 output_type: Any = inspect.Parameter.empty, workflow: str | None = None) -> None:
        self.model = model
        self.output_type = output_type
        self.workflow = workflow
        self.names: tuple[str, ...] = tuple(model.model_fields) if model is not None else ()
        self.required: tuple[str, ...] = tuple(
            n for n, f in (model.model_fields.items() if model is not None else ())
            if f.is_required())

    @cached_property
    def schema(self) -> dict[str, Any]:
        """The JSON Schema of the parameters object (``{"type": "object", ...}``)."""
        if self.model is None:
            return {"type": "object", "properties": {}, "additionalProperties": False}
        schema = self.model.model_json_schema()
        schema.pop("title", None)
        return schema

    @cached_property
    def output_adapter(self) -> TypeAdapter[Any] | None:
        """Validates the output, when there is a return annotation."""
        if self.output_type is inspect.Parameter.empty:
            return None
        return TypeAdapter(self.output_type)

    @cached_property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the return annotation, or ``None``."""
        adapter = self.output_adapter
        return None if adapter is None else adapter.json_schema()

    def validate(self, raw: Mapping[str, Any] | None) -> dict[str, Any]:
        """``raw`` validated, defaults applied, as JSON values; :class:`WorkflowInputError`
        when it does not validate (an unknown name, a missing or a mistyped value)."""
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise WorkflowInputError([{"loc": [], "msg": f"parameters must be an object (a dict), "
                                       f"not {type(raw).__name__}", "type": "dict_type"}],
                                     self.workflow)
        if self.model is None:
            if raw:
                raise WorkflowInputError([{"loc": _loc([k]), "msg": "Extra inputs are not "
                                           "permitted (this workflow takes no parameters)",
                                           "type": "extra_forbidden"} for k in raw],
                                         self.workflow)
            return {}
        try:
            value = self.model.model_validate(dict(raw))
        except ValidationError as exc:
            raise WorkflowInputError(input_errors(exc), self.workflow) from None
        dumped: dict[str, Any] = value.model_dump(mode="json")
        return dumped

    def validate_output(self, value: Any) -> Any:
        """The run's output checked against the return annotation, as a JSON value; a
        ``ValueError`` saying ``output does not match the return type: …`` when it does not
        validate. Without an annotation, ``value`` as it is."""
        adapter = self.output_adapter
        if adapter is None:
            return json_value(value)
        try:
            return json_value(adapter.dump_python(adapter.validate_python(value), mode="json"))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            detail = first.get("msg", "invalid") + (f" at {where}" if where else "")
            raise ValueError(f"output does not match the return type: {detail}") from None

    def field_problem(self, path: tuple[str, ...]) -> str | None:
        """Why ``{params.NAME.FIELD...}`` cannot be read, or ``None``: ``NAME`` must be a
        parameter, and each field one of the object or model it reads from."""
        if not path or path[0] not in self.names:
            known = ", ".join(self.names) or "none"
            return (f"{{params.{'.'.join(path)}}} does not name a parameter of this workflow "
                    f"(parameters: {known})")
        schema = self.schema["properties"][path[0]]
        for depth, field in enumerate(path[1:], start=1):
            schema = self._sub_schema(schema, field)
            if schema is None:
                return (f"{{params.{'.'.join(path)}}}: {'.'.join(path[:depth])} has no field "
                        f"{field!r}")
        return None

    def _resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            found: dict[str, Any] = self.schema.get("$defs", {}).get(ref[len("#/$defs/"):], {})
            return found
        return schema

    def _sub_schema(self, schema: dict[str, Any], field: str) -> dict[str, Any] | None:
        """The schema of ``field`` of an object of ``schema``; ``{}`` (anything) for a free
        dict; ``None`` when it has no such field."""
        schema = self._resolve(schema)
        for key in ("anyOf", "oneOf", "allOf"):
            if key in schema:
                found = [s for s in (self._sub_schema(b, field) for b in schema[key])
                         if s is not None]
                return found[0] if found else None
        props = schema.get("properties")
        if isinstance(props, dict) and field in props:
            return props[field]  # type: ignore[no-any-return]
        extra = schema.get("additionalProperties", props is None)
        if schema.get("type") in _NO_FIELDS or "enum" in schema or "const" in schema:
            return None
        if extra is False:
            return None
        return extra if isinstance(extra, dict) else {}

    def kind_of(self, name: str) -> str | None:
        """The JSON type of parameter ``name`` when the schema fixes one (``boolean``,
        ``array``...), else ``None``."""
        schema = self._resolve(self.schema["properties"].get(name, {}))
        kind = schema.get("type")
        return kind if isinstance(kind, str) else None


def _hints(fn: Callable[..., Any], where: str) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise WorkflowDefinitionError(
            f"{where}: cannot read the annotations of its parameters ({exc}); define the "
            f"types they name at module level") from None


def read_params(fn: Callable[..., Any], workflow: str) -> ParamsSpec:
    """The :class:`ParamsSpec` of ``fn``'s signature; a :class:`WorkflowDefinitionError` for
    ``*args``, ``**kwargs``, a positional-only parameter, a type pydantic cannot build a
    JSON Schema for, or a default that does not validate or is not a JSON value."""
    where = f"workflow {workflow!r}"
    sig = inspect.signature(fn)
    hints = _hints(fn, where) if any(
        p.annotation is not p.empty for p in sig.parameters.values()) or \
        sig.return_annotation is not sig.empty else {}
    fields: dict[str, Any] = {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            star = "*" if p.kind is p.VAR_POSITIONAL else "**"
            raise WorkflowDefinitionError(
                f"{where}: parameter {star}{p.name} is not allowed: a workflow's parameters "
                f"are named, each with a type")
        if p.kind is p.POSITIONAL_ONLY:
            raise WorkflowDefinitionError(
                f"{where}: parameter {p.name!r} is positional-only: runs pass parameters by "
                f"name, so remove the '/'")
        annotation = hints.get(p.name, str)
        _check_type(where, p.name, annotation)
        if p.default is p.empty:
            fields[p.name] = (annotation, ...)
        else:
            fields[p.name] = (annotation, _json_default(where, p.name, annotation, p.default))
    model = None
    if fields:
        try:
            model = create_model(f"{workflow}_params", __config__=ConfigDict(extra="forbid"),
                                 **fields)
        except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as exc:
            raise WorkflowDefinitionError(f"{where}: its parameters cannot be validated: "
                                          f"{_first_line(exc)}") from None
    output = hints.get("return", inspect.Parameter.empty) \
        if sig.return_annotation is not sig.empty else inspect.Parameter.empty
    spec = ParamsSpec(model, output, workflow)
    try:
        spec.schema  # noqa: B018 - built now, so a bad type is a definition error
    except (PydanticInvalidForJsonSchema, PydanticSchemaGenerationError, PydanticUserError) as exc:
        raise WorkflowDefinitionError(f"{where}: its parameters have no JSON Schema: "
                                      f"{_first_line(exc)}") from None
    try:
        spec.output_schema  # noqa: B018
    except (PydanticInvalidForJsonSchema, PydanticSchemaGenerationError, PydanticUserError) as exc:
        raise WorkflowDefinitionError(f"{where}: its return type has no JSON Schema: "
                                      f"{_first_line(exc)}") from None
    return spec


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _check_type(where: str, name: str, annotation: Any) -> None:
    """A parameter's type must be one pydantic validates from JSON and describes as JSON
    Schema."""
    try:
        TypeAdapter(annotation).json_schema()
    except (PydanticInvalidForJsonSchema, PydanticSchemaGenerationError, PydanticUserError,
            TypeError) as exc:
        shown = getattr(annotation, "__name__", None) or repr(annotation)
        raise WorkflowDefinitionError(
            f"{where}: parameter {name!r} has type {shown}, which cannot be validated from "
            f"JSON ({_first_line(exc)}); use str, int, float, bool, a Literal, an enum, a "
            f"list or dict of these, or a pydantic model") from None


def _json_default(where: str, name: str, annotation: Any, default: Any) -> Any:
    """A default as it is kept: validated against the type and turned into its JSON value."""
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    try:
        value = adapter.validate_python(default)
        json.dumps(to_jsonable_python(value))
    except (ValidationError, TypeError, ValueError) as exc:
        detail = input_errors(exc)[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise WorkflowDefinitionError(
            f"{where}: parameter {name!r}: the default {default!r} is not a valid value "
            f"({detail}); a default is a JSON value of the parameter's type") from None
    return value


# --- the lazy values tracing passes for parameters ---------------------------------------


class ParamNode(_Lazy):
    """A parameter (or a field of one) while a workflow is traced: ``{params.NAME}``,
    ``{params.NAME.FIELD}``. It stands wherever a trigger field may, in ``when=``, as a
    ``for_each`` list and as a ``@step`` argument (which gets its typed value)."""

    __slots__ = ("_path", "_spec")

    _path: tuple[str, ...]
    _spec: ParamsSpec | None

    def __init__(self, path: tuple[str, ...], spec: ParamsSpec | None = None) -> None:
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_spec", spec)

    def _placeholder(self) -> str:
        return "{params." + ".".join(self._path) + "}"

    def _where(self) -> str:
        return f"parameter {'.'.join(self._path)!r}"

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        path = (*self._path, attr)
        problem = self._spec.field_problem(path) if self._spec is not None else None
        if problem is not None:
            raise WorkflowDefinitionError(problem)
        return ParamNode(path, self._spec)

    def __invert__(self) -> NotParam:
        """``~dry_run``: the condition that the parameter is not JSON ``true``."""
        return NotParam(self)


class NotParam(_Lazy):
    """``~param``: a negated condition; it means something only to ``when``."""

    __slots__ = ("_node",)

    _node: ParamNode

    def __init__(self, node: ParamNode) -> None:
        object.__setattr__(self, "_node", node)

    def _placeholder(self) -> NoReturn:
        raise WorkflowDefinitionError(
            f"{self._where()}: ~param is a condition for when(); it has no text of its own")

    def _where(self) -> str:
        return self._node._where()

    def __invert__(self) -> ParamNode:  # type: ignore[override]
        return self._node


#: A condition or a ``for_each`` list on a parameter reads this pseudo-step's "output" (the
#: plan is given it when the run starts): step names never hold a dot.
PARAM_PREFIX = "params."


def param_key(path: tuple[str, ...]) -> str:
    """The name a parameter goes by in the plan's outputs (``params.dry_run``)."""
    return PARAM_PREFIX + ".".join(path)


def is_param_key(name: str) -> bool:
    """Whether ``name`` is a parameter's pseudo-step (see :func:`param_key`)."""
    return name.startswith(PARAM_PREFIX)


def lookup_param(params: Mapping[str, Any], path: tuple[str, ...] | list[str]) -> Any:
    """The value at ``path`` in a run's params; ``KeyError`` naming what is missing."""
    value: Any = params
    for depth, key in enumerate(path):
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            raise KeyError(".".join(path[:depth + 1]))
    return value


def param_text(value: Any) -> str:
    """A parameter's value in text: a ``str`` is itself, any other value compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def param_truth(value: Any) -> str:
    """A parameter as a condition's output: ``true`` only when it is JSON ``true``."""
    return "true" if value is True else "false"
