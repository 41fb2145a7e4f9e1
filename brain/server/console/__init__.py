"""The console (SPEC §13): workflows, runs and one run, server-rendered from templates.

Readable without JavaScript; ``static/run_form.js`` adds "Run now" (each workflow's form,
drawn from its parameters by ``run_form.py``), ``static/console.js`` live updates,
"Cancel", "Retry", "Approve" / "Reject", copy buttons and a running step's progress,
``static/logs.js`` step logs. Live pages are drawn here only: on each change
``GET /api/events`` announces, the script fetches the page again and swaps in its parts.
``rendering.py`` holds the templates and who may see a page, ``timeline.py`` lays out a
run's timeline, ``labels.py`` words triggers, webhook headers and failure links,
``waits.py`` what waiting steps wait for and how they were decided, ``deciding.py`` the
Approve / Reject route, ``usage.py`` a step's tokens and progress, ``graph.py`` draws the
graph. Every asset ships in this package: nothing is fetched from elsewhere. With
``BRAIN_API_TOKEN`` set, ``/login`` takes the token once and keeps it in a
``SameSite=Strict``, ``HttpOnly`` cookie.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.di import NamedDependency, Provide
from litestar.exceptions import NotAuthorizedException, NotFoundException
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect
from litestar.static_files import create_static_files_router

from brain._clock import utcnow
from brain._errors import RunNotFound
from brain.results import FINISHED_RUN, RunResult, RunStatus, base_name
from brain.server import security
from brain.server.access import ServiceAccess, provide_access
from brain.server.bodies import workflow_summary
from brain.server.console import deciding, labels, usage, waits
from brain.server.console.rendering import allowed, render, run_seconds
from brain.server.console.run_form import form_fields
from brain.server.console.timeline import kept_step, timeline, took

HERE = Path(__file__).parent
PAGE_SIZE = 50
#: Outputs longer than this are folded (the rest is behind "show all").
FOLD_CHARS = 4000
#: How many of the newest failure-handler runs a failed run's page looks through for its own.
HANDLER_SEARCH = 200
#: How many runs waiting for a decision the workflows page lists (the oldest first).
DECISIONS_SHOWN = 100


def _seconds(run: RunResult, name: str) -> float | None:
    step = run.steps[name]
    if step.started_at and step.ended_at:
        return (step.ended_at - step.started_at).total_seconds()
    return None


_BRAIN = {"brain": Provide(provide_access, sync_to_thread=False)}


@get("/", include_in_schema=False, dependencies=_BRAIN)
async def workflows_page(request: Request[Any, Any, Any], brain: NamedDependency[ServiceAccess],
                         token: FromQuery[str | None] = None) -> Response[str]:
    """Every workflow: description, triggers and their next fires, the last run, Run now."""
    if token:
        return _login_with(token, "/")
    denied = allowed(request)
    if denied is not None:
        return denied
    rows = []
    now = utcnow()
    for wf in brain.workflows.values():
        last = await brain.runs(workflow=wf.name, status=None, limit=1)
        rows.append({"summary": msgspec.to_builtins(workflow_summary(wf, now)),
                     "last": last[0] if last else None,
                     "fields": form_fields(wf.params_schema)})
    workers = await brain.workers()
    decisions = waits.waiting_decisions(await brain.decisions_waiting(DECISIONS_SHOWN))
    return render("workflows.html", workflows=rows, nav="workflows", workers=workers,
                  decisions=decisions, more_decisions=len(decisions) >= DECISIONS_SHOWN)


@get("/runs", include_in_schema=False, dependencies=_BRAIN)
async def runs_page(request: Request[Any, Any, Any], brain: NamedDependency[ServiceAccess],
                    workflow: FromQuery[str | None] = None,
                    status: FromQuery[str | None] = None, event: FromQuery[str | None] = None,
                    page: FromQuery[int] = 1) -> Response[str]:
    """Runs, newest first, filtered and in pages; live while runs are active."""
    denied = allowed(request)
    if denied is not None:
        return denied
    page = max(1, min(page, 10_000))
    runs = await brain.runs(workflow=workflow or None, status=status or None, event=event or None,
                            limit=PAGE_SIZE + 1, offset=(page - 1) * PAGE_SIZE)
    filters = {k: v for k, v in (("workflow", workflow), ("status", status), ("event", event)) if v}
    return render("runs.html", runs=runs[:PAGE_SIZE], page=page, more=len(runs) > PAGE_SIZE,
                  filters=filters, query=lambda **extra: urlencode({**filters, **extra}),
                  workflows=sorted(brain.workflows), statuses=[s.value for s in RunStatus],
                  nav="runs")


@get("/runs/{run_id:str}", include_in_schema=False, dependencies=_BRAIN)
async def run_page(request: Request[Any, Any, Any], brain: NamedDependency[ServiceAccess],
                   run_id: FromPath[str]) -> Response[str]:
    """One run: its graph, a timeline, and every step's inputs, output, error and stderr;
    the version it started on and those it continued on, a notice when it waits and the
    workflow as loaded now would fail it (SPEC §24), and "Retry from here" on each step
    once it ended.

    The page's script fetches this very page again when the run changes and swaps in
    its parts, so the server's templates are the only place a run is drawn."""
    denied = allowed(request)
    if denied is not None:
        return denied
    try:
        run = await brain.run(run_id)
    except RunNotFound as exc:
        raise NotFoundException(detail=str(exc)) from None
    wf = brain.workflows.get(run.workflow)
    graph_svg = ""
    if wf is not None:
        from brain.server.console.graph import svg

        statuses = {name: str(step.status) for name, step in run.steps.items()}
        graph_svg = svg(wf.graph, statuses)
    handlers: list[RunResult] = []
    if run.status == RunStatus.FAILED and (wf is None or wf.failure_handlers):
        # Handler runs are queued with the failure: among the newest runs started by one.
        candidates = await brain.runs(workflow=None, status=None, event="failure",
                                      limit=HANDLER_SEARCH)
        handlers = labels.handler_runs(run.run_id, candidates)
    return render("run.html", run=run, graph=graph_svg, nav="runs", fold=FOLD_CHARS,
                  timeline=timeline(run, utcnow()), took=took(run_seconds(run)),
                  seconds=lambda name: took(_seconds(run, name)),
                  active=run.status not in FINISHED_RUN,
                  retryable=str(run.status) in ("failed", "cancelled"),
                  webhook=labels.webhook_facts(run.trigger.headers),
                  failure_of=labels.failure_of(run), handlers=handlers,
                  inputs=lambda name: json.dumps(run.steps[name].inputs, indent=2,
                                                 ensure_ascii=False),
                  is_instance=lambda name: base_name(name) != name,
                  kept=lambda name: kept_step(run, run.steps[name]),
                  tokens=usage.total_tokens(run.steps.values()),
                  step_tokens=lambda name: usage.tokens(run.steps[name]),
                  saved_tokens=lambda name: usage.saved(run.steps[name]),
                  progress=lambda name: usage.progress(run.steps[name]),
                  param_text=lambda v: v if isinstance(v, str) else json.dumps(
                      v, ensure_ascii=False),
                  output_text=_output_text(run.output),
                  stale=(await brain.stale_reason(run.run_id)
                         if run.status == RunStatus.WAITING else None),
                  **_waits(request, run))


def _output_text(output: Any) -> str | None:
    """A run's output as its page shows it: text as it is, other values as indented JSON."""
    if output is None or isinstance(output, str):
        return output
    return json.dumps(output, indent=2, ensure_ascii=False)


def _waits(request: Request[Any, Any, Any], run: RunResult) -> dict[str, Any]:
    """The run page's views of its waiting steps (by name, in call order) and of how its
    steps that waited were decided."""
    base_url = str(request.base_url)
    token = security.api_token() is not None
    waiting = {name: wait for name, step in run.steps.items()
               if (wait := waits.wait_view(run.run_id, step, base_url=base_url, token=token))}
    decided = {name: decision for name, step in run.steps.items()
               if (decision := waits.decision_view(step))}
    return {"waiting": waiting, "decided": decided}


@get(["/favicon.ico", "/favicon.svg"], include_in_schema=False, sync_to_thread=False)
def favicon() -> Response[bytes]:
    """The console's icon (an SVG), where browsers look for one by default."""
    return Response(_favicon(), media_type="image/svg+xml",
                    headers={"Cache-Control": "public, max-age=86400"})


@functools.cache
def _favicon() -> bytes:
    return (HERE / "static" / "favicon.svg").read_bytes()


@get("/login", include_in_schema=False)
async def login_page(request: Request[Any, Any, Any], next: FromQuery[str] = "/",
                     failed: FromQuery[bool] = False) -> Response[str]:
    """The form that takes the token."""
    return render("login.html", next=_local(next), failed=failed, nav="")


@post("/login", include_in_schema=False, status_code=303)
async def login(request: Request[Any, Any, Any]) -> Response[Any]:
    """Check the token (constant time); keep it in a cookie; go where the user was going."""
    form = await request.form()
    token = str(form.get("token", "")).strip()
    target = _local(str(form.get("next", "/")))
    expected = security.api_token()
    if expected is None or not token or not security.token_matches(f"Bearer {token}", expected):
        return Redirect(f"/login?failed=1&next={quote(target)}", status_code=303)
    return _login_with(token, target)


def _login_with(token: str, target: str) -> Response[Any]:
    expected = security.api_token()
    if expected is None or not security.token_matches(f"Bearer {token}", expected):
        raise NotAuthorizedException(detail="missing or wrong bearer token")
    response: Response[Any] = Redirect(target, status_code=303)
    response.set_cookie(Cookie(key="brain_token", value=token, httponly=True, samesite="strict",
                               path="/"))
    return response


def _local(target: str) -> str:
    """Only a path of this server (never ``//elsewhere`` or ``https://...``)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


STATIC = create_static_files_router(path="/console/static", directories=[HERE / "static"],
                                    include_in_schema=False, name="console-static",
                                    send_as_attachment=False)

PAGES: list[Any] = [workflows_page, runs_page, run_page, favicon, login_page, login, STATIC,
                    *deciding.ROUTES]
