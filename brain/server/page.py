"""The web page of runs: server-rendered HTML, no JavaScript build, refreshed every few seconds."""

from __future__ import annotations

import html
from typing import Any

from litestar import Request, Response, get
from litestar.datastructures import Cookie
from litestar.exceptions import NotFoundException
from litestar.params import FromPath, FromQuery

from brain._errors import RunNotFound
from brain.results import RunResult
from brain.server import security
from brain.server.routes import require_api_access, service_of

_STYLE = """body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}
td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
.succeeded{color:#18794e}.failed{color:#c62828}.running{color:#1565c0}.cancelled{color:#b26a00}
.queued,.pending,.skipped{color:#777}pre{white-space:pre-wrap;max-width:70em;margin:0}
a{color:#1565c0}"""


def _page(title: str, body: str, refresh: bool) -> str:
    meta = '<meta http-equiv="refresh" content="3">' if refresh else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'>{meta}<title>{html.escape(title)}"
            f"</title><style>{_STYLE}</style></head><body>{body}</body></html>")


def _when(run: RunResult) -> str:
    t = run.started_at or run.created_at
    return t.strftime("%Y-%m-%d %H:%M:%S UTC") if t else ""


@get("/", guards=[require_api_access], include_in_schema=False)
async def runs_page(request: Request[Any, Any, Any], workflow: FromQuery[str | None] = None,
                    token: FromQuery[str | None] = None) -> Response[str]:
    """Recent runs, newest first."""
    runs = await service_of(request).store.list_runs(workflow=workflow, limit=100)
    rows = "".join(
        f"<tr><td><a href='/runs/{r.run_id}'>{r.run_id[:12]}</a></td>"
        f"<td><a href='/?workflow={html.escape(r.workflow)}'>{html.escape(r.workflow)}</a></td>"
        f"<td class='{r.status}'>{r.status}</td><td>{html.escape(r.trigger.event)}</td>"
        f"<td>{_when(r)}</td><td>{html.escape((r.error or '')[:120])}</td></tr>" for r in runs)
    body = ("<h1>The Brain — runs</h1><table><tr><th>run</th><th>workflow</th><th>status</th>"
            f"<th>trigger</th><th>started</th><th>error</th></tr>{rows}</table>")
    return _with_cookie(Response(_page("The Brain", body, refresh=True), media_type="text/html"),
                        token)


@get("/runs/{run_id:str}", guards=[require_api_access], include_in_schema=False)
async def run_page(request: Request[Any, Any, Any], run_id: FromPath[str]) -> Response[str]:
    """One run and its steps."""
    try:
        run = await service_of(request).store.get_run(run_id)
    except RunNotFound as exc:
        raise NotFoundException(detail=str(exc)) from None
    steps = "".join(
        f"<tr><td>{html.escape(s.name)}</td><td>{s.kind}</td><td class='{s.status}'>{s.status}</td>"
        f"<td>{s.tries}</td><td><pre>{html.escape((s.error or s.output or '')[:4000])}</pre></td></tr>"
        for s in run.steps.values())
    body = (f"<p><a href='/'>← runs</a></p><h1>{html.escape(run.workflow)} "
            f"<span class='{run.status}'>{run.status}</span></h1>"
            f"<p>run {run.run_id} · {html.escape(run.trigger.event)} · {_when(run)}</p>"
            + (f"<p class='failed'>{html.escape(run.error)}</p>" if run.error else "")
            + "<table><tr><th>step</th><th>kind</th><th>status</th><th>tries</th>"
            f"<th>output / error</th></tr>{steps}</table>")
    finished = run.status in ("succeeded", "failed", "cancelled")
    return Response(_page(f"run {run.run_id[:12]}", body, refresh=not finished),
                    media_type="text/html")


def _with_cookie(response: Response[str], token: str | None) -> Response[str]:
    """``/?token=...`` (checked by the guard) lets a browser keep the token in a cookie."""
    expected = security.api_token()
    if token and expected and security.token_matches(f"Bearer {token}", expected):
        response.set_cookie(Cookie(key="brain_token", value=token, httponly=True,
                                   samesite="strict", path="/"))
    return response


PAGES = [runs_page, run_page]
