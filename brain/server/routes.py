"""HTTP routes (Litestar). Thin: each handler takes typed input, asks the application core
(a :class:`~brain.service.api.BrainApi`, injected as
:class:`~brain.server.access.ServiceAccess`), and returns a body of
:mod:`brain.server.bodies`, so ``/schema/openapi.json`` describes every request and answer.
The rules of each operation are the core's; a handler only translates.

The ``/api`` routes share one :class:`~litestar.Router`: the access guard, the injected
service, the JSON reading rules (:mod:`brain.server.json_input`) and the answers to
The Brain's errors (:data:`DOMAIN_ERRORS`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from litestar import Request, Response, Router, get, post
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency, Provide
from litestar.exceptions import HTTPException, NotAuthorizedException
from litestar.handlers.base import BaseRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import Body, FromPath, FromQuery, JSONBody, QueryParameter
from litestar.response import ServerSentEvent
from litestar.types import ControllerRouterHandler

from brain._clock import utcnow
from brain._errors import WorkflowInputError
from brain.results import TriggerData, clean_text
from brain.server import security, webhooks
from brain.server.access import ServiceAccess, provide_access, provide_changes
from brain.server.answers import DOMAIN_ERRORS, QUEUED_OR_ENDED, OptionalBodyOperation, documented
from brain.server.bodies import (
    CancelRequested,
    ChangeEvent,
    DecisionRequest,
    DecisionTaken,
    Health,
    ResumedStep,
    RetryQueued,
    RetryRequest,
    RunAccepted,
    RunDetail,
    RunEnded,
    RunRequest,
    SignalRequest,
    SignalSent,
    StepLogBody,
    WorkerState,
    WorkflowDetail,
    WorkflowSummary,
    run_detail,
    step_log_body,
    worker_states,
    workflow_detail,
    workflow_summary,
)
from brain.server.events import ChangeWatcher, follow_log, stream
from brain.server.json_input import JsonApiRequest, json_only
from brain.service.hooks import body_params
from brain.store.queue import QueueFull


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
    _loopback_only(connection)


def require_mcp_access(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard for ``/mcp`` (SPEC §23): the rule of ``/api`` for a client that is not a page —
    the bearer token in the ``Authorization`` header, or loopback-only without one."""
    token = security.api_token()
    if token is not None:
        if not security.token_matches(connection.headers.get("authorization"), token):
            raise NotAuthorizedException(detail="missing or wrong bearer token")
        return
    _loopback_only(connection)


def _loopback_only(connection: ASGIConnection[Any, Any, Any, Any]) -> None:
    """With no token set: refuse a request whose ``Host`` is not a loopback name or whose
    ``Origin`` is another site (DNS rebinding, CSRF)."""
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


# The query parameters of lists and streams, described for the OpenAPI document.
OfWorkflow = Annotated[str | None, QueryParameter(description="only those of this workflow")]
OfRun = Annotated[str | None, QueryParameter(description="only this run's (an id prefix will do)")]
#: The largest ``seq`` a log line can have (both databases keep 64-bit integers).
MAX_SEQ = 2**62
LinesAfter = Annotated[int, QueryParameter(description="only the lines whose seq is greater")]
FollowLog = Annotated[bool, QueryParameter(description="stream new lines until the step ends")]
InStatus = Annotated[str | None, QueryParameter(description="only runs in this status")]
HowMany = Annotated[int, QueryParameter(description="how many: 1 to 1000")]
#: The body of cancel: no fields are defined, but malformed JSON is still refused.
IgnoredBody = Annotated[Any, Body(description="optional and ignored: no fields are defined "
                                              "(malformed JSON is still refused)")]


# --- routes ----------------------------------------------------------------------------------------


@get("/health", sync_to_thread=False)
def health() -> Health:
    """Liveness: the process answers."""
    return Health(status="ok")


@get("/workflows", responses=documented(400))
async def list_workflows(brain: NamedDependency[ServiceAccess]) -> list[WorkflowSummary]:
    """Every loaded workflow with its triggers."""
    now = utcnow()
    return [workflow_summary(wf, now) for wf in brain.workflows.values()]


@get("/workflows/{name:str}", responses=documented(400, 404))
async def get_workflow(brain: NamedDependency[ServiceAccess], name: FromPath[str]) -> WorkflowDetail:
    """One workflow: steps, edges, triggers and next fire times."""
    return workflow_detail(brain.workflow(name), utcnow())


@post("/workflows/{name:str}/runs", status_code=202, guards=[json_only],
      operation_class=OptionalBodyOperation,
      responses=documented(400, 404, 413, 415, 422, 429, successes=QUEUED_OR_ENDED))
async def start_run(request: Request[Any, Any, Any], brain: NamedDependency[ServiceAccess],
                    name: FromPath[str],
                    data: JSONBody[RunRequest | None] = None) -> Response[RunAccepted | RunEnded]:
    """Queue a run: ``{"params": {...}, "body": ..., "wait": false}``; with ``wait``,
    answer when it ends, with its ``output`` (or 202 after 30 s). Parameters that do not
    validate: 422, one error per field, nothing queued. A ``traceparent`` header: the run's
    trace continues the caller's (when traces are on, SPEC §25)."""
    data = data or RunRequest()
    trigger = TriggerData.from_input({"body": data.body}, event="manual")
    run_id, _ = await brain.start(name, trigger, trigger_key="api", params=data.params or {},
                                  trace_parent=trace_headers(request.headers))
    return await _answer(brain, run_id, data.wait, 30.0)


def trace_headers(headers: Any) -> dict[str, str] | None:
    """A request's W3C trace context headers (``traceparent``, ``tracestate``), if any."""
    found = {k: headers[k] for k in ("traceparent", "tracestate") if headers.get(k)}
    return found or None


async def _answer(brain: ServiceAccess, run_id: str, wait: bool,
                  seconds: float) -> Response[RunAccepted | RunEnded]:
    if wait:
        ended = await brain.wait_for(run_id, seconds)
        if ended is not None:
            return Response(RunEnded(run_id, ended.status, ended.error, ended.output),
                            status_code=200)
    return Response(RunAccepted(run_id), status_code=202)


@get("/runs", responses=documented(400))
async def list_runs(brain: NamedDependency[ServiceAccess], workflow: OfWorkflow = None,
                    status: InStatus = None, limit: HowMany = 20) -> list[RunDetail]:
    """Recent runs, newest first (without their steps); ``limit`` is 1 to 1000."""
    if not 1 <= limit <= 1000:
        raise HTTPException(status_code=400, detail="limit must be from 1 to 1000")
    return [run_detail(r) for r in await brain.runs(workflow=workflow, status=status, limit=limit)]


@get("/runs/{run_id:str}", responses=documented(400, 404))
async def get_run(brain: NamedDependency[ServiceAccess], run_id: FromPath[str]) -> RunDetail:
    """One run with its steps in call order (a unique id prefix will do)."""
    return run_detail(await brain.run(run_id))


@post("/runs/{run_id:str}/cancel", status_code=202, guards=[json_only],
      operation_class=OptionalBodyOperation, responses=documented(400, 404, 409, 413, 415))
async def cancel_run(brain: NamedDependency[ServiceAccess], run_id: FromPath[str],
                     data: IgnoredBody = None) -> CancelRequested:
    """Ask a run to stop; its executor stops it within a second. 409 once it ended."""
    run, active = await brain.cancel(run_id)
    if not active:
        raise HTTPException(status_code=409, detail=f"run {run.run_id} already ended ({run.status})")
    return CancelRequested(run_id=run.run_id, status=run.status, cancel_requested=True)


@post("/runs/{run_id:str}/retry", status_code=202, guards=[json_only],
      operation_class=OptionalBodyOperation, responses=documented(400, 404, 409, 413, 415))
async def retry_run(brain: NamedDependency[ServiceAccess], run_id: FromPath[str],
                    data: JSONBody[RetryRequest | None] = None) -> RetryQueued:
    """Queue a failed or cancelled run again: steps that succeeded keep their outputs and
    do not run; the others run on the current definition. ``{"from": STEP}``: STEP and
    every step downstream run again (a succeeded run too). 409 while it is active, after it
    succeeded (without ``from``), once it was retried, or when a step it keeps changed since
    (SPEC §24); 400 for an unknown step."""
    new_id, original = await brain.retry(run_id, from_step=data.from_step if data else None)
    return RetryQueued(run_id=new_id, retry_of=original)


@get("/events", responses=documented(400, successes={200: ResponseSpec(
    ChangeEvent, media_type="text/event-stream", generate_examples=False,
    description="a stream of server-sent events, one per change")}))
async def events(changes: NamedDependency[ChangeWatcher], run_id: OfRun = None,
                 workflow: OfWorkflow = None) -> ServerSentEvent:
    """Run and step changes as server-sent events (``event: run`` / ``event: step``, JSON
    data), optionally only those of one run (an id prefix will do) or one workflow."""
    if run_id is not None and not all(c in "0123456789abcdefABCDEF" for c in run_id):
        raise HTTPException(status_code=400, detail="run_id is hexadecimal digits")
    return ServerSentEvent(stream(changes, run_id, workflow),
                           headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@get("/runs/{run_id:str}/steps/{step:str}/log", responses=documented(400, 404, successes={
    200: ResponseSpec(StepLogBody, description="the stored lines; with ?follow=true, "
                      "server-sent events instead: log (new lines), then end")}))
async def step_log(brain: NamedDependency[ServiceAccess], run_id: FromPath[str],
                   step: FromPath[str], after: LinesAfter = 0,
                   follow: FollowLog = False) -> StepLogBody | ServerSentEvent:
    """A step's log: the first 8 KiB and the last 64 KiB it wrote, a line each with its
    stream and time offset. ``?after=N``: only the lines after ``seq`` N. ``?follow=true``:
    server-sent events, a ``log`` event (``{"run_id", "step", "lines"}``) per batch of new
    lines as they are stored, then ``end`` (``{"run_id", "step", "status"}``) once the step
    has ended."""
    if not 0 <= after <= MAX_SEQ:
        raise HTTPException(status_code=400, detail=f"after must be from 0 to {MAX_SEQ}")
    run, status, lines = await brain.step_log(run_id, step, after=after)  # 404 if unknown
    if follow:
        # (the type is said again: the handler's union answer would label it JSON)
        return ServerSentEvent(follow_log(brain, run.run_id, step, after),
                               headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no",
                                        "Content-Type": "text/event-stream"})
    return step_log_body(run.run_id, step, status, lines, after)


@post("/runs/{run_id:str}/steps/{step:str}/decision", status_code=200, guards=[json_only],
      request_max_body_size=webhooks.MAX_BODY_BYTES,
      responses=documented(400, 404, 409, 413, 415))
async def decide(brain: NamedDependency[ServiceAccess], run_id: FromPath[str],
                 step: FromPath[str], data: JSONBody[DecisionRequest]) -> DecisionTaken:
    """Approve or reject a step waiting for a decision (``approval()``, SPEC §16):
    ``{"approve": true|false, "comment": "..."}``. Committed before the answer; the run
    continues on an idle executor. 409 when the step was decided already or is not waiting."""
    decision = await brain.decide(run_id, step, approved=data.approve, comment=data.comment,
                                  by="api")
    return DecisionTaken(run_id=decision["run_id"], step=step, approved=decision["approved"],
                         comment=decision["comment"], by=decision["by"], at=decision["at"])


@post("/signals/{signal:str}", status_code=200, guards=[json_only],
      request_max_body_size=webhooks.MAX_BODY_BYTES,
      operation_class=OptionalBodyOperation, responses=documented(400, 413, 415))
async def send_signal(brain: NamedDependency[ServiceAccess], signal: FromPath[str],
                      data: JSONBody[SignalRequest | None] = None) -> SignalSent:
    """Send a signal: every step waiting for it (``wait_for()``, SPEC §16) with the same
    key continues, its output the body. Committed before the answer; the list of the steps
    it continued (empty when nothing waited)."""
    data = data or SignalRequest()
    body = data.body if isinstance(data.body, str) else "" if data.body is None else \
        json.dumps(data.body, ensure_ascii=False, separators=(",", ":"))
    resumed = await brain.signal(signal, data.key, clean_text(body) or "", by="api")
    return SignalSent(resumed=[ResumedStep(run_id=r, step=s) for r, s in resumed])


@get("/workers", responses=documented(400))
async def list_workers(brain: NamedDependency[ServiceAccess]) -> list[WorkerState]:
    """The executor processes sharing the database (``brain serve``, ``brain worker``); one
    silent for longer than a lease is ``lost``."""
    return worker_states(await brain.workers())


_BRAIN = {"brain": Provide(provide_access, sync_to_thread=False)}


@get("/metrics", guards=[require_api_access], dependencies=_BRAIN, include_in_schema=False)
async def metrics(brain: NamedDependency[ServiceAccess]) -> Response[bytes]:
    """Prometheus text format (SPEC §14): runs, steps, queue, schedules, webhooks."""
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(await brain.metrics_text(), media_type=CONTENT_TYPE_LATEST)


@post("/hooks/{path:path}", request_max_body_size=webhooks.MAX_BODY_BYTES, status_code=202,
      dependencies=_BRAIN, exception_handlers=DOMAIN_ERRORS,
      responses=documented(400, 413, 422, 429, successes=QUEUED_OR_ENDED))
async def receive_webhook(request: Request[Any, Any, Any], brain: NamedDependency[ServiceAccess],
                          path: FromPath[str],
                          wait: FromQuery[bool] = False) -> Response[RunAccepted | RunEnded]:
    """A signed delivery: committed as a queued run before the answer. A body that is a
    JSON object fills the workflow's parameters named by its keys (the others are ignored;
    the raw body is still ``trigger.body``); parameters that do not validate: 422, nothing
    queued."""
    hook = brain.hook(path.strip("/"))
    shown = hook.workflow.name if hook else ""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > webhooks.MAX_BODY_BYTES:
        brain.count_delivery(shown, "too_large")
        raise HTTPException(status_code=413, detail="body larger than 1 MiB")
    body = await request.body()
    if len(body) > webhooks.MAX_BODY_BYTES:
        brain.count_delivery(shown, "too_large")
        raise HTTPException(status_code=413, detail="body larger than 1 MiB")
    headers = {k.lower(): v for k, v in request.headers.items()}
    if not webhooks.verify(hook.secret if hook else None, body, headers,
                           require_timestamp=hook.trigger.require_timestamp if hook else False) \
            or hook is None:
        brain.count_delivery(shown, "refused")
        raise NotAuthorizedException(detail="invalid signature")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        brain.count_delivery(shown, "invalid")
        raise HTTPException(status_code=400, detail="the body is not UTF-8 text") from None
    trigger = TriggerData(event="webhook", body=text, headers=webhooks.stored_headers(headers))
    params = body_params(text, hook.workflow.params_schema)
    try:
        run_id, created = await brain.start(hook.workflow, trigger, trigger_key="webhook",
                                            delivery_id=webhooks.delivery_id(headers),
                                            params=params, trace_parent=trace_headers(headers))
    except QueueFull:
        brain.count_delivery(shown, "throttled")
        raise
    except WorkflowInputError:  # signed, but not what the workflow takes
        brain.count_delivery(shown, "invalid")
        raise
    brain.count_delivery(shown, "accepted" if created else "duplicate")
    return await _answer(brain, run_id, wait, hook.trigger.wait_seconds)


#: ``/api``: the access guard, the injected service and change watcher, JSON read by the
#: API's rules, and The Brain's errors answered as JSON.
API = Router(path="/api", guards=[require_api_access], request_class=JsonApiRequest,
             security=[{"BearerToken": []}],
             dependencies={**_BRAIN, "changes": Provide(provide_changes, sync_to_thread=False)},
             exception_handlers=DOMAIN_ERRORS,
             route_handlers=[list_workflows, get_workflow, start_run, list_runs, get_run,
                             cancel_run, retry_run, decide, send_signal, events, step_log,
                             list_workers])

ROUTES: list[ControllerRouterHandler] = [health, API, metrics, receive_webhook]
