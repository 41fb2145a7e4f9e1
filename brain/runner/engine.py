"""Executes one claimed run: the plan's units on asyncio, each step recorded as it ends.

The plan (:mod:`brain.runner.plan`) says what may start; steps run through
:mod:`brain.runner.attempt`, a ``for_each`` block's expansion and gathering through
:mod:`brain.runner.blocks` (its instances' steps are units of the plan like any); the
lease (:mod:`brain.runner.lease`) is renewed beside them; the run's end is
written by :mod:`brain.runner.ending`. Every write is conditional on this
executor still holding the run's lease; once it is lost, the process groups of
the run's running steps are killed at once, the work stops and nothing more is
written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import Any

from brain._errors import LeaseLost
from brain._secrets import make_undumpable
from brain.executors import Executor, StepContext, default_executors
from brain.results import RunStatus, TriggerData
from brain.runner.attempt import StepRunner
from brain.runner.blocks import expand_block, gather_block, run_instance_step
from brain.runner.caching import StepCaches
from brain.runner.children import ChildSteps, room_open
from brain.runner.context import RunContext, context_for
from brain.runner.ending import end_of, with_output, write_end
from brain.runner.events import EventHandler, LogHandler
from brain.runner.lease import Lease
from brain.runner.limits import RunLimits, book_for
from brain.runner.plan import Plan, Unit
from brain.runner.queueing import failure_runs
from brain.runner.record import Outcome, Recorder
from brain.runner.texts import internal_error, scrub_deep
from brain.runner.values import Values, param_outputs
from brain.runner.waiting import LOOK_SECONDS, WaitRoom, WaitsFound
from brain.runner.workflows import RunnableWorkflow
from brain.store.base import RunStore

_Running = dict[asyncio.Task[Outcome], Unit]
log = logging.getLogger("brain.runner")


class RunExecution:
    """Runs the steps of ``run_id`` that have not succeeded yet, under ``owner``'s lease.

    ``loaded``: the workflows as the serving process has them now (failure handlers are
    queued as it has them); ``abandon_on_cancel``: when this says so at cancel time (a
    server shutting down), the run is left ``running`` for the next executor to resume,
    instead of being recorded cancelled. ``context``: the settings and observers of the run
    (``on_event``/``on_log`` are told too).
    """

    def __init__(self, wf: RunnableWorkflow, store: RunStore, run_id: str, owner: str, *,
                 trigger: TriggerData, previous_run_id: str | None, lease_seconds: float,
                 outputs: dict[str, str] | None = None, tries: Mapping[str, int] | None = None,
                 executors: Mapping[str, Executor] | None = None,
                 on_event: EventHandler | None = None, on_log: LogHandler | None = None,
                 previous_outputs: dict[str, str] | None = None,
                 abandon_on_cancel: Callable[[], bool] | None = None,
                 loaded: Mapping[str, RunnableWorkflow] | None = None,
                 waits: WaitsFound | None = None, context: RunContext | None = None,
                 params: Mapping[str, Any] | None = None,
                 lease_renewed_at: float | None = None) -> None:
        self.context = context_for(context, on_event, on_log)
        self.wf = wf
        self.store = store
        self.run_id = run_id
        self.trigger = trigger
        self.previous_run_id = previous_run_id
        self.abandon_on_cancel = abandon_on_cancel
        self.loaded = loaded
        self.executors = executors or default_executors(self.context.settings.llm)
        self.plan = Plan(wf.spec, outputs)
        self.params: Mapping[str, Any] = params or {}
        self.plan.outputs.update(param_outputs(wf.spec, self.params))
        self.values = Values(trigger, self.plan.outputs,
                             None if previous_outputs is None else dict(previous_outputs),
                             self.params)
        self.lease = Lease(store, run_id, owner, lease_seconds, lease_renewed_at)
        self.recorder = Recorder(store, run_id, owner, {s.name: s.kind for s in wf.spec.steps},
                                 self.context.observers, workflow=wf.name)
        ctx = StepContext(workflow_dir=wf.source_dir,
                          protected_env=self.context.secrets.protect(wf), run_id=run_id)
        make_undumpable()
        self.waits = waits or WaitsFound()
        self.room = WaitRoom(store, run_id, self.waits.wakes)
        self.steps = StepRunner(self.plan, self.values, self.recorder, self.lease,
                                self.executors, ctx, dict(tries or {}), self.room,
                                self.waits.waiting, tracer=self.context.tracer)
        self.steps.children = ChildSteps(store, run_id, owner, self.plan, self.recorder,
                                         self.room, self.context, loaded)
        if wf.spec.limits:  # SPEC §26; nothing of it for a workflow without limits or caches
            self.steps.limits = RunLimits(book_for(store), wf.spec.limits)
        if any(s.cache is not None for s in wf.spec.steps):
            self.steps.caches = StepCaches(store, wf, run_id)
        self.cancel_reason = "cancelled"
        #: When each block expanded in this execution (its own rows' start time).
        self._expanded: dict[str, datetime] = {}
        #: The run was let go of: every step left waits (SPEC §16).
        self.parked = False

    @property
    def stalled(self) -> bool:
        """The work stopped because the lease could not be renewed in time (a stalled
        database): nothing was written since, and the run may be resumed."""
        return self.lease.stalled

    def request_stop(self) -> None:
        """Stop the work as a cancel request does (the steps running now are cancelled)."""
        self.lease.stop.set()

    async def execute(self) -> RunStatus:
        """Run to the end; return the final status (the store has it too)."""
        try:
            if self.plan.reads_previous() and self.values.previous is None:
                self.values.previous = ({} if self.previous_run_id is None
                                        else await self.store.step_outputs(self.previous_run_id))
            with room_open(self.run_id, self.room):  # its children's ends come at once
                return await self._execute()
        finally:
            self.recorder.flusher.stop()
            await asyncio.shield(self._close_executors())

    async def _execute(self) -> RunStatus:
        running: _Running = {}
        failures: list[Outcome] = []
        monitor = asyncio.create_task(self.lease.monitor())
        monitor.add_done_callback(self.lease.monitor_ended)
        stop_wait = asyncio.create_task(self.lease.stop.wait())
        watch = asyncio.create_task(self.room.watch())
        try:
            await self._loop(running, failures, stop_wait)
        except BaseException:
            # The executing task itself was cancelled (Ctrl-C, shutdown): stop and record,
            # or, for a server shutting down, stop and leave the run to be resumed.
            self.cancel_reason = "interrupted"
            if self.abandon_on_cancel is not None and self.abandon_on_cancel():
                self.lease.lost = True
            await asyncio.shield(self._stop(running, failures))
            raise
        finally:
            monitor.remove_done_callback(self.lease.monitor_ended)  # stopped by us: as it should
            monitor.cancel()
            stop_wait.cancel()
            watch.cancel()
        if self.parked:  # what is left awaits its waits: nothing to stop or write
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            return RunStatus.WAITING
        return await self._stop(running, failures)

    async def _loop(self, running: _Running, failures: list[Outcome],
                    stop_wait: asyncio.Task[bool]) -> None:
        """Start what the plan says is ready until everything ended, a step failed, a
        cancel came, the lease was lost or only waits are left (the run is let go of)."""
        for name, error in self.waits.failed.items():  # a wait that ended failed (a timeout)
            failures.append(Outcome(name, False, error))
        if failures:
            return
        idle = asyncio.ensure_future(self.room.idle.wait())
        try:
            while True:
                for unit in self.plan.take_ready():
                    running[asyncio.create_task(self._unit(unit))] = unit
                if not running:
                    return
                done, _ = await asyncio.wait([*running, stop_wait, idle],
                                             return_when=asyncio.FIRST_COMPLETED)
                if stop_wait in done:
                    return
                if idle in done:
                    done.discard(idle)
                    idle = asyncio.ensure_future(self.room.idle.wait())
                    if not done and self.room.is_idle and await self._let_go():
                        return
                if self._ended(done, running, failures):  # type: ignore[arg-type]
                    return
        finally:
            idle.cancel()

    async def _unit(self, unit: Unit) -> Outcome:
        """One unit's work, counted as work while it runs (see :class:`WaitRoom`): a step,
        a step of a block's instance, or a block's expansion or gathering."""
        with self.room.working():
            if unit.scope is not None:
                return await run_instance_step(self.steps, unit)
            if unit.gathers:
                return await gather_block(self.steps, unit, self._expanded.get(unit.name))
            if unit.group is not None:
                return await expand_block(self.steps, unit, self._expanded)
            return await self.steps.run(self.plan.specs[unit.name])

    async def _let_go(self) -> bool:
        """Only waits are left: let go of the run (``waiting``, no lease) unless a wait
        ended meanwhile (then hand it on), a cancel came or the lease is lost."""
        try:
            if await self.store.park_run(self.run_id, self.lease.owner, self.room.seen):
                self.parked = True
                return True
            if await self.room.look():
                return False
            ours, cancel = await self.store.heartbeat(self.run_id, self.lease.owner, None)
        except Exception as exc:  # a busy database: the run goes on holding its lease
            log.warning("run %s: cannot let go of the run while its steps wait (%s); "
                        "trying again", self.run_id, internal_error(exc))
            ours, cancel = True, False
        if not ours:
            self.lease.lose()
        elif cancel:
            self.lease.stop.set()
        else:  # nothing to tell why: look again shortly
            await asyncio.sleep(LOOK_SECONDS)
        return False

    def _ended(self, done: set[asyncio.Task[Outcome]], running: _Running,
               failures: list[Outcome]) -> bool:
        """Take in the units that ended; ``True`` when the work must stop (a failure, or
        the lease is gone)."""
        for task in done:
            unit = running.pop(task)
            outcome = self._outcome_of(task, unit.name)
            if outcome is None:  # the lease is gone: stop, write nothing more
                return True
            if not outcome.ok:
                failures.append(outcome)
                continue
            self.plan.finish(unit)
        return bool(failures) or self.lease.lost

    def _outcome_of(self, task: asyncio.Task[Outcome], name: str) -> Outcome | None:
        """A finished unit's outcome; ``None`` when it found the lease lost."""
        if task.cancelled():
            return Outcome(name, False, self.cancel_reason, recorded=False)
        exc = task.exception()
        if isinstance(exc, LeaseLost):
            self.lease.lose()
            return None
        if exc is not None:  # StepRunner.run catches everything else; this is a last resort
            return Outcome(name, False, internal_error(exc), recorded=False)
        return task.result()

    async def _close_executors(self) -> None:
        for executor in self.executors.values():
            close = getattr(executor, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    async def _stop(self, running: _Running, failures: list[Outcome]) -> RunStatus:
        """Stop what still runs, then write the run's end (unless the lease is lost)."""
        # Units that ended before the stop (their own write done) keep their outcome:
        # only those still running are stopped.
        ended_first = [task for task in running if task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        stopped: list[str] = []
        for task, unit in running.items():
            if task not in ended_first and task.cancelled():
                stopped.append(unit.name)
                continue
            outcome = self._outcome_of(task, unit.name)
            if outcome is not None and not outcome.ok:
                failures.append(outcome)
        if self.lease.lost:
            # Another executor resumed this run after our lease expired (or this server is
            # shutting down and leaves it to be resumed): write nothing.
            return RunStatus.RUNNING
        # A wait that ended failed while nobody executed the run keeps its own record.
        unstarted = [n for n in self.plan.unstarted() if n not in self.waits.failed]
        end = end_of(stopped, unstarted, failures[0] if failures else None,
                     self.plan.missing(), self.cancel_reason)
        end = with_output(end, self.wf.spec, self.plan.outputs, self.params,
                          lambda value: scrub_deep(value, ()))
        runs = partial(failure_runs, self.wf, self.trigger, self.run_id, loaded=self.loaded)
        try:
            return await write_end(end, self.recorder, failures,
                                   has_blocks=bool(self.wf.spec.groups), failure_runs=runs)
        except LeaseLost:
            return RunStatus.RUNNING
