"""Drawing the console's pages: the templates and their filters, the page's headers (no
caching, a strict Content-Security-Policy), and who may see a page."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from litestar import Request, Response
from litestar.exceptions import NotAuthorizedException
from litestar.response import Redirect

from brain.results import RunResult
from brain.server import security
from brain.server.console import labels
from brain.server.console.timeline import took
from brain.server.routes import require_api_access

HERE = Path(__file__).parent
#: The page's headers: never cached, and nothing from elsewhere, no inline script or style.
HEADERS = {"Cache-Control": "no-store",
           "Content-Security-Policy": "default-src 'self'; style-src 'self'; "
           "img-src 'self' data:; frame-ancestors 'none'"}


def run_seconds(run: RunResult) -> float | None:
    """How long the run took (``None`` until it has started and ended)."""
    if run.started_at and run.ended_at:
        return (run.ended_at - run.started_at).total_seconds()
    return None


def utc_text(value: datetime | str | None) -> str:
    """A time (aware, or ISO 8601 text with an offset) as ``2026-01-05 09:00:00`` in UTC;
    text that is not a time is shown as it is."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            return value
    else:
        when = value
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S")


@functools.cache
def _templates() -> Any:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = lambda t: t.strftime("%Y-%m-%d %H:%M:%S") if t else ""
    env.filters["utc"] = utc_text
    env.filters["short"] = lambda run_id: (run_id or "")[:12]
    env.filters["trigger"] = labels.trigger_label
    env.filters["failure_of"] = labels.failure_of
    env.filters["took"] = lambda run: took(run_seconds(run))
    return env


def render(template: str, *, status_code: int = 200, **values: Any) -> Response[str]:
    """The page ``template`` drawn with ``values``, as an HTML answer."""
    page = _templates().get_template(template).render(**values)
    return Response(page, media_type="text/html; charset=utf-8", status_code=status_code,
                    headers=HEADERS)


def allowed(request: Request[Any, Any, Any]) -> Response[str] | None:
    """``None`` when the request may see the console, else the way to the login form."""
    try:
        require_api_access(request, None)  # type: ignore[arg-type]
    except NotAuthorizedException:
        if security.api_token() is None:
            raise
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return Redirect(f"/login?next={quote(target)}", status_code=303)  # type: ignore[return-value]
    return None
