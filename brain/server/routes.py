"""HTTP routes (Litestar). Thin: each handler checks input and calls the service."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from litestar import Request, Response, get, post
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException, NotAuthorizedException, NotFoundException
from litestar.handlers.base import BaseRouteHandler
from litestar.params import FromPath, FromQuery
from litestar.response import ServerSentEvent

from brain import runner
from brain._clock import utcnow
from brain._errors import RunConflict, RunNotFound
from brain.results import TriggerData
from brain.server import security, webhooks
from brain.service import BrainService
from brain.store.queue import QueueFull

RETRY_AFTER_SECONDS = "5"
# Limits on request JSON: deeper or longer than any real payload, far below what costs.
MAX_JSON_DEPTH = 100
MAX_JSON_NUMBER_CHARS = 100


def service_of(connection: ASGIConnection[Any, Any, Any, Any]) -> BrainService:
    """The app's :class:`BrainService` (put in app state by the plugin)."""
    service: BrainService = connection.app.state["brain"]
    return service


def require_api_access(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard for ``/api`` and the page: the bearer token, or loopback-only without one."""
    token = security.api_token()
    if token is not None:
        header = connection.headers.get("authorization")
        # The console (not /api) also takes the token once as ?token=..., then from a
        # cookie (SameSite=Strict, HttpOnly). /api takes the cookie for reads (the console's
        # live updates), and for writes only from a page of this very origin.
        api = connection.url.path.startswith("/api")
        other = connection.cookies.get("brain_token") if (
            not api or connection.scope.get("method") in ("GET", "HEAD")
            or _same_origin(connection)) else None
        if not api and connection.url.path != "/metrics":  # a console page: a login link
            other = other or connection.query_params.get("token")
        if not security.token_matches(header, token) and not (
                other and security.token_matches(f"Bearer {other}", token)):
            raise NotAuthorizedException(detail="missing or wrong bearer token")
        return
    try:
        problem = security.loopback_problem(connection.headers.get("host"),
                                            connection.headers.get("origin"))
    except security.BadHostHeader as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    if problem:
        raise NotAuthorizedException(detail=problem)


def _same_origin(connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
    """Whether a request says it comes from a page of this server itself (``Origin`` is
    this ``Host``): browsers send ``Origin`` on every POST, and a page cannot forge it."""
    origin, host = connection.headers.get("origin"), connection.headers.get("host")
    return bool(origin and host and security.same_origin(origin, host))


def _queue_full(exc: QueueFull) -> HTTPException:
    return HTTPException(status_code=429, detail=f"too many queued runs ({exc}); retry later",
                         headers={"Retry-After": RETRY_AFTER_SECONDS})


@dataclass
class RunRequest:
    """Body of ``POST /api/workflows/{name}/runs``."""

    body: Any = None
    wait: bool = False


@dataclass
class RunAccepted:
    """A queued run."""

    run_id: str


@dataclass
class RunEnded:
    """A run that ended while the caller waited."""

    run_id: str
    status: str
    error: str | None


@get("/health", sync_to_thread=False)
def health() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@get("/api/workflows", guards=[require_api_access])
async def list_workflows(request: Request[Any, Any, Any]) -> list[dict[str, Any]]:
    """Every loaded workflow with its triggers."""
    service = service_of(request)
    return [_workflow_summary(wf, service) for wf in service.workflows.values()]


@get("/api/workflows/{name:str}", guards=[require_api_access])
async def get_workflow(request: Request[Any, Any, Any], name: FromPath[str]) -> dict[str, Any]:
    """One workflow: steps, edges, triggers and next fire times."""
    service = service_of(request)
    wf = service.workflows.get(name)
    if wf is None:
        raise NotFoundException(detail=f"no workflow {name!r}")
    data = _workflow_summary(wf, service)
    graph = wf.graph
    data["steps"] = [{"name": s.name, "kind": s.kind, "upstream": list(s.upstream),
                      "when": list(graph.conditions.get(s.name, ())), "for_each": s.group}
                     for s in wf.spec.steps]
    data["edges"] = [list(e) for e in graph.edges]
    data["for_each"] = [{"index": i, "label": g.label, "steps": list(g.steps),
                         "max_parallel": g.max_parallel} for i, g in enumerate(graph.groups)]
    return data


def _workflow_summary(wf: Any, service: BrainService) -> dict[str, Any]:
    from brain.triggers.schedule import next_fire, trigger_key

    now = utcnow()
    triggers = []
    for trig in wf.triggers:
        item = trig.model_dump(mode="json")
        if trig.type in ("cron", "every"):
            upcoming = next_fire(trig, now)
            item["next_fire"] = upcoming.isoformat() if upcoming else None
        if trig.type == "webhook":
            item["url_path"] = f"/hooks/{(trig.path or wf.name).strip('/')}"
            item.pop("secret_env", None)
        item["key"] = trigger_key(trig)
        triggers.append(item)
    return {"name": wf.name, "description": wf.description, "steps_count": len(wf.spec.steps),
            "max_concurrent_runs": wf.spec.max_concurrent_runs, "triggers": triggers}


def _check_json_request(request: Request[Any, Any, Any], raw: bytes) -> None:
    """JSON endpoints take ``application/json`` only, so a browser page of another origin
    must preflight them (no "simple" ``text/plain`` or form POST); an empty body needs no type."""
    given = request.headers.get("content-type")
    media_type = (given or "").split(";", 1)[0].strip().lower()
    if media_type == "application/json" or (given is None and not raw):
        return
    shown = f"Content-Type {given[:100]!r}" if given is not None else "no Content-Type"
    raise HTTPException(status_code=415, detail=f"this endpoint takes JSON: send the body with "
                                                f"Content-Type: application/json (got {shown})")


def _json_number(kind: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        if len(text) > MAX_JSON_NUMBER_CHARS:
            raise _JsonRefused(f"a number with {len(text)} characters is too long (at most "
                               f"{MAX_JSON_NUMBER_CHARS}); send it as a string")
        value = int(text) if kind == "int" else float(text)
        if kind == "float" and not math.isfinite(value):
            raise _JsonRefused(f"the number {text} is out of range; send it as a string")
        return value

    return parse


def _refuse_constant(name: str) -> Any:
    raise _JsonRefused(f"{name} is not JSON; send null or a string instead")


class _JsonRefused(ValueError):
    """Valid-looking JSON that the API will not take (NaN, huge numbers, ...)."""


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
        value = json.loads(text, parse_constant=_refuse_constant, parse_int=_json_number("int"),
                           parse_float=_json_number("float"))
    except RecursionError:
        raise HTTPException(status_code=400, detail=f"the request body is nested too deeply "
                                                    f"(at most {MAX_JSON_DEPTH} levels)") from None
    except _JsonRefused as exc:
        raise HTTPException(status_code=400, detail=f"the request body is refused: {exc}") from None
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise HTTPException(status_code=400,
                            detail=f"the request body is not valid JSON: {exc}") from None
    problem = _json_problem(value)
    if problem:
        raise HTTPException(status_code=400, detail=f"the request body is refused: {problem}")
    return value


def _json_problem(value: Any) -> str | None:
    """Too deep, or a string that is not valid Unicode; walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"it is nested more than {MAX_JSON_DEPTH} levels deep"
        if isinstance(item, dict):
            stack.extend((k, depth) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return r"a string holds a lone surrogate (such as \ud800), which is not text"
    return None


def _run_request(raw: bytes) -> RunRequest:
    """``{"body": ..., "wait": false}``; an empty body starts a run with no payload."""
    if not raw.strip():
        return RunRequest()
    value = parse_json(raw)
    if not isinstance(value, dict):
        raise HTTPException(status_code=400, detail='the request body must be a JSON object like '
                                                    '{"body": ..., "wait": false}')
    unknown = set(value) - {"body", "wait"}
    if unknown:
        raise HTTPException(status_code=400, detail=f"unknown fields {sorted(unknown)}: "
                                                    f"use body and wait")
    wait = value.get("wait", False)
    if not isinstance(wait, bool):
        raise HTTPException(status_code=400, detail="wait must be true or false")
    return RunRequest(body=value.get("body"), wait=wait)


@post("/api/workflows/{name:str}/runs", guards=[require_api_access], status_code=202)
async def start_run(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[Any]:
    """Queue a run: ``{"body": ..., "wait": false}``; with ``wait``, answer when it ends
    (or 202 after 30 s)."""
    raw = await request.body()
    _check_json_request(request, raw)
    data = _run_request(raw)
    service = service_of(request)
    wf = service.workflows.get(name)
    if wf is None:
        raise NotFoundException(detail=f"no workflow {name!r}")
    trigger = TriggerData.from_input({"body": data.body}, event="manual")
    try:
        run_id, _ = await service.enqueue(wf, trigger, trigger_key="api")
    except QueueFull as exc:
        raise _queue_full(exc) from None
    assert run_id is not None
    return await _answer(service, run_id, data.wait, 30.0)


async def _answer(service: BrainService, run_id: str, wait: bool, seconds: float) -> Response[Any]:
    if wait:
        ended = await service.wait_for(run_id, seconds)
        if ended is not None:
            return Response(RunEnded(run_id, str(ended.status), ended.error), status_code=200)
    return Response(RunAccepted(run_id), status_code=202)


@get("/api/runs", guards=[require_api_access])
async def list_runs(request: Request[Any, Any, Any], workflow: FromQuery[str | None] = None,
                    status: FromQuery[str | None] = None, limit: FromQuery[int] = 20) -> list[dict[str, Any]]:
    """Recent runs, newest first."""
    if not 1 <= limit <= 1000:
        raise HTTPException(status_code=400, detail="limit must be from 1 to 1000")
    runs = await service_of(request).store.list_runs(workflow=workflow, status=status, limit=limit)
    return [r.to_json_dict() for r in runs]


@get("/api/runs/{run_id:str}", guards=[require_api_access])
async def get_run(request: Request[Any, Any, Any], run_id: FromPath[str]) -> dict[str, Any]:
    """One run with its steps in call order (a unique id prefix will do)."""
    try:
        run = await service_of(request).store.get_run(run_id)
    except RunNotFound as exc:
        raise NotFoundException(detail=str(exc)) from None
    return run.to_json_dict()


@post("/api/runs/{run_id:str}/cancel", guards=[require_api_access], status_code=202)
async def cancel_run(request: Request[Any, Any, Any], run_id: FromPath[str]) -> dict[str, Any]:
    """Ask a run to stop; its executor stops it within a second."""
    raw = await request.body()
    _check_json_request(request, raw)
    if raw.strip():
        parse_json(raw)  # no fields are defined, but malformed JSON is still an error
    try:
        run, active = await runner.cancel_run(service_of(request).store, run_id)
    except RunNotFound as exc:
        raise NotFoundException(detail=str(exc)) from None
    if not active:
        raise HTTPException(status_code=409, detail=f"run {run.run_id} already ended ({run.status})")
    return {"run_id": run.run_id, "status": str(run.status), "cancel_requested": True}


@post("/api/runs/{run_id:str}/retry", guards=[require_api_access], status_code=202)
async def retry_run(request: Request[Any, Any, Any], run_id: FromPath[str]) -> dict[str, Any]:
    """Queue a failed or cancelled run again: steps that succeeded keep their outputs and
    do not run; the others run. 409 while it is active, after it succeeded, or when its
    workflow changed since."""
    raw = await request.body()
    _check_json_request(request, raw)
    if raw.strip():
        parse_json(raw)
    service = service_of(request)
    try:
        new_id, original = await service.retry(run_id)
    except RunNotFound as exc:
        raise NotFoundException(detail=str(exc)) from None
    except RunConflict as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from None
    return {"run_id": new_id, "retry_of": original}


@get("/api/events", guards=[require_api_access])
async def events(request: Request[Any, Any, Any], run_id: FromQuery[str | None] = None,
                 workflow: FromQuery[str | None] = None) -> ServerSentEvent:
    """Run and step changes as server-sent events (``event: run`` / ``event: step``, JSON
    data), optionally only those of one run (an id prefix will do) or one workflow."""
    from brain.server.events import stream

    if run_id is not None and not all(c in "0123456789abcdefABCDEF" for c in run_id):
        raise HTTPException(status_code=400, detail="run_id is hexadecimal digits")
    watcher = request.app.state["brain_watcher"]
    return ServerSentEvent(stream(watcher, run_id, workflow),
                           headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@get("/api/workers", guards=[require_api_access])
async def list_workers(request: Request[Any, Any, Any]) -> list[dict[str, Any]]:
    """The executor processes sharing the database (``brain serve``, ``brain worker``); one
    silent for longer than a lease is ``lost``."""
    from brain.runner import lease_seconds
    from brain.workers import describe_workers

    rows = await service_of(request).store.list_workers()
    return describe_workers(rows, lease_seconds())


@get("/metrics", guards=[require_api_access], include_in_schema=False)
async def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Prometheus text format (SPEC §14): runs, steps, queue, schedules, webhooks."""
    from prometheus_client import CONTENT_TYPE_LATEST

    service = service_of(request)
    text = await service.metrics.exposition(service.store.count_queued)
    return Response(text, media_type=CONTENT_TYPE_LATEST)


@post("/hooks/{path:path}", request_max_body_size=webhooks.MAX_BODY_BYTES, status_code=202)
async def receive_webhook(request: Request[Any, Any, Any], path: FromPath[str],
                          wait: FromQuery[bool] = False) -> Response[Any]:
    """A signed delivery: committed as a queued run before the answer."""
    service = service_of(request)
    hook = service.hooks.get(path.strip("/"))
    counted = service.metrics.deliveries
    shown = hook.workflow.name if hook else ""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > webhooks.MAX_BODY_BYTES:
        counted.labels(shown, "too_large").inc()
        raise HTTPException(status_code=413, detail="body larger than 1 MiB")
    body = await request.body()
    if len(body) > webhooks.MAX_BODY_BYTES:
        counted.labels(shown, "too_large").inc()
        raise HTTPException(status_code=413, detail="body larger than 1 MiB")
    headers = {k.lower(): v for k, v in request.headers.items()}
    if not webhooks.verify(hook.secret if hook else None, body, headers,
                           require_timestamp=hook.trigger.require_timestamp if hook else False) \
            or hook is None:
        counted.labels(shown, "refused").inc()
        raise NotAuthorizedException(detail="invalid signature")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPException(status_code=400, detail="the body is not UTF-8 text") from None
    trigger = TriggerData(event="webhook", body=text, headers=webhooks.stored_headers(headers))
    try:
        run_id, created = await service.enqueue(hook.workflow, trigger, trigger_key="webhook",
                                                delivery_id=webhooks.delivery_id(headers))
    except QueueFull as exc:
        counted.labels(shown, "throttled").inc()
        raise _queue_full(exc) from None
    assert run_id is not None
    counted.labels(shown, "accepted" if created else "duplicate").inc()
    return await _answer(service, run_id, wait, hook.trigger.wait_seconds)


ROUTES = [health, list_workflows, get_workflow, start_run, list_runs, get_run, cancel_run,
          retry_run, events, list_workers, metrics, receive_webhook]
