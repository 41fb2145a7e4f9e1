"""Structured answers of ``llm()`` steps (SPEC §18): what the request asks for, whether an
answer matches the step's schema, and what asks the model again when it does not.

A pydantic model validates with pydantic; a JSON Schema dict with ``jsonschema``
(imported only when such a step runs). ``brain.testing`` checks mocks with the same
:func:`checked_answer`, so a mock and a real answer are held to one rule.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from brain._errors import StepFailed
from brain._secrets import scrub
from brain.dsl.model import LlmStepSpec

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

#: How much of a validation error is sent back to the model and stored with a failure.
REASON_CHARS = 300
#: Validators of the JSON Schema dicts seen, by ``id`` of the dict (kept, so the id stays its).
_validators: dict[int, tuple[dict[str, Any], Any]] = {}


def response_format(spec: LlmStepSpec) -> dict[str, Any]:
    """The request's ``response_format``: the step's schema, strict."""
    return {"type": "json_schema",
            "json_schema": {"name": spec.schema_name or "answer", "schema": spec.output_schema,
                            "strict": True}}


def json_object_form(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` asking for the schema as llama-cpp-python's server takes it: ``response_format
    = {"type": "json_object", "schema": ...}`` (it refuses ``json_schema``)."""
    schema = body["response_format"]["json_schema"]["schema"]
    return {**body, "response_format": {"type": "json_object", "schema": schema}}


def refuses_json_schema(body: dict[str, Any], status: int, text: str) -> bool:
    """Whether an HTTP error answers a request for a schema by naming ``response_format``
    (llama-cpp-python: a 500 saying "Input should be 'text' or 'json_object'")."""
    return ("response_format" in body and status in (400, 422, 500)
            and "response_format" in text)


def checked_answer(spec: LlmStepSpec, text: str) -> tuple[str | None, str]:
    """``(compact JSON of the validated value, "")`` when ``text`` matches the step's schema,
    else ``(None, a short reason)``; the reason is scrubbed of secrets. A schema that cannot
    be checked at all (an unresolvable ``$ref``) raises :class:`StepFailed`."""
    if spec.schema_model is not None:
        return _check_model(spec.schema_model, text)
    assert spec.output_schema is not None, "checked_answer needs a step with a schema"
    return _check_schema(spec.output_schema, text)


def reask_text(reason: str) -> str:
    """The user message that asks the model again after an answer that did not match."""
    return (f"Your answer does not match the required JSON schema: {reason}. Answer again "
            f"with only a JSON value that is valid against the schema, nothing else.")


def short(text: str) -> str:
    """``text`` scrubbed of secrets, on one line, cut to :data:`REASON_CHARS`."""
    # Scrubbed before its whitespace is folded (a secret may hold a newline) and after
    # (folding may join a secret's words), then cut (cutting scrubbed text leaves nothing).
    text = scrub(" ".join((scrub(text) or "").split())) or ""
    return text[:REASON_CHARS] + ("…" if len(text) > REASON_CHARS else "")


def _check_model(model: type[BaseModel], text: str) -> tuple[str | None, str]:
    from pydantic import ValidationError

    try:
        value = model.model_validate_json(text)
    except ValidationError as exc:
        return None, _pydantic_reason(exc)
    # By alias and round-trip: what a @step parameter annotated with the model parses back.
    return value.model_dump_json(by_alias=True, round_trip=True), ""


def _pydantic_reason(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    reason = str(first.get("msg")) + (f" at {where}" if where else "")
    if len(errors) > 1:
        reason += f" (and {len(errors) - 1} more)"
    return short(reason)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_schema(schema: dict[str, Any], text: str) -> tuple[str | None, str]:
    try:
        # NaN and Infinity are not JSON: the output must be JSON any reader can parse.
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:  # JSONDecodeError included
        return None, short(f"the answer is not JSON ({exc})")
    from jsonschema.exceptions import best_match

    try:
        error = best_match(_validator(schema).iter_errors(value))
    except Exception as exc:  # a $ref that cannot be resolved, say: no answer could pass
        raise StepFailed(f"the schema cannot be checked: {short(str(exc))}",
                         retryable=False) from None
    if error is not None:
        path = error.json_path
        return None, short(error.message + (f" at {path}" if path != "$" else ""))
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False), ""


def _validator(schema: dict[str, Any]) -> Any:
    cached = _validators.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    from jsonschema.validators import validator_for

    validator = validator_for(schema)(schema)
    if len(_validators) >= 256:  # workflows redefined over and over: keep the newest
        _validators.clear()
    _validators[id(schema)] = (schema, validator)
    return validator
