"""What the HTTP handlers may do with The Brain: one narrow door onto a ``BrainService``.

Handlers receive a :class:`ServiceAccess` by Litestar dependency injection
(:func:`provide_access`), never the app state or the store. Where the service has no
method for a read the API needs, the store call is made here, in one named method
(:meth:`ServiceAccess.runs`, :meth:`~ServiceAccess.run`, :meth:`~ServiceAccess.cancel`,
:meth:`~ServiceAccess.step_log`, :meth:`~ServiceAccess.workers`,
:meth:`~ServiceAccess.metrics_text`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from litestar.datastructures import State

from brain import runner
from brain._errors import StepNotFound
from brain.results import LogLine, RunResult, StepStatus, TriggerData
from brain.server.events import ChangeWatcher

if TYPE_CHECKING:
    from brain.service import BrainService, Hook
    from brain.workflow import Workflow


class ServiceAccess:
    """The operations of the HTTP API on one :class:`BrainService`.

    Errors are The Brain's own (``RunNotFound``, ``RunConflict``, ``QueueFull``); the
    routes turn them into HTTP answers.
    """

    def __init__(self, service: BrainService) -> None:
        self._service = service

    @property
    def workflows(self) -> Mapping[str, Workflow]:
        """The loaded workflows by name."""
        return self._service.workflows

    def hook(self, path: str) -> Hook | None:
        """The webhook listening on ``/hooks/{path}``, if any."""
        return self._service.hooks.get(path)

    def count_delivery(self, workflow: str, outcome: str) -> None:
        """Count a webhook delivery (``accepted``, ``duplicate``, ``refused``, ...)."""
        self._service.metrics.deliveries.labels(workflow, outcome).inc()

    async def enqueue(self, wf: Workflow, trigger: TriggerData, *, trigger_key: str,
                      delivery_id: str | None = None) -> tuple[str, bool]:
        """Commit a queued run: ``(run_id, created)``; ``QueueFull`` when the queue is full."""
        run_id, created = await self._service.enqueue(wf, trigger, trigger_key=trigger_key,
                                                      delivery_id=delivery_id)
        assert run_id is not None  # only a schedule's skipped fire has none
        return run_id, created

    async def wait_for(self, run_id: str, seconds: float) -> RunResult | None:
        """The run once it ended, or ``None`` after ``seconds``."""
        return await self._service.wait_for(run_id, seconds)

    async def retry(self, run_id: str) -> tuple[str, str]:
        """Queue a retry: the new run's id and the original's full id."""
        return await self._service.retry(run_id)

    async def decide(self, run_id: str, step: str, *, approved: bool,
                     comment: str | None, by: str) -> dict[str, Any]:
        """Decide a waiting approval (see ``BrainService.decide``); the stored decision."""
        return await self._service.decide(run_id, step, approved=approved, comment=comment,
                                          by=by)

    async def signal(self, signal: str, key: str | None, body: str) -> list[tuple[str, str]]:
        """Send a signal (see ``BrainService.signal``): the steps it continued."""
        return await self._service.signal(signal, key, body, by="api")

    async def decisions_waiting(self, limit: int = 100) -> list[dict[str, Any]]:
        """The approval steps waiting for a decision, oldest first (a store read)."""
        return await self._service.store.decisions_waiting(limit)

    # --- reads and writes the service has no method for: the store, here only ----------------

    async def runs(self, *, workflow: str | None, status: str | None, limit: int,
                   event: str | None = None, offset: int = 0) -> list[RunResult]:
        """Recent runs, newest first, without their steps (a store read)."""
        return await self._service.store.list_runs(workflow=workflow, status=status, limit=limit,
                                                   event=event, offset=offset)

    async def full_id(self, run_id: str) -> str:
        """The full id of the run ``run_id`` is or starts (a store read)."""
        return await self._service.store.resolve_id(run_id)

    async def run(self, run_id: str) -> RunResult:
        """One run with its steps, by id or unique prefix (a store read)."""
        return await self._service.store.get_run(run_id)

    async def step_log(self, run_id: str, step: str, *, after: int = 0
                       ) -> tuple[RunResult, StepStatus, list[LogLine]]:
        """A step's status and its stored log lines after ``after`` (store reads): the run,
        the step's status, the lines. ``StepNotFound`` for a step the run does not have."""
        run = await self._service.store.get_run(run_id)
        found = run.steps.get(step)
        if found is None:
            raise StepNotFound(f"run {run.run_id} has no step {step!r}")
        lines = await self._service.store.read_log(run.run_id, step, after=after)
        return run, found.status, lines

    async def cancel(self, run_id: str) -> tuple[RunResult, bool]:
        """Ask a run to stop (``brain.runner.cancel_run`` on the store): the run, and whether
        it was still active."""
        return await runner.cancel_run(self._service.store, run_id)

    async def workers(self) -> list[dict[str, Any]]:
        """The executor processes sharing the database, as :func:`describe_workers` rows."""
        from brain.runner import lease_seconds
        from brain.workers import describe_workers

        return describe_workers(await self._service.store.list_workers(), lease_seconds())

    async def metrics_text(self) -> bytes:
        """The Prometheus exposition, with the queue depth read from the store."""
        return await self._service.metrics.exposition(self._service.store.count_queued,
                                                      self._service.store.count_waiting)


def provide_access(state: State) -> ServiceAccess:
    """Dependency: the :class:`ServiceAccess` of the app's service (put in app state by
    :class:`~brain.server.BrainPlugin`)."""
    return ServiceAccess(state["brain"])


def provide_changes(state: State) -> ChangeWatcher:
    """Dependency: the app's :class:`~brain.server.events.ChangeWatcher` (for ``/api/events``)."""
    watcher: ChangeWatcher = state["brain_watcher"]
    return watcher
