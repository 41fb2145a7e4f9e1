"""How the routes answer besides their return value: The Brain's errors as JSON answers,
and what the OpenAPI document says of each route's other answers.

Every error is ``{"status_code", "detail"}`` (:class:`~brain.server.bodies.ApiError`);
:data:`DOMAIN_ERRORS` turns the exceptions of the service and the store into such
answers, so handlers need no ``try`` for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import Request, Response
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Operation, RequestBody
from litestar.types import ExceptionHandlersMap

from brain._errors import RunConflict, RunNotFound, WorkflowInputError
from brain.server.bodies import ApiError, FieldError, RunAccepted, RunEnded
from brain.service.api import InvalidInput, UnknownWorkflow
from brain.store.queue import QueueFull

RETRY_AFTER_SECONDS = "5"


def error_answer(status: int, detail: str, headers: dict[str, str] | None = None) -> Response[ApiError]:
    """The JSON answer of an error: ``{"status_code": status, "detail": detail}``."""
    return Response(ApiError(status_code=status, detail=detail), status_code=status, headers=headers)


def _not_found(_: Request[Any, Any, Any], exc: Exception) -> Response[ApiError]:
    return error_answer(404, str(exc))


def _conflict(_: Request[Any, Any, Any], exc: Exception) -> Response[ApiError]:
    return error_answer(409, str(exc))


def _invalid(_: Request[Any, Any, Any], exc: Exception) -> Response[ApiError]:
    return error_answer(400, str(exc))


def _params_invalid(_: Request[Any, Any, Any], exc: Exception) -> Response[ApiError]:
    return params_answer(exc)  # type: ignore[arg-type]  # registered for WorkflowInputError


def params_answer(exc: WorkflowInputError) -> Response[ApiError]:
    """The 422 answer to parameters that do not validate: ``{"status_code": 422,
    "detail": <one line per field>, "errors": [{"loc", "msg", "type"}, ...]}``."""
    errors = [FieldError(loc=_loc(e.get("loc")), msg=str(e.get("msg", "")),
                         type=str(e.get("type", ""))) for e in exc.errors]
    return Response(ApiError(status_code=422, detail=str(exc) or "invalid parameters",
                             errors=errors), status_code=422)


def _loc(loc: object) -> list[str | int]:
    """An error's ``loc`` as a list of names and indexes."""
    parts = loc if isinstance(loc, (list, tuple)) else () if loc is None else (loc,)
    return [p if isinstance(p, int) else str(p) for p in parts]


def _queue_full(_: Request[Any, Any, Any], exc: Exception) -> Response[ApiError]:
    return error_answer(429, f"too many queued runs ({exc}); retry later",
                        headers={"Retry-After": RETRY_AFTER_SECONDS})


#: The answers to The Brain's own errors, for every route that can meet them.
DOMAIN_ERRORS: ExceptionHandlersMap = {RunNotFound: _not_found, UnknownWorkflow: _not_found,
                                       RunConflict: _conflict, InvalidInput: _invalid,
                                       WorkflowInputError: _params_invalid,
                                       QueueFull: _queue_full}

_ERROR_MEANINGS = {
    400: "malformed input (the detail says what is wrong) or a bad Host header",
    401: "missing or wrong bearer token; without BRAIN_API_TOKEN, not a loopback request",
    404: "no such workflow or run", 409: "the run is in a state that does not allow this",
    413: "the body is too large (a webhook's: over 1 MiB)",
    415: "the body is not application/json",
    422: "the parameters do not validate: errors has one {loc, msg, type} per field; "
         "nothing was queued",
    429: "too many queued runs: retry after Retry-After seconds",
}

#: The two answers of a route that starts a run: queued (202), or ended while waiting (200).
QUEUED_OR_ENDED = {
    202: ResponseSpec(RunAccepted, description="the run is queued", generate_examples=False),
    200: ResponseSpec(RunEnded, description="with wait: the run ended", generate_examples=False)}


def documented(*codes: int, successes: dict[int, ResponseSpec] | None = None) -> dict[int, ResponseSpec]:
    """A route's ``responses=`` for the OpenAPI document: 401 and its other error codes
    (each an :class:`ApiError`), and successes its return type does not say.

    >>> @get("/runs/{run_id:str}", responses=documented(400, 404))  # doctest: +SKIP
    """
    answers = {code: ResponseSpec(ApiError, description=_ERROR_MEANINGS[code], generate_examples=False)
               for code in (401, *codes)}
    return answers | (successes or {})


@dataclass
class OptionalBodyOperation(Operation):
    """An operation whose JSON body may be left out (Litestar marks every body required):
    ``operation_class=`` of such routes."""

    def __post_init__(self) -> None:
        if isinstance(self.request_body, RequestBody):
            self.request_body.required = False
