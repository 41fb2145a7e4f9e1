"""Schedules and file watchers: they only queue runs (through the service's enqueue).

A schedule's fire queues its run with the trigger's ``params=``; a file event with the
workflow's defaults (a workflow with a required parameter cannot have a watch)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from brain._clock import utcnow
from brain._errors import BrainError, WorkflowInputError
from brain.dsl.triggers import CronTrigger, EveryTrigger, WatchTrigger
from brain.results import TriggerData
from brain.triggers.schedule import trigger_key

if TYPE_CHECKING:
    from brain.metrics import Metrics
    from brain.store.interfaces import ClaimStore
    from brain.workflow import Workflow

log = logging.getLogger("brain.service")

#: ``(workflow, trigger, trigger_key=, fire_time=)``: queue a run (the service's enqueue).
Enqueue = Callable[..., Awaitable[tuple[str | None, bool]]]


class Triggers:
    """The schedules and watchers of the workflows ``workflows()`` returns (as loaded now)."""

    def __init__(self, store: ClaimStore, workflows: Callable[[], Mapping[str, Workflow]],
                 enqueue: Enqueue, metrics: Metrics, tasks: list[asyncio.Task[Any]]) -> None:
        self.store = store
        self.workflows = workflows
        self.enqueue = enqueue
        self.metrics = metrics
        self.tasks = tasks
        self.stopping = False
        self.watchers: list[Any] = []
        self.scheduler: Any = None
        self._catching_up = False

    def watches(self) -> list[tuple[Workflow, str, WatchTrigger]]:
        """Every file watch of the loaded workflows: ``(workflow, trigger key, trigger)``."""
        return [(wf, trigger_key(trig), trig) for wf in self.workflows().values()
                for trig in wf.triggers if isinstance(trig, WatchTrigger)]

    def schedules(self) -> list[tuple[str, str, Any]]:
        """Every schedule of the loaded workflows: ``(workflow name, trigger key, trigger)``."""
        return [(wf.name, trigger_key(trig), trig) for wf in self.workflows().values()
                for trig in wf.triggers
                if isinstance(trig, (CronTrigger, EveryTrigger))]

    async def start(self) -> None:
        """Start the watchers (a missing watch folder stops start-up) and the schedules."""
        for wf, key, trig in self.watches():
            self._start_watcher(wf, key, trig)
        schedules = self.schedules()
        if schedules:
            self.tasks.append(asyncio.create_task(self._run_schedules(schedules),
                                                  name="brain-schedules"))

    def stop(self) -> None:
        """Stop the watchers and the retries of fires (the schedule task is the service's)."""
        self.stopping = True
        self._stop_watchers()

    def _stop_watchers(self) -> None:
        for watcher in self.watchers:
            with contextlib.suppress(Exception):
                watcher.stop()
        self.watchers.clear()

    def reload(self) -> None:
        """The workflows changed (``--reload``): schedules and watchers follow."""
        self._stop_watchers()
        if self.scheduler is not None:
            self.scheduler.set_schedules(self.schedules())
        elif self.schedules():
            self.tasks.append(asyncio.create_task(self._run_schedules(self.schedules()),
                                                  name="brain-schedules"))
        for wf, key, trig in self.watches():
            try:
                self._start_watcher(wf, key, trig)
            except BrainError as exc:
                log.error("%s: %s", wf.name, exc)

    async def _run_schedules(self, schedules: list[tuple[str, str, Any]]) -> None:
        from brain.triggers.schedule import Scheduler

        self.scheduler = Scheduler(self.fire)
        self.scheduler.set_schedules(schedules)
        self._catching_up = True
        try:
            await self.scheduler.catch_up(self.store.last_fire)
        finally:
            self._catching_up = False
        await self.scheduler.run()

    async def fire(self, workflow: str, key: str, trig: Any, fire_time: datetime) -> None:
        """One schedule fire: claimed once across servers, then queued (or skipped)."""
        wf = self.workflows().get(workflow)
        if wf is None:
            return
        from brain.triggers.schedule import CURRENT_FIRE_GRACE

        # overlap="skip" is about live fires piling up; fires being caught up after
        # downtime each get their run, the one still current at start-up included (the
        # runs of the fires caught up just before it must not make it skip).
        live = not self._catching_up and utcnow() - fire_time <= CURRENT_FIRE_GRACE
        if trig.overlap == "skip" and live and await self.store.count_active(
                workflow=workflow, trigger_key=key):
            if await self.store.claim_fire(workflow, key, fire_time):
                log.info("%s: %s fire at %s skipped: a run from it is still active", workflow, key,
                         fire_time.isoformat())
            return
        trigger = TriggerData(event="schedule", body=fire_time.isoformat())
        self.metrics.lateness.labels(workflow).observe(
            max((utcnow() - fire_time).total_seconds(), 0.0))
        try:
            await self.enqueue(wf, trigger, trigger_key=key, fire_time=fire_time,
                               params=fire_params(trig))
        except WorkflowInputError as exc:
            # Checked when the workflow was defined, so only a definition changed under a
            # live schedule gets here: trying again cannot help.
            log.error("%s: %s fire at %s not queued: its params do not validate: %s",
                      workflow, key, fire_time.isoformat(), "; ".join(str(exc).splitlines()))
        except Exception as exc:
            # Not lost: keep trying in the background (the claim is unique per fire time,
            # so a retry can never queue it twice).
            log.warning("%s: %s fire at %s not queued yet (%s); retrying", workflow, key,
                        fire_time.isoformat(), exc)
            self._background(self._retry_fire(wf, key, trig, trigger, fire_time))

    def _background(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.append(task)
        task.add_done_callback(lambda t: self.tasks.remove(t) if t in self.tasks else None)

    async def _retry_fire(self, wf: Workflow, key: str, trig: Any, trigger: TriggerData,
                          fire_time: datetime) -> None:
        """Queue a fire whose first try failed, with backoff, while its workflow is loaded
        (as it is now: a --reload in between queues the new definition)."""
        delay = 1.0
        when = fire_time.isoformat()
        while not self.stopping:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
            current = self.workflows().get(wf.name)
            if current is None:
                log.warning("%s: %s fire at %s dropped: the workflow is no longer loaded",
                            wf.name, key, when)
                return
            try:
                await self.enqueue(current, trigger, trigger_key=key, fire_time=fire_time,
                                   params=fire_params(trig))
            except Exception as exc:  # a database still away: try again
                if not _worth_retrying(exc):
                    log.exception("%s: %s fire at %s cannot be queued", wf.name, key, when)
                    return
                log.debug("%s: %s fire at %s still not queued: %s", wf.name, key, when, exc)
                continue
            log.info("%s: %s fire at %s queued after retrying", wf.name, key, when)
            return

    def _start_watcher(self, wf: Workflow, key: str, trig: WatchTrigger) -> None:
        from brain.triggers.watch import FileWatcher, resolve_folder

        folder = resolve_folder(trig, wf.source_dir)
        loop = asyncio.get_running_loop()

        def on_fire(path: str, event: str) -> None:
            trigger = TriggerData(event="file", body=event, path=path)
            self._background(self._enqueue_logged(wf, trigger, key))

        watcher = FileWatcher(folder, patterns=list(trig.patterns), events=list(trig.events),
                              recursive=trig.recursive, debounce_seconds=trig.debounce_seconds,
                              on_fire=on_fire)
        watcher.start(loop)
        self.watchers.append(watcher)

    async def _enqueue_logged(self, wf: Workflow, trigger: TriggerData, key: str) -> None:
        try:
            await self.enqueue(wf, trigger, trigger_key=key)
        except BrainError as exc:
            log.warning("%s: file event for %s not queued: %s", wf.name, trigger.path, exc)


def fire_params(trig: CronTrigger | EveryTrigger) -> dict[str, Any]:
    """The parameters a schedule's fire gives its run: the trigger's ``params=`` (checked
    against the workflow when it was defined; the workflow's defaults fill the rest)."""
    return dict(trig.params or {})


def _worth_retrying(exc: Exception) -> bool:
    """A store error or an unreachable database (tried again), not a bug (given up)."""
    if isinstance(exc, (BrainError, OSError)):
        return True
    module = type(exc).__module__
    return module.startswith(("sqlalchemy", "sqlite3", "asyncpg"))
