"""``create_app`` and ``BrainPlugin``: The Brain as a Litestar application or plugin."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from litestar import Litestar, Request, Response
from litestar.config.app import AppConfig
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme
from litestar.plugins import InitPluginProtocol
from litestar.router import Router

from brain._version import __version__
from brain.service import BrainService

if TYPE_CHECKING:
    from brain.store import Store
    from brain.workflow import Workflow

log = logging.getLogger("brain.server")


def _workflows(items: Iterable[Workflow | str | os.PathLike[str]] | Mapping[str, Workflow]
               ) -> dict[str, Workflow]:
    from brain._errors import WorkflowLoadError
    from brain.loader import discover
    from brain.workflow import Workflow

    if isinstance(items, Mapping):
        return dict(items)
    found: dict[str, Workflow] = {}
    paths: list[str] = []
    for item in items:
        if isinstance(item, Workflow):
            if item.name in found:
                raise WorkflowLoadError(f"workflow {item.name!r} is given twice")
            found[item.name] = item
        else:
            paths.append(os.fspath(item))
    for name, wf in discover(paths).items() if paths else ():
        if name in found:
            raise WorkflowLoadError(f"workflow {name!r} is defined twice")
        found[name] = wf
    return found


class BrainPlugin(InitPluginProtocol):
    """Adds The Brain's routes, executors, schedules and watchers to a Litestar app.

    >>> app = Litestar(route_handlers=[my_routes], plugins=[BrainPlugin([digest])])  # doctest: +SKIP

    Handlers of the host app can then queue runs with ``await wf.enqueue(body=...)``.
    """

    def __init__(self, workflows: Iterable[Workflow | str | os.PathLike[str]] | Mapping[str, Workflow],
                 *, store: Store | None = None, concurrency: int | None = None,
                 execute: bool = True, triggers: bool = True, page: bool = True,
                 reload_paths: list[str] | None = None) -> None:
        self.service = BrainService(_workflows(workflows), store=store, concurrency=concurrency,
                                    execute=execute, triggers=triggers)
        from brain.server.events import ChangeWatcher

        self.watcher = ChangeWatcher(self.service.store)
        self.service.observe(self.watcher)  # this process's runs reach /api/events at once
        from brain.server.mcp_mount import mcp_app

        #: ``/mcp``: the ``mcp=True`` workflows as MCP tools (SPEC §23).
        self.mcp = mcp_app(self.service)
        self.page = page
        self.reload_paths = reload_paths
        self._reloader: asyncio.Task[None] | None = None
        self._stop_now: asyncio.Task[None] | None = None

    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        """Register routes, state and the start-up/shut-down hooks."""
        from brain.server.console import PAGES
        from brain.server.mcp_mount import mcp_route
        from brain.server.routes import ROUTES

        app_config.route_handlers.extend(ROUTES)
        app_config.route_handlers.append(mcp_route)
        app_config.state["brain_mcp"] = self.mcp
        app_config.lifespan.append(lambda app: self.mcp.running())
        if self.page:
            app_config.route_handlers.extend(PAGES)
        app_config.state["brain"] = self.service
        app_config.state["brain_watcher"] = self.watcher
        app_config.on_startup.append(self._startup)
        app_config.on_shutdown.append(self._shutdown)
        return app_config

    async def _startup(self, app: Litestar) -> None:
        await self.service.start()
        if self.reload_paths is not None:
            from brain.server.reload import Reloader

            self._reloader = asyncio.create_task(Reloader(self.service, self.reload_paths).run())

    async def _shutdown(self, app: Litestar) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
        self.mcp.mcp.closing = True  # calls cut short by the stop leave their runs alone
        await self.watcher.close()
        await self.service.stop()

    def stop_now_soon(self) -> None:
        """Start :meth:`stop_now` without waiting (for a signal handler, on the loop)."""
        if self._stop_now is None and self.service.started:
            self._stop_now = asyncio.ensure_future(self.service.stop(grace_seconds=0))

    async def stop_now(self) -> None:
        """Stop without the grace period (a second Ctrl-C): running steps are stopped at once
        and their runs keep a lease that ends now, so the next start resumes them. A graceful
        stop already waiting ends with this one."""
        # A second stop() with no grace ends the first one's wait; both return when done.
        self.stop_now_soon()
        if self._stop_now is not None:
            await asyncio.shield(self._stop_now)


SCHEMA_ASSETS = "/schema/assets"


def _swagger_assets() -> tuple[SwaggerRenderPlugin, Router]:
    """Swagger UI at ``/schema`` with every file served by this app (installations are often
    offline; Litestar's default loads them from a CDN). The files come from the
    ``swagger-ui-bundle-v2`` package."""
    from litestar.static_files import create_static_files_router
    from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]

    plugin = SwaggerRenderPlugin(
        js_url=f"{SCHEMA_ASSETS}/swagger-ui-bundle.js", css_url=f"{SCHEMA_ASSETS}/swagger-ui.css",
        standalone_preset_js_url=f"{SCHEMA_ASSETS}/swagger-ui-standalone-preset.js",
        favicon=f"<link rel='icon' type='image/png' href='{SCHEMA_ASSETS}/favicon-32x32.png'>",
        path=["/", "/swagger"])
    router = create_static_files_router(path=SCHEMA_ASSETS, directories=[str(swagger_ui_path)],
                                        include_in_schema=False, name="brain-schema-assets")
    return plugin, router


class RateLimit:
    """At most one event per ``interval`` seconds (for log lines anyone can cause)."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._last = float("-inf")

    def allow(self) -> bool:
        """Whether an event may be reported now."""
        import time

        now = time.monotonic()
        if now - self._last < self.interval:
            return False
        self._last = now
        return True


_DISCONNECTS = RateLimit()


def internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Every 500: logged here with its traceback; the client gets the JSON shape only.

    A client that went away mid-body is not a server error: one short line, at most
    one a second (anyone can cause it, so it must not flood the log).
    """
    if "client disconnected prematurely" in str(exc):
        if _DISCONNECTS.allow():
            log.info("%s %s: the client disconnected before sending its whole body",
                     request.scope.get("method", "?"), request.scope.get("path", "?"))
        return Response({"status_code": 400, "detail": "incomplete request body"}, status_code=400)
    # scope["path"], not request.url: building the URL can be what failed (a bad Host).
    log.error("%s %s failed with an internal error", request.scope.get("method", "?"),
              request.scope.get("path", "?"), exc_info=exc)
    return Response({"status_code": 500, "detail": "Internal Server Error"}, status_code=500)


def create_app(workflows_or_paths: Iterable[Workflow | str | os.PathLike[str]] | Mapping[str, Workflow],
               *, store: Store | None = None, concurrency: int | None = None,
               execute: bool = True, triggers: bool = True,
               reload_paths: list[str] | None = None) -> Litestar:
    """The Litestar application ``brain serve`` runs: API, webhooks, page and executors.

    ``reload_paths``: watch these workflow files/folders and reload them on change.
    """
    plugin = BrainPlugin(workflows_or_paths, store=store, concurrency=concurrency,
                         execute=execute, triggers=triggers, reload_paths=reload_paths)
    swagger, assets = _swagger_assets()
    return Litestar(
        route_handlers=[assets], plugins=[plugin], debug=False, logging_config=None,
        exception_handlers={500: internal_error},
        openapi_config=OpenAPIConfig(
            title="The Brain", version=__version__, path="/schema", render_plugins=[swagger],
            components=Components(security_schemes={"BearerToken": SecurityScheme(
                type="http", scheme="bearer",
                description="BRAIN_API_TOKEN (or the console's session cookie)")})),
    )


__all__ = ["BrainPlugin", "create_app"]
