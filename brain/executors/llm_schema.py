"""Structured answers of ``llm()`` steps (SPEC §18): what the request asks for, whether an
answer matches the step's schema, and what asks the model again when it does not.

A pydantic model validates with pydantic; a JSON Schema dict with ``jsonschema``
(imported only when such a step runs), a model's answer in a child process
(``llm_schema_check``: no answer can hold the event loop). ``brain.testing`` checks mocks
with :func:`checked_answer`, in-process by the same rule, so a mock and a real answer are
held to one rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from brain._errors import StepFailed
from brain._secrets import longest, scrub
from brain.dsl.model import LlmStepSpec
from brain.executors.llm_schema_check import CheckTookTooLong, check_apart, verdict, warm

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

#: How much of a validation error is sent back to the model and stored with a failure.
REASON_CHARS = 300
#: How long checking an answer may take in a step with no timeout (``timeout_seconds=None``).
UNTIMED_CHECK_SECONDS = 600


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


def short(text: str, *, cut: bool = False) -> str:
    """``text`` scrubbed of secrets, on one line, cut to :data:`REASON_CHARS`. ``cut``:
    ``text`` is the start of a longer one (its end may be the start of a secret)."""
    # Scrubbed before its whitespace is folded (a secret may hold a newline) and after
    # (folding may join a secret's words), then cut (cutting scrubbed text leaves nothing).
    text = scrub(" ".join((scrub(text) or "").split())) or ""
    if cut:  # the start of a secret the first cut split would be at the end: dropped
        text = text[:max(len(text) - longest(), 0)]
    return text[:REASON_CHARS] + ("…" if cut or len(text) > REASON_CHARS else "")


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


def _check_schema(schema: dict[str, Any], text: str) -> tuple[str | None, str]:
    output, reason, broken = verdict(schema, text)
    if broken:  # a $ref that cannot be resolved, say: no answer could pass
        raise StepFailed(f"the schema cannot be checked: {short(reason)}", retryable=False)
    return output, short(reason) if output is None else ""


def warm_checker(spec: LlmStepSpec) -> None:
    """Before a structured step's request: have a checking child start meanwhile (a JSON
    Schema dict's answers are checked in one)."""
    if spec.schema_model is None and spec.output_schema is not None:
        warm()


async def checked_answer_apart(spec: LlmStepSpec, text: str) -> tuple[str | None, str]:
    """:func:`checked_answer` of an answer from a model: a JSON Schema dict is checked in a
    child process (``llm_schema_check``), ended after the step's ``timeout_seconds`` (or
    :data:`UNTIMED_CHECK_SECONDS`) at the latest, so that no answer holds the event loop; a
    pydantic model in-process (its patterns run on a linear-time engine)."""
    if spec.schema_model is not None:
        return _check_model(spec.schema_model, text)
    assert spec.output_schema is not None, "checked_answer_apart needs a step with a schema"
    try:
        output, reason, broken, cut = await check_apart(
            spec.output_schema, text, spec.timeout_seconds or UNTIMED_CHECK_SECONDS)
    except CheckTookTooLong as exc:
        raise StepFailed(str(exc), retryable=False) from None
    if broken:
        raise StepFailed(f"the schema cannot be checked: {short(reason, cut=cut)}",
                         retryable=False)
    return output, short(reason, cut=cut) if output is None else ""
