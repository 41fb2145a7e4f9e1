"""``BrainService``: what `brain serve` and `brain worker` do besides HTTP (no Litestar here).

It loads nothing itself: it is given workflows, opens the store, and runs the
takers of runs (N concurrent runs from the durable queue, :mod:`.taking`), the
schedules and the file watchers (:mod:`.triggering`). Triggers only create
queued runs (:meth:`BrainService.enqueue`); takers execute them. The operations on
runs (retry, decide, signal, wait for an end, ...) are :class:`~brain.service.api.BrainApi`'s,
which the HTTP layer gets from :attr:`BrainService.api`.

The runner and the trigger machinery are imported when a service is made, not with this
package: ``brain.service.api`` serves the CLI's reads without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from brain._clock import utcnow
from brain.results import TriggerData
from brain.service.hooks import Hook, hook_routes

if TYPE_CHECKING:
    from brain.runner.observe import RunObserver
    from brain.runner.workflows import RunnableWorkflow
    from brain.service.api import BrainApi
    from brain.store import Store
    from brain.workflow import Workflow

__all__ = ["BrainService", "Hook", "hook_routes"]

log = logging.getLogger("brain.service")


class BrainService:
    """Takers of runs, schedules, watchers and the queue, around one store."""

    def __init__(self, workflows: Mapping[str, Workflow], *, store: Store | None = None,
                 concurrency: int | None = None, max_queued: int | None = None,
                 execute: bool = True, triggers: bool = True, kind: str = "serve") -> None:
        from brain.metrics import Metrics
        from brain.runner import new_owner
        from brain.runner.context import RunContext
        from brain.runner.observe import RunLog
        from brain.service.changes import RunChanges
        from brain.service.taking import RunTaker
        from brain.service.triggering import Triggers
        from brain.store import Store

        self.workflows: dict[str, Workflow] = dict(workflows)
        self.hooks = hook_routes(self.workflows)
        self.store = store or Store()
        #: What this service's runs execute with: the settings, read from the environment
        #: once, now; the observers (metrics, the run log lines, and what :meth:`observe`
        #: adds); the local queues ``wf.enqueue()`` looks in.
        self.metrics = Metrics()
        self.changes = RunChanges()
        self.context = RunContext.from_environment(
            observers=[self.metrics, RunLog(), self.changes], store=self.store)
        self.concurrency = concurrency or self.context.settings.concurrency
        self.max_queued = max_queued or self.context.settings.max_queued_runs
        self.execute = execute
        self.triggers = triggers
        self.owner = new_owner()
        self.started = False
        #: ``serve`` or ``worker``: how ``brain workers`` shows this process.
        self.kind = kind
        self.started_at = utcnow()
        #: The background tasks: takers, scans, heartbeat, schedules, fire retries.
        self._tasks: list[asyncio.Task[Any]] = []
        self.taker = RunTaker(self.store, self.owner, self._loaded, concurrency=self.concurrency,
                              metrics=self.metrics, kind=kind, started_at=self.started_at,
                              tasks=self._tasks, context=self.context)
        self.firing = Triggers(self.store, self._loaded, self.enqueue, self.metrics, self._tasks)
        self._stopped: asyncio.Future[None] | None = None
        self._hurry = asyncio.Event()

    def _loaded(self) -> Mapping[str, Workflow]:
        return self.workflows

    @property
    def api(self) -> BrainApi:
        """The operations on runs and workflows, on this service's store and workflows."""
        from brain.service.api import BrainApi

        return BrainApi(self.store, self)

    def wake(self) -> None:
        """New work is committed (a run queued, a wait ended): the takers look now."""
        self.taker.wake.set()

    def execution_ended(self) -> asyncio.Future[None]:
        """A future that is done when the next execution of this process ends."""
        return self.taker.execution_ended()

    def run_changed(self) -> asyncio.Future[None]:
        """A future that is done at the next change of any run this process executes (a
        step ended or began to wait; an execution ended)."""
        return self.changes.next_change()

    def observe(self, observer: RunObserver) -> None:
        """Tell ``observer`` of every run this service executes, from now on."""
        self.context.observers.add(observer)

    # --- life cycle ------------------------------------------------------------

    async def preflight(self) -> None:
        """Check what start-up needs (the database and its schema, watch folders) and
        raise a clear :class:`BrainError` now, before any server starts."""
        from brain.store import Store
        from brain.triggers.watch import resolve_folder

        if self.triggers:
            for wf, _, trig in self.firing.watches():
                resolve_folder(trig, wf.source_dir)
        async with Store(self.store.url):
            pass

    async def start(self) -> None:
        """Open the store, then start the takers, schedules and watchers."""
        from brain._secrets import make_undumpable
        from brain.runner.workflows import remember_known_secrets

        # Steps run as this process's user: keep them out of its memory and environment.
        make_undumpable()
        for wf in self.workflows.values():  # the API token and webhook secrets included
            remember_known_secrets(wf)
        if not self.store.is_open:
            await self.store.open()
        for path, hook in self.hooks.items():
            if hook.secret is None:
                log.warning("webhook /hooks/%s of %s accepts nothing: %s is not set", path,
                            hook.workflow.name, hook.trigger.secret_env)
        self.context.queues.add(self)  # wf.enqueue() in this process comes to this queue
        if self.execute:
            await self.taker.start()
        if self.triggers:
            await self.firing.start()
        self.started = True

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop taking runs; let running ones finish within the grace period, then stop them.

        A run stopped here keeps its record as ``running`` with a lease that
        ends now, so the next serving process resumes it: nothing is lost. A
        second call while the first waits (a second Ctrl-C) ends the grace
        period at once; both return when the service has stopped.
        """
        if self._stopped is not None:
            if grace_seconds <= 0:
                self._hurry.set()
            await asyncio.shield(self._stopped)
            return
        self._stopped = asyncio.ensure_future(self._stop(grace_seconds))
        await asyncio.shield(self._stopped)

    async def _stop(self, grace_seconds: float) -> None:
        self.context.queues.remove(self)
        self.firing.stop()
        left = await self.taker.wait_running(grace_seconds, self._hurry)
        for task in [*self._tasks, *self.taker.running.values()]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self.taker.running.values(), return_exceptions=True)
        self._tasks.clear()
        for run_id in left:  # whoever serves next resumes them at once
            with contextlib.suppress(Exception):
                await self.store.expire_lease(run_id, self.owner)
        if self.execute:
            with contextlib.suppress(Exception):
                await self.store.forget_worker(self.owner)
        await self.store.close()

    # --- creating runs ------------------------------------------------------------

    def serves(self, wf: RunnableWorkflow) -> bool:
        """Whether runs of ``wf`` (this very definition) go to this service's queue."""
        return self.started and self.workflows.get(wf.name) is wf

    async def enqueue(self, wf: RunnableWorkflow, trigger: TriggerData, *, trigger_key: str,
                      delivery_id: str | None = None,
                      fire_time: datetime | None = None,
                      params: Mapping[str, Any] | None = None,
                      trace_parent: Mapping[str, str] | None = None) -> tuple[str | None, bool]:
        """Commit a queued run; ``(run_id, created)`` (see ``Store.enqueue_run``). ``params``
        are validated first (:class:`~brain.WorkflowInputError`: nothing is queued).
        ``trace_parent``: the W3C trace context (``traceparent``, ``tracestate``) of the
        request that asks for it, which its trace continues when traces are on (SPEC §25)."""
        from brain.runner.queueing import enqueue, new_run

        run = new_run(wf, trigger, params, trace_context=self.context.new_trace(trace_parent))
        run_id, created = await enqueue(self.store, run, trigger_key=trigger_key,
                                        max_queued=self.max_queued, delivery_id=delivery_id,
                                        fire_time=fire_time)
        if created:
            self.taker.wake.set()
        return run_id, created

    # --- reloading ------------------------------------------------------------

    async def replace_workflows(self, workflows: Mapping[str, Workflow]) -> None:
        """Swap in a new set of workflows (``--reload``): hooks, schedules and watchers follow."""
        from brain.runner.workflows import remember_known_secrets

        hooks = hook_routes(workflows)  # raises on a duplicate path, changing nothing
        for wf in workflows.values():  # scrubbed from what is stored from now on
            remember_known_secrets(wf)
        self.workflows = dict(workflows)
        self.hooks = hooks
        if self.triggers:
            self.firing.reload()
        self.taker.wake.set()

    async def fail_queued_of_removed(self, gone: Workflow, error: str) -> list[str]:
        """Fail the queued runs of a workflow no longer loaded (``--reload`` removed it);
        like any failed run, each queues its failure handlers that are still loaded.
        Returns the ids of the runs failed."""
        from brain.runner.queueing import failure_runs
        from brain.store.base import QueuedRun

        def handlers(run_id: str, event: str) -> list[QueuedRun]:
            loaded = self.workflows  # only handlers still loaded: a removed one would wait forever
            return [q for q in failure_runs(gone, TriggerData(event=event), run_id, error, None,
                                            None, loaded=loaded)
                    if q.workflow in loaded]

        return await self.store.fail_queued(gone.name, error, handlers)
