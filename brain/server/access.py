"""What the HTTP handlers get by Litestar dependency injection: the application core.

Handlers receive a :class:`ServiceAccess` (:func:`provide_access`), never the app state or
the store: the :class:`~brain.service.api.BrainApi` of the app's service, where every
operation on runs and workflows lives with its rules, plus the two things only the
webhook route needs (its hook, and counting its deliveries).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from litestar.datastructures import State

from brain.server.events import ChangeWatcher
from brain.service.api import BrainApi

if TYPE_CHECKING:
    from brain.service import BrainService, Hook


class ServiceAccess(BrainApi):
    """The application core on the app's :class:`BrainService`, and its webhooks.

    Errors are The Brain's own (``RunNotFound``, ``RunConflict``, ``QueueFull``, ...); the
    routes turn them into HTTP answers (:data:`brain.server.answers.DOMAIN_ERRORS`).
    """

    def __init__(self, service: BrainService) -> None:
        super().__init__(service.store, service)
        self._hooks = service.hooks
        self._deliveries = service.metrics.deliveries

    def hook(self, path: str) -> Hook | None:
        """The webhook listening on ``/hooks/{path}``, if any."""
        return self._hooks.get(path)

    def count_delivery(self, workflow: str, outcome: str) -> None:
        """Count a webhook delivery (``accepted``, ``duplicate``, ``refused``, ...)."""
        self._deliveries.labels(workflow, outcome).inc()


def provide_access(state: State) -> ServiceAccess:
    """Dependency: the :class:`ServiceAccess` of the app's service (put in app state by
    :class:`~brain.server.BrainPlugin`)."""
    return ServiceAccess(state["brain"])


def provide_changes(state: State) -> ChangeWatcher:
    """Dependency: the app's :class:`~brain.server.events.ChangeWatcher` (for ``/api/events``)."""
    watcher: ChangeWatcher = state["brain_watcher"]
    return watcher
