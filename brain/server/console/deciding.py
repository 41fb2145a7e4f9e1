"""The console's Approve / Reject (SPEC §16): ``POST /runs/{run_id}/steps/{step}/decision``.

A form post (``approve=true|false``, ``comment``), from the run page's form with or without
JavaScript; the decision is stored ``by: "console"`` (the ``/api`` route stores ``api``).
The page's script asks for JSON (``Accept: application/json``) and gets the decision or
``{"status_code", "detail"}``; a plain form post is sent back to the run page, or shown a
short page saying why nothing was decided.

Who may post is decided as for the console's other actions (``/api``'s cancel and retry):
the bearer token, or the console's cookie only from a page of this very origin; without a
token, loopback only and never from another origin.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from litestar import Request, Response, post
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency, Provide
from litestar.exceptions import NotAuthorizedException
from litestar.handlers.base import BaseRouteHandler
from litestar.params import FromPath
from litestar.response import Redirect

from brain._errors import RunConflict, RunNotFound
from brain.server import security
from brain.server.access import ServiceAccess, provide_access
from brain.server.console.rendering import render
from brain.server.routes import require_api_access

#: The longest comment taken (as ``POST /api/runs/{id}/steps/{step}/decision`` takes).
MAX_COMMENT = 4000
#: A decision's form is a few kilobytes at most.
MAX_BODY = 64 * 1024
BY = "console"


def require_console_write(connection: ASGIConnection[Any, Any, Any, Any],
                          handler: BaseRouteHandler) -> None:
    """Guard of the console's writes: the ``Authorization`` header, or the console's cookie
    sent by a page of this server's own origin; without ``BRAIN_API_TOKEN``, the loopback
    rules of ``/api`` (another origin is refused)."""
    token = security.api_token()
    if token is None:
        require_api_access(connection, handler)
        return
    if security.token_matches(connection.headers.get("authorization"), token):
        return
    cookie = connection.cookies.get("brain_token")
    origin, host = connection.headers.get("origin"), connection.headers.get("host")
    if cookie and origin and host and security.same_origin(origin, host) \
            and security.token_matches(f"Bearer {cookie}", token):
        return
    raise NotAuthorizedException(detail="missing or wrong bearer token (the console's cookie "
                                        "counts only on a page of this server)")


def _wants_json(request: Request[Any, Any, Any]) -> bool:
    return "application/json" in (request.headers.get("accept") or "")


def _refused(request: Request[Any, Any, Any], status: int, detail: str,
             run_id: str, step: str) -> Response[Any]:
    if _wants_json(request):
        return Response({"status_code": status, "detail": detail}, status_code=status)
    return render("decision.html", status_code=status, detail=detail, run_id=run_id,
                  step=step, nav="runs")


async def _read_form(request: Request[Any, Any, Any]) -> tuple[bool | None, str | None, str]:
    """``(approve, comment, problem)``: the form's fields, or what is wrong with them."""
    form = await request.form()
    approve = {"true": True, "false": False}.get(str(form.get("approve", "")).lower())
    comment = str(form.get("comment") or "").strip() or None
    if approve is None:
        return None, None, "approve must be true or false"
    if comment is not None and len(comment) > MAX_COMMENT:
        return None, None, f"the comment is longer than {MAX_COMMENT} characters"
    return approve, comment, ""


@post("/runs/{run_id:str}/steps/{step:str}/decision", include_in_schema=False,
      guards=[require_console_write], request_max_body_size=MAX_BODY,
      dependencies={"brain": Provide(provide_access, sync_to_thread=False)})
async def decide_in_console(request: Request[Any, Any, Any], brain: NamedDependency[ServiceAccess],
                            run_id: FromPath[str], step: FromPath[str]) -> Response[Any]:
    """Approve or reject a waiting approval from the run page; stored ``by: "console"``.

    JSON asked for: 200 and the decision, or 400 / 404 / 409 with ``detail``. Otherwise
    a 303 back to the step on the run page, or a page saying why nothing was decided."""
    approve, comment, problem = await _read_form(request)
    if approve is None:
        return _refused(request, 400, problem, run_id, step)
    try:
        decision = await brain.decide(run_id, step, approved=approve, comment=comment, by=BY)
    except RunConflict as exc:
        return _refused(request, 409, str(exc), run_id, step)
    except RunNotFound as exc:
        return _refused(request, 404, str(exc), run_id, step)
    if _wants_json(request):
        return Response(decision, status_code=200)
    return Redirect(f"/runs/{decision['run_id']}#step-{quote(step)}", status_code=303)


ROUTES: list[Any] = [decide_in_console]
