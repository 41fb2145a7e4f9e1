"""The console (SPEC §13): workflows, runs and one run, server-rendered from templates.

Readable without JavaScript; ``static/console.js`` adds live updates, "Run now",
"Cancel", "Retry", copy buttons and step logs. Live pages are drawn here only: on each
change ``GET /api/events`` announces, the script fetches the page again and swaps in
its parts. ``timeline.py`` lays out a run's timeline, ``labels.py`` words triggers,
webhook headers and failure links, ``graph.py`` draws the graph. Every
asset ships in this package: nothing is fetched from elsewhere. With
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
from brain.server.console import labels
from brain.server.console.timeline import timeline, took
from brain.server.routes import require_api_access

HERE = Path(__file__).parent
PAGE_SIZE = 50
#: Outputs longer than this are folded (the rest is behind "show all").
FOLD_CHARS = 4000
#: How many of the newest failure-handler runs a failed run's page looks through for its own.
HANDLER_SEARCH = 200


@functools.cache
def _templates() -> Any:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = lambda t: t.strftime("%Y-%m-%d %H:%M:%S") if t else ""
    env.filters["short"] = lambda run_id: (run_id or "")[:12]
    env.filters["trigger"] = labels.trigger_label
    env.filters["failure_of"] = labels.failure_of
    env.filters["took"] = lambda run: took(_run_seconds(run))
    return env


def _render(template: str, **values: Any) -> Response[str]:
    page = _templates().get_template(template).render(**values)
    return Response(page, media_type="text/html; charset=utf-8",
                    headers={"Cache-Control": "no-store",
                             "Content-Security-Policy": "default-src 'self'; style-src 'self'; "
                             "img-src 'self' data:; frame-ancestors 'none'"})


def _allowed(request: Request[Any, Any, Any]) -> Response[str] | None:
    """``None`` when the request may see the console, else the way to the login form."""
    try:
        require_api_access(request, None)  # type: ignore[arg-type]
    except NotAuthorizedException:
        if security.api_token() is None:
            raise
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return Redirect(f"/login?next={quote(target)}", status_code=303)  # type: ignore[return-value]
    return None


def _seconds(run: RunResult, name: str) -> float | None:
    step = run.steps[name]
    if step.started_at and step.ended_at:
        return (step.ended_at - step.started_at).total_seconds()
    return None


def _run_seconds(run: RunResult) -> float | None:
    if run.started_at and run.ended_at:
        return (run.ended_at - run.started_at).total_seconds()
    return None


_BRAIN = {"brain": Provide(provide_access, sync_to_thread=False)}


@get("/", include_in_schema=False, dependencies=_BRAIN)
async def workflows_page(request: Request[Any, Any, Any], brain: NamedDependency[ServiceAccess],
                         token: FromQuery[str | None] = None) -> Response[str]:
    """Every workflow: description, triggers and their next fires, the last run, Run now."""
    if token:
        return _login_with(token, "/")
    denied = _allowed(request)
    if denied is not None:
        return denied
    rows = []
    now = utcnow()
    for wf in brain.workflows.values():
        last = await brain.runs(workflow=wf.name, status=None, limit=1)
        rows.append({"summary": msgspec.to_builtins(workflow_summary(wf, now)),
                     "last": last[0] if last else None})
    workers = await brain.workers()
    return _render("workflows.html", workflows=rows, nav="workflows", workers=workers)


@get("/runs", include_in_schema=False, dependencies=_BRAIN)
async def runs_page(request: Request[Any, Any, Any], brain: NamedDependency[ServiceAccess],
                    workflow: FromQuery[str | None] = None,
                    status: FromQuery[str | None] = None, event: FromQuery[str | None] = None,
                    page: FromQuery[int] = 1) -> Response[str]:
    """Runs, newest first, filtered and in pages; live while runs are active."""
    denied = _allowed(request)
    if denied is not None:
        return denied
    page = max(1, min(page, 10_000))
    runs = await brain.runs(workflow=workflow or None, status=status or None, event=event or None,
                            limit=PAGE_SIZE + 1, offset=(page - 1) * PAGE_SIZE)
    filters = {k: v for k, v in (("workflow", workflow), ("status", status), ("event", event)) if v}
    return _render("runs.html", runs=runs[:PAGE_SIZE], page=page, more=len(runs) > PAGE_SIZE,
                   filters=filters, query=lambda **extra: urlencode({**filters, **extra}),
                   workflows=sorted(brain.workflows), nav="runs")


@get("/runs/{run_id:str}", include_in_schema=False, dependencies=_BRAIN)
async def run_page(request: Request[Any, Any, Any], brain: NamedDependency[ServiceAccess],
                   run_id: FromPath[str]) -> Response[str]:
    """One run: its graph, a timeline, and every step's inputs, output, error and stderr.

    The page's script fetches this very page again when the run changes and swaps in
    its parts, so the server's templates are the only place a run is drawn."""
    denied = _allowed(request)
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
    return _render("run.html", run=run, graph=graph_svg, nav="runs", fold=FOLD_CHARS,
                   timeline=timeline(run, utcnow()), took=took(_run_seconds(run)),
                   seconds=lambda name: took(_seconds(run, name)),
                   active=run.status not in FINISHED_RUN,
                   retryable=str(run.status) in ("failed", "cancelled"),
                   webhook=labels.webhook_facts(run.trigger.headers),
                   failure_of=labels.failure_of(run), handlers=handlers,
                   inputs=lambda name: json.dumps(run.steps[name].inputs, indent=2,
                                                  ensure_ascii=False),
                   is_instance=lambda name: base_name(name) != name)


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
    return _render("login.html", next=_local(next), failed=failed, nav="")


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

PAGES: list[Any] = [workflows_page, runs_page, run_page, favicon, login_page, login, STATIC]
