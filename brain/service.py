"""``BrainService``: what `brain serve` and `brain worker` do besides HTTP (no Litestar here).

It loads nothing itself: it is given workflows, opens the store, and runs the
executors (N concurrent runs taken from the durable queue), the schedules and
the file watchers. Triggers only create queued runs (:meth:`enqueue`);
executors take them. HTTP handlers are thin and call these methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from brain._clock import utcnow
from brain._errors import BrainError, WorkflowLoadError
from brain.dsl.triggers import CronTrigger, EveryTrigger, WatchTrigger, WebhookTrigger
from brain.results import FINISHED_RUN, RunResult, TriggerData
from brain.triggers.schedule import trigger_key

if TYPE_CHECKING:
    from brain.runner.events import StepEvent
    from brain.store import Store
    from brain.workflow import Workflow

log = logging.getLogger("brain.service")
#: One line per run start and end and per step failure (SPEC §14), with the run's fields as
#: record attributes (``run_id``, ``workflow``, ``step``, ``status``) for the JSON format.
run_log = logging.getLogger("brain.runs")
IDLE_POLL_SECONDS = 1.0
EXPIRED_SCAN_SECONDS = 5.0
#: How often an executor process writes its heartbeat row (``brain workers``).
WORKER_BEAT_SECONDS = 5.0


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BrainError(f"{name} must be a whole number, not {raw!r}") from None
    if value < 1:
        raise BrainError(f"{name} must be at least 1")
    return value


@dataclass(frozen=True)
class Hook:
    """A webhook route: the workflow and its trigger."""

    workflow: Workflow
    trigger: WebhookTrigger

    @property
    def secret(self) -> str | None:
        """The HMAC secret, read from the environment now (``None`` when unset)."""
        return os.environ.get(self.trigger.secret_env) or None


def hook_routes(workflows: Mapping[str, Workflow]) -> dict[str, Hook]:
    """``/hooks/{path}`` → hook; a duplicate path is an error naming both workflows."""
    routes: dict[str, Hook] = {}
    for wf in workflows.values():
        for trig in wf.triggers:
            if isinstance(trig, WebhookTrigger):
                path = (trig.path or wf.name).strip("/")
                if path in routes:
                    raise WorkflowLoadError(
                        f"webhook path /hooks/{path} is used by both {routes[path].workflow.name!r} "
                        f"and {wf.name!r}")
                routes[path] = Hook(wf, trig)
    return routes


class BrainService:
    """Executors, schedules, watchers and the queue, around one store."""

    def __init__(self, workflows: Mapping[str, Workflow], *, store: Store | None = None,
                 concurrency: int | None = None, max_queued: int | None = None,
                 execute: bool = True, triggers: bool = True, kind: str = "serve") -> None:
        from brain.runner import new_owner
        from brain.store import Store

        self.workflows: dict[str, Workflow] = dict(workflows)
        self.hooks = hook_routes(self.workflows)
        self.store = store or Store()
        self.concurrency = concurrency or _env_int("BRAIN_CONCURRENCY", 4)
        self.max_queued = max_queued or _env_int("BRAIN_MAX_QUEUED_RUNS", 1000)
        self.execute = execute
        self.triggers = triggers
        self.owner = new_owner()
        self._wake = asyncio.Event()
        self._stopping = False
        self._tasks: list[asyncio.Task[Any]] = []
        self._running: dict[str, asyncio.Task[Any]] = {}
        # Runs whose executor died (lease expired), found by the resume loop and taken by
        # the same executors as queued runs: one concurrency limit for both.
        self._resumable: list[str] = []
        self._claim_lock = asyncio.Lock()
        self._stopped: asyncio.Future[None] | None = None
        self._hurry = asyncio.Event()
        self._watchers: list[Any] = []
        self._scheduler: Any = None
        self.started = False
        self._catching_up = False
        #: ``serve`` or ``worker``: how ``brain workers`` shows this process.
        self.kind = kind
        self.started_at = utcnow()
        from brain.metrics import Metrics

        #: What ``GET /metrics`` shows of this service's work.
        self.metrics = Metrics()

    # --- life cycle ------------------------------------------------------------

    async def preflight(self) -> None:
        """Check what start-up needs (the database and its schema, watch folders) and
        raise a clear :class:`BrainError` now, before any server starts."""
        from brain.store import Store
        from brain.triggers.watch import resolve_folder

        if self.triggers:
            for wf, _, trig in self._watches():
                resolve_folder(trig, wf.source_dir)
        async with Store(self.store.url):
            pass

    async def start(self) -> None:
        """Open the store, then start executors, schedules and watchers."""
        from brain._secrets import make_undumpable
        from brain.runner.engine import remember_known_secrets

        # Steps run as this process's user: keep them out of its memory and environment.
        make_undumpable()
        for wf in self.workflows.values():  # the API token and webhook secrets included
            remember_known_secrets(wf)
            wf.served_by = self  # wf.enqueue() in this process comes to this queue
        if not self.store.is_open:
            await self.store.open()
        for path, hook in self.hooks.items():
            if hook.secret is None:
                log.warning("webhook /hooks/%s of %s accepts nothing: %s is not set", path,
                            hook.workflow.name, hook.trigger.secret_env)
        if self.execute:
            await self._expire_dead_local_leases()
            for i in range(self.concurrency):
                self._tasks.append(asyncio.create_task(self._worker(), name=f"brain-executor-{i}"))
            self._tasks.append(asyncio.create_task(self._resume_loop(), name="brain-resume"))
            self._tasks.append(asyncio.create_task(self._heartbeat_loop(), name="brain-heartbeat"))
        if self.triggers:
            await self._start_triggers()
        self.started = True

    async def _expire_dead_local_leases(self) -> None:
        """Runs left ``running`` by a process of this machine that no longer exists (or is
        a zombie) are resumed now rather than when their lease runs out."""
        from brain._owners import local_owner_gone

        for run_id, owner in await self.store.running_leases():
            if owner != self.owner and local_owner_gone(owner):
                await self.store.expire_lease(run_id, owner)

    def _is_stopping(self) -> bool:
        return self._stopping

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
        self._stopping = True
        self._wake.set()
        for wf in self.workflows.values():
            if wf.served_by is self:
                wf.served_by = None
        for watcher in self._watchers:
            with contextlib.suppress(Exception):
                watcher.stop()
        running = list(self._running.values())
        if running and grace_seconds > 0:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + grace_seconds
            hurry: asyncio.Future[Any] = asyncio.ensure_future(self._hurry.wait())
            waiting: set[asyncio.Future[Any]] = set(running)
            while waiting and not hurry.done() and loop.time() < deadline:
                _, waiting = await asyncio.wait(waiting | {hurry}, timeout=deadline - loop.time(),
                                                return_when=asyncio.FIRST_COMPLETED)
                waiting.discard(hurry)
            hurry.cancel()
        left = list(self._running)
        for task in [*self._tasks, *self._running.values()]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._running.values(), return_exceptions=True)
        self._tasks.clear()
        for run_id in left:  # whoever serves next resumes them at once
            with contextlib.suppress(Exception):
                await self.store.expire_lease(run_id, self.owner)
        if self.execute:
            with contextlib.suppress(Exception):
                await self.store.forget_worker(self.owner)
        await self.store.close()

    # --- creating runs ------------------------------------------------------------

    async def enqueue(self, wf: Workflow, trigger: TriggerData, *, trigger_key: str,
                      delivery_id: str | None = None,
                      fire_time: datetime | None = None) -> tuple[str | None, bool]:
        """Commit a queued run; ``(run_id, created)`` (see ``Store.enqueue_run``)."""
        run_id, created = await self.store.enqueue_run(
            run_id=uuid.uuid4().hex, workflow=wf.name, definition_hash=wf.definition_hash,
            trigger=trigger, step_rows=[(s.name, s.kind) for s in wf.spec.steps],
            trigger_key=trigger_key, delivery_id=delivery_id, fire_time=fire_time,
            max_queued=self.max_queued)
        if created:
            self._wake.set()
        return run_id, created

    async def retry(self, run_id: str) -> tuple[str, str]:
        """Queue a retry of a failed or cancelled run (see ``Store.retry_run``); the new
        run's id and the original's full id.

        :class:`RunConflict` when the run is active or succeeded, when its workflow is
        not served here, or when its definition changed since.
        """
        from brain._errors import RunConflict

        full = await self.store.resolve_id(run_id)
        row = await self.store.run_row(full)
        wf = None if row is None else self.workflows.get(row.workflow)
        if row is not None and wf is None:
            raise RunConflict(f"workflow {row.workflow!r} is not served here")
        new_id = await self.store.retry_run(full, definition_hash=None if wf is None
                                            else wf.definition_hash)
        self._wake.set()
        return new_id, full

    async def wait_for(self, run_id: str, seconds: float) -> RunResult | None:
        """The run once it has ended, or ``None`` after ``seconds``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        delay = 0.02
        while True:
            run = await self.store.get_run(run_id, with_steps=False)
            if run.status in FINISHED_RUN:
                return run
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(min(delay, max(deadline - loop.time(), 0)))
            delay = min(delay * 1.5, 0.5)

    # --- executing ------------------------------------------------------------

    def _eligible(self, active: Mapping[str, int]) -> list[str]:
        names = []
        for name, wf in self.workflows.items():
            limit = wf.spec.max_concurrent_runs
            if limit is None or active.get(name, 0) < limit:
                names.append(name)
        return names

    async def _take(self) -> tuple[str, bool] | None:
        """The next run to execute, claimed: ``(run id, first start)``, or ``None``.

        Runs whose executor died come first; then the oldest queued run of a
        workflow under its ``max_concurrent_runs``.
        """
        from brain.runner import lease_seconds

        while self._resumable:
            run_id = self._resumable.pop(0)
            if run_id in self._running:
                continue
            row = await self.store.run_row(run_id)
            if row is None or row.workflow not in self.workflows:
                continue
            if await self.store.claim_run(run_id, self.owner, lease_seconds()):
                log.info("resuming run %s of %s (its executor stopped)", run_id, row.workflow)
                return run_id, row.started_at is None
        # Counting and claiming together, so two executors of this process cannot
        # both see room under max_concurrent_runs and both take a run.
        async with self._claim_lock:
            limited = [n for n, wf in self.workflows.items() if wf.spec.max_concurrent_runs]
            active = {n: await self.store.count_active(workflow=n, status="running")
                      for n in limited}
            queued = await self.store.claim_next(self._eligible(active), self.owner,
                                                 lease_seconds())
        return None if queued is None else (queued, True)

    async def _worker(self) -> None:
        """One executor: take a run, execute it, repeat; a store error is logged and retried."""
        from brain.runner import execute_claimed

        while not self._stopping:
            try:
                taken = await self._take()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cannot take a run to execute; retrying")
                taken = None
                await asyncio.sleep(IDLE_POLL_SECONDS)
            if taken is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), IDLE_POLL_SECONDS)
                continue
            run_id, first_start = taken
            task = asyncio.current_task()
            assert task is not None
            self._running[run_id] = task
            metrics = self.metrics
            metrics.executing.inc()
            try:
                row = await self.store.run_row(run_id)
                wf = self.workflows.get(row.workflow) if row else None
                if wf is None:
                    continue
                fields = {"run_id": run_id, "workflow": wf.name}
                if first_start:
                    metrics.runs_started.labels(wf.name).inc()
                run_log.info("run %s of %s %s", run_id, wf.name,
                             "started" if first_start else "resumed", extra=fields)
                t0 = time.monotonic()
                result = await execute_claimed(
                    wf, self.store, run_id, self.owner, first_start=first_start,
                    abandon_on_cancel=self._is_stopping,
                    on_event=functools.partial(self._observe_step, fields=fields))
                if result.status in FINISHED_RUN:
                    metrics.runs_ended.labels(wf.name, str(result.status)).inc()
                    ended = "run %s of %s %s in %.2fs"
                    args: tuple[object, ...] = (run_id, wf.name, result.status,
                                                time.monotonic() - t0)
                    if result.error:
                        ended, args = ended + ": %s", (*args, result.error)
                    run_log.log(logging.INFO if result.succeeded else logging.WARNING, ended,
                                *args, extra={**fields, "status": str(result.status)})
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("run %s stopped by an internal error", run_id)
            finally:
                metrics.executing.dec()
                self._running.pop(run_id, None)

    def _observe_step(self, event: StepEvent, fields: dict[str, str]) -> None:
        if event.status in ("succeeded", "failed") and event.seconds is not None:
            self.metrics.step_seconds.labels(event.kind, event.status).observe(event.seconds)
        if event.status in ("failed", "retrying"):
            then = ", retrying" if event.status == "retrying" else ""
            run_log.warning("run %s of %s: step %r failed (try %d%s): %s", event.run_id,
                            fields["workflow"], event.step, event.tries, then, event.error,
                            extra={**fields, "step": event.step})

    async def _heartbeat_loop(self) -> None:
        """Tell the database this executor is alive, every few seconds (``brain workers``)."""
        import os
        import socket

        while not self._stopping:
            try:
                await self.store.worker_heartbeat(
                    self.owner, host=socket.gethostname(), pid=os.getpid(), kind=self.kind,
                    started_at=self.started_at, executing=len(self._running))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a busy database: the next beat will do
                log.debug("worker heartbeat not written: %s", exc)
            await asyncio.sleep(WORKER_BEAT_SECONDS)

    async def _resume_loop(self) -> None:
        """Find runs whose executor died (lease expired), now and every few seconds, and
        hand them to the executors. A run this process executes is never among them."""
        while not self._stopping:
            try:
                expired = await self.store.expired_runs()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cannot look for abandoned runs; retrying")
                expired = []
            fresh = [r for r in expired if r not in self._running and r not in self._resumable]
            if fresh:
                self._resumable.extend(fresh)
                self._wake.set()
            await asyncio.sleep(EXPIRED_SCAN_SECONDS)

    async def replace_workflows(self, workflows: Mapping[str, Workflow]) -> None:
        """Swap in a new set of workflows (``--reload``): hooks, schedules and watchers follow."""
        hooks = hook_routes(workflows)  # raises on a duplicate path, changing nothing
        from brain.runner.engine import remember_known_secrets

        for wf in workflows.values():  # scrubbed from what is stored from now on
            remember_known_secrets(wf)
            if self.started:
                wf.served_by = self
        self.workflows = dict(workflows)
        self.hooks = hooks
        if self.triggers:
            for watcher in self._watchers:
                with contextlib.suppress(Exception):
                    watcher.stop()
            self._watchers.clear()
            if self._scheduler is not None:
                self._scheduler.set_schedules(self._schedules())
            elif self._schedules():
                self._tasks.append(asyncio.create_task(self._run_schedules(self._schedules()),
                                                       name="brain-schedules"))
            for wf, key, trig in self._watches():
                try:
                    self._start_watcher(wf, key, trig)
                except BrainError as exc:
                    log.error("%s: %s", wf.name, exc)
        self._wake.set()

    # --- triggers ------------------------------------------------------------

    def _schedules(self) -> list[tuple[str, str, Any]]:
        return [(wf.name, trigger_key(trig), trig) for wf in self.workflows.values()
                for trig in wf.triggers
                if isinstance(trig, (CronTrigger, EveryTrigger))]

    def _watches(self) -> list[tuple[Workflow, str, WatchTrigger]]:
        return [(wf, trigger_key(trig), trig) for wf in self.workflows.values()
                for trig in wf.triggers if isinstance(trig, WatchTrigger)]

    async def _start_triggers(self) -> None:
        """Schedules and watchers (see brain.triggers); a missing watch folder stops start-up."""
        for wf, key, trig in self._watches():
            self._start_watcher(wf, key, trig)
        schedules = self._schedules()
        if schedules:
            self._tasks.append(asyncio.create_task(self._run_schedules(schedules),
                                                   name="brain-schedules"))

    async def _run_schedules(self, schedules: list[tuple[str, str, Any]]) -> None:
        from brain.triggers.schedule import Scheduler

        self._scheduler = Scheduler(self._fire)
        self._scheduler.set_schedules(schedules)
        self._catching_up = True
        try:
            await self._scheduler.catch_up(self.store.last_fire)
        finally:
            self._catching_up = False
        await self._scheduler.run()

    async def _fire(self, workflow: str, key: str, trig: Any, fire_time: datetime) -> None:
        """One schedule fire: claimed once across servers, then queued (or skipped)."""
        wf = self.workflows.get(workflow)
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
            await self.enqueue(wf, trigger, trigger_key=key, fire_time=fire_time)
        except Exception as exc:
            # Not lost: keep trying in the background (the claim is unique per fire time,
            # so a retry can never queue it twice).
            log.warning("%s: %s fire at %s not queued yet (%s); retrying", workflow, key,
                        fire_time.isoformat(), exc)
            task = asyncio.create_task(self._retry_fire(wf, key, trigger, fire_time))
            self._tasks.append(task)
            task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def _retry_fire(self, wf: Workflow, key: str, trigger: TriggerData,
                          fire_time: datetime) -> None:
        """Queue a fire whose first try failed, with backoff, while its workflow is loaded
        (as it is now: a --reload in between queues the new definition)."""
        from sqlalchemy.exc import SQLAlchemyError

        delay = 1.0
        while not self._stopping:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
            current = self.workflows.get(wf.name)
            if current is None:
                log.warning("%s: %s fire at %s dropped: the workflow is no longer loaded",
                            wf.name, key, fire_time.isoformat())
                return
            try:
                await self.enqueue(current, trigger, trigger_key=key, fire_time=fire_time)
            except (BrainError, SQLAlchemyError, OSError) as exc:
                log.debug("%s: %s fire at %s still not queued: %s", wf.name, key,
                          fire_time.isoformat(), exc)
                continue
            except Exception:
                log.exception("%s: %s fire at %s cannot be queued", wf.name, key,
                              fire_time.isoformat())
                return
            log.info("%s: %s fire at %s queued after retrying", wf.name, key, fire_time.isoformat())
            return

    def _start_watcher(self, wf: Workflow, key: str, trig: WatchTrigger) -> None:
        from brain.triggers.watch import FileWatcher, resolve_folder

        folder = resolve_folder(trig, wf.source_dir)
        loop = asyncio.get_running_loop()

        def on_fire(path: str, event: str) -> None:
            trigger = TriggerData(event="file", body=event, path=path)
            task = loop.create_task(self._enqueue_logged(wf, trigger, key))
            self._tasks.append(task)
            task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

        watcher = FileWatcher(folder, patterns=list(trig.patterns), events=list(trig.events),
                              recursive=trig.recursive, debounce_seconds=trig.debounce_seconds,
                              on_fire=on_fire)
        watcher.start(loop)
        self._watchers.append(watcher)

    async def _enqueue_logged(self, wf: Workflow, trigger: TriggerData, key: str) -> None:
        try:
            await self.enqueue(wf, trigger, trigger_key=key)
        except BrainError as exc:
            log.warning("%s: file event for %s not queued: %s", wf.name, trigger.path, exc)
