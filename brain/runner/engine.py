"""Executes one claimed run: the DAG on asyncio, recording every step as it ends.

Every step's outcome is decided in one place (:meth:`RunExecution._run_step`):
whatever goes wrong inside the orchestrator while preparing, executing or
recording a step fails that step with the error text, so no run can end with a
step left ``pending`` or ``running``. Every write is conditional on this
executor still holding the run's lease; once it is lost, the process groups of
the run's running steps are killed at once (SIGKILL), the work stops and nothing
more is written. Every process group a step starts is recorded with the step,
so that a resume on this machine can end what a frozen or dead executor left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from brain._clock import utcnow
from brain._errors import LeaseLost, PlaceholderError, StepFailed
from brain._owners import this_machine
from brain._secrets import (
    declare_secret_names,
    declared_secret_names,
    longest,
    make_undumpable,
    remember,
    remember_environment,
    scrub,
)
from brain.dsl.model import Condition, ForEachSpec, StepSpec, WorkflowSpec
from brain.dsl.tracing import MAX_ITEMS
from brain.executors import Executor, StepContext, default_executors
from brain.executors.base import PreparedStep, ProcessGroup, StepOutput
from brain.executors.process import signal_group
from brain.placeholders import Ref, render
from brain.results import RunStatus, StepStatus, TriggerData, base_name, clean_text
from brain.runner.events import EventHandler, StepEvent
from brain.shell_check import render_command
from brain.store.base import QueuedRun, StepProcess

if TYPE_CHECKING:
    from datetime import datetime

    from brain.store.base import RunStore

POLL_SECONDS = 0.5
log = logging.getLogger("brain.runner")


class RunnableWorkflow(Protocol):
    """What the runner needs of a workflow (:class:`brain.Workflow` is one): its spec,
    and where its file lives (relative paths in steps start there)."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> WorkflowSpec: ...

    @property
    def definition_hash(self) -> str: ...

    @property
    def source_dir(self) -> str: ...


@dataclass
class _Outcome:
    name: str
    ok: bool
    error: str | None = None
    #: False when the failure could not be written with the step (it is written at the end).
    recorded: bool = True


@dataclass(frozen=True)
class _Scope:
    """One instance of a ``for_each`` block: its index, its element's text, the block's steps."""

    index: int
    element: str
    members: frozenset[str]

    def name(self, step: str) -> str:
        """The name ``step`` has in this instance, if it is one of the block's steps."""
        return f"{step}[{self.index}]" if step in self.members else step


_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


def _holds(value: str) -> bool | None:
    """A condition's output as a truth value: ``None`` when it is not one."""
    text = value.strip().lower()
    return True if text in _TRUE else False if text in _FALSE else None


class RunExecution:
    """Runs the steps of ``run_id`` that have not succeeded yet, under ``owner``'s lease."""

    def __init__(self, wf: RunnableWorkflow, store: RunStore, run_id: str, owner: str, *,
                 trigger: TriggerData, previous_run_id: str | None, lease_seconds: float,
                 outputs: dict[str, str] | None = None, tries: Mapping[str, int] | None = None,
                 executors: Mapping[str, Executor] | None = None,
                 on_event: EventHandler | None = None,
                 previous_outputs: dict[str, str] | None = None,
                 abandon_on_cancel: Callable[[], bool] | None = None) -> None:
        self.wf = wf
        # When this says so at cancel time (a server shutting down), the run is left
        # "running" for the next executor to resume, instead of being recorded cancelled.
        self.abandon_on_cancel = abandon_on_cancel
        self.store = store
        self.run_id = run_id
        self.owner = owner
        self.trigger = trigger
        self.previous_run_id = previous_run_id
        self.lease_seconds = lease_seconds
        self.outputs: dict[str, str] = dict(outputs or {})
        self.prior_tries = dict(tries or {})
        self.executors = executors or default_executors()
        self.on_event = on_event
        self.ctx = StepContext(workflow_dir=wf.source_dir,
                               protected_env=remember_known_secrets(wf), run_id=run_id)
        make_undumpable()
        # Outputs {previous.X} reads; loaded from previous_run_id on first need unless given.
        self._previous: dict[str, str] | None = (None if previous_outputs is None
                                                 else dict(previous_outputs))
        self.kinds = {s.name: s.kind for s in wf.spec.steps}
        #: Steps (and instances) that ended skipped in this execution.
        self.skipped: set[str] = set()
        self._cancel = asyncio.Event()
        self._cancel_reason = "cancelled"
        self._lease_lost = False
        #: The process groups of the steps running now, by step name.
        self._groups: dict[str, list[ProcessGroup]] = {}
        #: The work stopped because the lease could not be renewed in time (a stalled
        #: database): nothing was written since, and the run may be resumed.
        self.stalled = False

    # --- placeholders ---

    def _lookup(self, ref: Ref) -> str:
        if ref.kind == "step":
            return self.outputs[ref.name]
        if ref.kind == "previous":
            assert self._previous is not None
            return self._previous.get(ref.name, "")
        t = self.trigger
        if ref.name == "event":
            return t.event
        if ref.name == "body":
            return t.body
        if ref.name == "path":
            if t.path is None:
                raise PlaceholderError(f"{ref.text}: this run's trigger ({t.event}) has no path")
            return t.path
        header = ref.name[len("headers."):]
        if header not in t.headers:
            raise PlaceholderError(f"{ref.text}: this run's trigger has no header {header!r}")
        return t.headers[header]

    def _resolve(self, text: str, shell_quote: bool) -> str:
        return _fill(text, self._lookup, shell_quote)

    def _resolver(self, scope: _Scope | None) -> Callable[[str, bool], str]:
        """Placeholder filling for a step, inside a ``for_each`` instance or not."""
        if scope is None:
            return self._resolve

        def lookup(ref: Ref) -> str:
            if ref.kind == "each":
                return scope.element
            if ref.kind == "step":
                return self.outputs[scope.name(ref.name)]
            return self._lookup(ref)

        def resolve(text: str, shell_quote: bool) -> str:
            return _fill(text, lookup, shell_quote)
        return resolve

    async def _load_previous(self) -> None:
        if self._previous is None:
            self._previous = ({} if self.previous_run_id is None
                              else await self.store.step_outputs(self.previous_run_id))

    # --- the run ---

    async def execute(self) -> RunStatus:
        """Run to the end; return the final status (the store has it too)."""
        try:
            return await self._execute()
        finally:
            await asyncio.shield(self._close_executors())

    async def _execute(self) -> RunStatus:
        specs = {s.name: s for s in self.wf.spec.steps}
        if any(s.previous_refs for s in specs.values()):
            await self._load_previous()
        # What is scheduled: steps, and each for_each block as one unit (named after its
        # first step), which waits for everything its steps wait for outside it.
        groups = {g.steps[0]: g for g in self.wf.spec.groups}
        unit_of = {name: name for name in specs}
        for group in groups.values():
            for name in group.steps:
                unit_of[name] = group.steps[0]
        units: dict[str, set[str]] = {}
        for spec in specs.values():
            unit = unit_of[spec.name]
            needs = units.setdefault(unit, set())
            needs.update(unit_of[u] for u in spec.upstream if unit_of[u] != unit)
        waiting: dict[str, set[str]] = {}
        dependants: dict[str, list[str]] = {unit: [] for unit in units}
        for unit, needs in units.items():
            if self._unit_done(unit, groups):
                continue
            waiting[unit] = {u for u in needs if not self._unit_done(u, groups)}
            for up in needs:
                dependants[up].append(unit)
        ready = [n for n, deps in waiting.items() if not deps]
        running: dict[asyncio.Task[_Outcome], str] = {}
        failure: _Outcome | None = None
        failures: list[_Outcome] = []
        monitor = asyncio.create_task(self._monitor())
        monitor.add_done_callback(self._monitor_ended)
        cancel_wait = asyncio.create_task(self._cancel.wait())
        try:
            while True:
                for name in ready:
                    del waiting[name]
                    work = self._run_group(groups[name]) if name in groups else \
                        self._run_step(specs[name])
                    running[asyncio.create_task(work)] = name
                ready = []
                if not running:
                    break
                done, _ = await asyncio.wait([*running, cancel_wait],
                                             return_when=asyncio.FIRST_COMPLETED)
                if cancel_wait in done:
                    break
                for task in done:
                    name = running.pop(task)  # type: ignore[arg-type]
                    outcome = self._outcome_of(task, name)  # type: ignore[arg-type]
                    if outcome is None:  # the lease is gone: stop, write nothing more
                        break
                    if not outcome.ok:
                        failures.append(outcome)
                        failure = failure or outcome
                        continue
                    for child in dependants[outcome.name]:
                        deps = waiting.get(child)
                        if deps is not None:
                            deps.discard(outcome.name)
                            if not deps:
                                ready.append(child)
                if failure is not None or self._lease_lost:
                    break
        except BaseException:
            # The executing task itself was cancelled (Ctrl-C, shutdown): stop and record,
            # or, for a server shutting down, stop and leave the run to be resumed.
            self._cancel_reason = "interrupted"
            if self.abandon_on_cancel is not None and self.abandon_on_cancel():
                self._lease_lost = True
            await asyncio.shield(self._stop(running, self._names(waiting, groups), None,
                                            failures))
            raise
        finally:
            monitor.remove_done_callback(self._monitor_ended)  # stopped by us: as it should
            monitor.cancel()
            cancel_wait.cancel()
        return await self._stop(running, self._names(waiting, groups), failure, failures)

    @staticmethod
    def _names(units: Mapping[str, object], groups: Mapping[str, ForEachSpec]) -> list[str]:
        """The step names of scheduling units (a for_each block stands for all its steps)."""
        return [n for u in units for n in (groups[u].steps if u in groups else (u,))]

    def _unit_done(self, unit: str, groups: Mapping[str, ForEachSpec]) -> bool:
        """Whether a step (or a whole for_each block) has its output from an earlier try."""
        names = groups[unit].steps if unit in groups else (unit,)
        return all(n in self.outputs for n in names)

    def _outcome_of(self, task: asyncio.Task[_Outcome], name: str) -> _Outcome | None:
        """A finished step task's outcome; ``None`` when it found the lease lost."""
        if task.cancelled():
            return _Outcome(name, False, self._cancel_reason, recorded=False)
        exc = task.exception()
        if isinstance(exc, LeaseLost):
            self._lose_lease()
            return None
        if exc is not None:  # _run_step catches everything else; this is a last resort
            return _Outcome(name, False, _internal_error(exc), recorded=False)
        return task.result()

    async def _close_executors(self) -> None:
        for executor in self.executors.values():
            close = getattr(executor, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    async def _stop(self, running: dict[asyncio.Task[_Outcome], str], pending: list[str],
                    failure: _Outcome | None, failures: list[_Outcome]) -> RunStatus:
        # Steps that ended before the stop (their own write done) keep their outcome:
        # only those still running are stopped.
        ended_first = [task for task in running if task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        stopped: list[str] = []
        for task, name in running.items():
            if task not in ended_first and task.cancelled():
                stopped.append(name)
                continue
            outcome = self._outcome_of(task, name)
            if outcome is not None and not outcome.ok:
                failures.append(outcome)
                failure = failure or outcome
        if self._lease_lost:
            # Another executor resumed this run after our lease expired (or this server is
            # shutting down and leaves it to be resumed): write nothing.
            return RunStatus.RUNNING
        try:
            return await self._record_end(stopped, pending, failure, failures)
        except LeaseLost:
            return RunStatus.RUNNING

    async def _record_end(self, stopped: list[str], pending: list[str], failure: _Outcome | None,
                          failures: list[_Outcome]) -> RunStatus:
        """Write the end of the run: every step ends in a final status, then the run."""
        owner = self.owner
        for failed in failures:
            if not failed.recorded:  # an orchestrator error kept the step's own write from happening
                await self.store.steps_ended(self.run_id, [failed.name], StepStatus.FAILED,
                                             error=failed.error, owner=owner)
        not_started = [n for n in pending if n not in stopped]
        if failure is not None:
            reason = f"step {failure.name!r} failed: {failure.error}"
            await self.store.steps_ended(self.run_id, stopped, StepStatus.CANCELLED,
                                         error=f"cancelled because {reason}", owner=owner)
            await self.store.steps_ended(self.run_id, not_started, StepStatus.SKIPPED, owner=owner)
            if self.wf.spec.groups:  # for_each instances still running or never started
                await self.store.end_unfinished_steps(self.run_id, pending=StepStatus.SKIPPED,
                                                      error=f"cancelled because {reason}",
                                                      owner=owner)
            await self.store.finish_run(
                self.run_id, RunStatus.FAILED, reason, owner=owner,
                then_queue=failure_runs(self.wf, self.trigger, self.run_id, reason,
                                        failure.name, failure.error))
            self._emit_all(stopped, "cancelled")
            self._emit_all(not_started, "skipped")
            return RunStatus.FAILED
        if stopped or not_started:
            await self.store.steps_ended(self.run_id, stopped + not_started, StepStatus.CANCELLED,
                                         error=self._cancel_reason, owner=owner)
            if self.wf.spec.groups:
                await self.store.end_unfinished_steps(self.run_id, pending=StepStatus.CANCELLED,
                                                      error=self._cancel_reason, owner=owner)
            await self.store.finish_run(self.run_id, RunStatus.CANCELLED, self._cancel_reason,
                                        owner=owner)
            self._emit_all(stopped + not_started, "cancelled")
            return RunStatus.CANCELLED
        missing = [n for n in self.kinds if n not in self.outputs and n not in self.skipped]
        if missing:  # never "succeeded" with a step that did not succeed
            reason = f"internal error: steps {', '.join(map(repr, missing))} never finished"
            await self.store.steps_ended(self.run_id, missing, StepStatus.FAILED, error=reason,
                                         owner=owner)
            await self.store.finish_run(
                self.run_id, RunStatus.FAILED, reason, owner=owner,
                then_queue=failure_runs(self.wf, self.trigger, self.run_id, reason, missing[0],
                                        reason))
            return RunStatus.FAILED
        if self.wf.spec.groups:
            # Instances a resume or a retry put back to pending inside a block that had
            # already finished (they were skipped there): they stay skipped.
            await self.store.end_unfinished_steps(self.run_id, pending=StepStatus.SKIPPED,
                                                  owner=owner)
        await self.store.finish_run(self.run_id, RunStatus.SUCCEEDED, owner=owner)
        return RunStatus.SUCCEEDED

    async def _monitor(self) -> None:
        """Renew the lease now and then; notice cancel requests within a second.

        A lease that could not be renewed in time (the database stalled for
        longer than a lease) may already be another executor's: the run's work
        stops at once and nothing more is written, so a step never runs twice
        at the same time because of a stall.
        """
        renew_every = max(self.lease_seconds / 3, POLL_SECONDS)
        last_renew = time.monotonic()
        while True:
            await asyncio.sleep(POLL_SECONDS)
            sent = time.monotonic()
            left = self.lease_seconds - (sent - last_renew)
            if left <= 0:
                # After a stalled database, or a freeze of this process (SIGSTOP, a paused
                # VM): another executor may be running the steps again already.
                self.stalled = True
                self._lose_lease()
                log.warning("run %s: lease could not be renewed in time; its work stopped",
                            self.run_id)
                return
            renew = sent - last_renew >= renew_every
            # asyncio.wait, not wait_for: a heartbeat that ends as its time runs out (after a
            # freeze, both at once) must never end this monitor by a stray cancellation, and
            # a late heartbeat is left to land rather than cut off mid-write.
            beat = asyncio.ensure_future(self.store.heartbeat(
                self.run_id, self.owner, self.lease_seconds if renew else None))
            done, _ = await asyncio.wait({beat}, timeout=left)
            if not done:  # a busy database: try again at the next tick
                beat.add_done_callback(lambda t: t.cancelled() or t.exception())
                continue
            try:
                ours, cancel = beat.result()
            except Exception:  # a busy database: try again at the next tick
                continue
            if renew and ours:
                last_renew = sent
            if not ours:
                self._lose_lease()
                return
            if cancel:
                self._cancel.set()
                return

    def _monitor_ended(self, monitor: asyncio.Task[None]) -> None:
        """The monitor ends only by saying why (lease lost, cancel requested) or when the
        execution stops it. Ended any other way (an error of its own), nobody renews the
        lease any more: the run's work stops as for a lost lease, and a resume takes over."""
        if self._cancel.is_set():
            return
        error = None if monitor.cancelled() else monitor.exception()
        if monitor.cancelled() or error is not None:
            log.error("run %s: the lease monitor stopped (%s); its work stops", self.run_id,
                      "cancelled" if error is None else _internal_error(error))
            self.stalled = True
            self._lose_lease()

    def _lose_lease(self) -> None:
        """The lease is lost (or may be): SIGKILL the running steps' process groups now,
        before anything else (no grace: the run may be another executor's already), and
        stop the work; nothing more is written."""
        self._lease_lost = True
        for groups in self._groups.values():
            for group in groups:
                signal_group(group.pgid, signal.SIGKILL)
        self._cancel.set()

    def _process_started(self, name: str, records: list[asyncio.Task[None]],
                         group: ProcessGroup) -> asyncio.Future[None]:
        """A step has started a process group (``StepContext.on_process``): keep it, to kill
        it if the lease is lost, and record it, so that a resume on this machine can end it.
        The step's program waits at its gate until the returned future is done (the record
        committed). Started after the lease was lost, it is killed at once."""
        if self._lease_lost:
            signal_group(group.pgid, signal.SIGKILL)
            lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            lost.set_exception(LeaseLost("this executor no longer holds the run's lease"))
            return lost
        self._groups.setdefault(name, []).append(group)
        process = StepProcess(name, group.pgid, group.started, this_machine())
        task = asyncio.create_task(self.store.step_process(self.run_id, process,
                                                           owner=self.owner))
        records.append(task)

        def written(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and isinstance(task.exception(), LeaseLost):
                self._lose_lease()

        # Collected here; the step's own path awaits it too before its final write.
        task.add_done_callback(written)
        return task

    # --- one step ---

    def _emit(self, event: StepEvent) -> None:
        if self.on_event is not None:
            with contextlib.suppress(Exception):
                self.on_event(event)

    def _emit_all(self, names: list[str], status: str) -> None:
        for name in names:
            self._emit(StepEvent(self.run_id, name, self.kinds[base_name(name)], status))

    async def _run_step(self, spec: StepSpec, scope: _Scope | None = None) -> _Outcome:
        """Run one step to its final status: the one place a step's outcome is decided.

        Whatever the orchestrator itself raises on the way (a preparation that
        breaks, a value that cannot be recorded) fails the step with that error;
        only a lost lease and cancellation pass through.
        """
        marked: list[_RunningMark] = []
        try:
            return await self._step(spec, marked, scope)
        except (asyncio.CancelledError, LeaseLost):
            raise
        except Exception as exc:
            for mark in marked:
                with contextlib.suppress(Exception):
                    await mark.settle()
            message = _internal_error(exc)
            log.error("run %s: step %r failed inside the orchestrator: %s", self.run_id,
                      spec.name, message)
            if log.isEnabledFor(logging.DEBUG):
                import traceback

                log.debug("the error behind it:\n%s",
                          scrub("".join(traceback.format_exception(exc))))
            self._emit(StepEvent(self.run_id, spec.name, spec.kind, "failed", error=message))
            return _Outcome(spec.name, False, message, recorded=False)

    async def _step(self, spec: StepSpec, marked: list[_RunningMark],
                    scope: _Scope | None = None) -> _Outcome:
        decided = await self._decide(spec, scope)
        if decided is not None:
            return decided
        executor = self.executors.get(spec.kind)
        tries = self.prior_tries.get(spec.name, 0)
        started = utcnow()
        t0 = time.perf_counter()
        prepared: PreparedStep | None = None
        try:
            if executor is None:
                raise StepFailed(f"no executor for {spec.kind!r} steps in this process",
                                 retryable=False)
            prepared = executor.prepare(spec, self._resolver(scope))
        except (StepFailed, PlaceholderError) as exc:
            # The step cannot even start (a missing trigger field, an unset secret, an
            # invalid argument): that is one failed try, not worth repeating.
            msg = _text(exc.message if isinstance(exc, StepFailed) else describe(exc))
            await self.store.step_finished(self.run_id, spec.name, status=StepStatus.FAILED,
                                           tries=tries + 1, ended_at=utcnow(), error=msg,
                                           owner=self.owner)
            self._emit(StepEvent(self.run_id, spec.name, spec.kind, "failed", tries + 1, msg))
            return _Outcome(spec.name, False, msg)
        secrets = prepared.secrets
        inputs = _scrub_deep(prepared.inputs, secrets)
        mark = _RunningMark(self.store, self.run_id, spec.name, inputs, tries + 1, started,
                            self.owner)
        marked.append(mark)
        records: list[asyncio.Task[None]] = []
        ctx = replace(self.ctx, on_process=partial(self._process_started, spec.name, records))
        self._emit(StepEvent(self.run_id, spec.name, spec.kind, "running", tries + 1))
        attempt = 0
        while True:
            attempt += 1
            tries += 1
            try:
                result = await self._attempt(executor, spec, prepared, ctx)
            except asyncio.CancelledError:
                mark.drop()  # the run records this step as cancelled; no late "running"
                raise
            finally:
                self._groups.pop(spec.name, None)  # ended, and its group with it
            ended = utcnow()  # when the work ended, not when its record was written
            if isinstance(result, StepOutput):
                output = clean_text(_text(result.output, secrets)) or ""
                await mark.settle()
                await _settle(records)
                await self.store.step_finished(
                    self.run_id, spec.name, status=StepStatus.SUCCEEDED, tries=tries,
                    ended_at=ended, output=output, inputs=inputs, started_at=started,
                    stderr=_text(result.stderr, secrets), owner=self.owner)
                self.outputs[spec.name] = output
                self._emit(StepEvent(self.run_id, spec.name, spec.kind, "succeeded", tries,
                                     seconds=time.perf_counter() - t0))
                return _Outcome(spec.name, True)
            message = _text(result.message, secrets) or "failed"
            if result.retryable and attempt <= spec.retries:
                self._emit(StepEvent(self.run_id, spec.name, spec.kind, "retrying", tries, message))
                delay = spec.retry_delay_seconds * 2 ** (attempt - 1)
                await asyncio.sleep(max(delay, result.retry_after or 0.0))
                continue
            await mark.settle()
            await _settle(records)
            await self.store.step_finished(
                self.run_id, spec.name, status=StepStatus.FAILED, tries=tries, ended_at=ended,
                inputs=inputs, started_at=started,
                error=message, stderr=_text(result.stderr, secrets), owner=self.owner)
            self._emit(StepEvent(self.run_id, spec.name, spec.kind, "failed", tries, message,
                                 seconds=time.perf_counter() - t0))
            return _Outcome(spec.name, False, message)

    # --- conditions and blocks ---

    async def _decide(self, spec: StepSpec, scope: _Scope | None) -> _Outcome | None:
        """Before a step starts: skipped (a step whose output it needs was skipped, or a
        condition does not hold), failed (a condition is not true or false), or ``None``
        to run it."""
        name_of = scope.name if scope is not None else (lambda n: n)
        for need in [*spec.refs, *(c.step for c in spec.when)]:
            if name_of(need) in self.skipped:
                return await self._skip([spec.name], f"{{{need}}} was skipped")
        for condition in spec.when:
            value = self.outputs[name_of(condition.step)]
            holds = _holds(value)
            if holds is None:
                msg = _not_a_condition(condition, value)
                await self.store.step_finished(
                    self.run_id, spec.name, status=StepStatus.FAILED,
                    tries=self.prior_tries.get(spec.name, 0), ended_at=utcnow(), error=msg,
                    owner=self.owner)
                self._emit(StepEvent(self.run_id, spec.name, spec.kind, "failed", error=msg))
                return _Outcome(spec.name, False, msg)
            if holds == condition.negated:
                return await self._skip([spec.name], _does_not_hold(condition, holds))
        return None

    async def _skip(self, names: list[str], reason: str) -> _Outcome:
        """Record steps as skipped, saying why (a success: what depends on their order
        goes on)."""
        await self.store.steps_ended(self.run_id, names, StepStatus.SKIPPED, error=reason,
                                     owner=self.owner)
        self.skipped.update(names)
        self._emit_all(names, "skipped")
        return _Outcome(names[0], True)

    async def _fail_block(self, group: ForEachSpec, message: str) -> _Outcome:
        """A block that cannot expand fails its first step, saying why."""
        first = group.steps[0]
        await self.store.step_finished(self.run_id, first, status=StepStatus.FAILED,
                                       tries=self.prior_tries.get(first, 0), ended_at=utcnow(),
                                       error=message, owner=self.owner)
        self._emit(StepEvent(self.run_id, first, self.kinds[first], "failed", error=message))
        return _Outcome(first, False, message)

    def _items(self, group: ForEachSpec) -> list[Any] | str:
        """The block's elements, or why there are none to loop over."""
        if group.items_step is None:
            assert isinstance(group.items, list)
            return group.items
        raw = self.outputs[group.items_step]
        try:
            items = json.loads(raw)
        except ValueError:
            items = None
        if not isinstance(items, list):
            shown = raw if len(raw) <= 80 else raw[:77] + "..."
            return (f"for_each over {{{group.items_step}}}: its output is not a JSON array "
                    f"({shown!r}); return a list from a @step")
        if len(items) > MAX_ITEMS:
            return (f"for_each over {{{group.items_step}}}: {len(items)} elements, at most "
                    f"{MAX_ITEMS} are allowed")
        return items

    async def _run_group(self, group: ForEachSpec) -> _Outcome:
        """A for_each block: expand it (instance rows committed first), run its instances up
        to ``max_parallel`` at once, then record each step's list of outputs."""
        members = [self._spec(n) for n in group.steps]
        # Conditions around the whole block, and the list it loops over, decide it as one.
        around = set.intersection(*(set(m.when) for m in members))
        outside = [c for c in around if c.step not in group.steps]
        if group.items_step in self.skipped:
            return await self._skip(list(group.steps), f"{{{group.items_step}}} was skipped")
        for condition in outside:
            holds = _holds(self.outputs[condition.step])
            if holds is None:  # fails the block once, not each instance
                return await self._fail_block(group, _not_a_condition(
                    condition, self.outputs[condition.step]))
        # A step of the block that needs something outside it that was skipped, or whose
        # condition outside the block does not hold, is skipped as a whole (its own row
        # too, so what reads it after the block is skipped in turn); so are the steps of
        # the block that read it.
        skipped_members: dict[str, str] = {}
        for member in members:
            reason = self._outside_skip(member, group, skipped_members)
            if reason is not None:
                skipped_members[member.name] = reason
        if len(skipped_members) == len(members):
            for member in members:
                await self._skip([member.name], skipped_members[member.name])
            return _Outcome(group.steps[0], True)
        items = self._items(group)
        if isinstance(items, str):
            return await self._fail_block(group, items)
        count = len(items)
        rows = [(f"{m.name}[{i}]", m.kind, m.position) for i in range(count) for m in members]
        await self.store.add_steps(self.run_id, rows, owner=self.owner)
        started = utcnow()
        members_set = frozenset(group.steps)
        limit = asyncio.Semaphore(group.max_parallel)

        async def instance(index: int, element: str) -> _Outcome | None:
            scope = _Scope(index, element, members_set)
            async with limit:
                for member in members:
                    name = scope.name(member.name)
                    if name in self.outputs:  # finished before a resume
                        continue
                    spec = member.model_copy(update={"name": name, "instance": index})
                    outcome = await self._run_step(spec, scope)
                    if not outcome.ok:
                        return outcome
            return None

        tasks = [asyncio.create_task(instance(i, _element_text(item)))
                 for i, item in enumerate(items)]
        try:
            pending: set[asyncio.Task[_Outcome | None]] = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    outcome = task.result()
                    if outcome is not None:  # an instance failed: the run halts
                        failed = base_name(outcome.name)
                        await self.store.steps_ended(
                            self.run_id, [failed], StepStatus.FAILED,
                            error=f"{outcome.name} failed: {outcome.error}", owner=self.owner)
                        return outcome
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        ended = utcnow()
        for member in members:
            if member.name in skipped_members:
                await self._skip([member.name], skipped_members[member.name])
                continue
            values = [None if f"{member.name}[{i}]" in self.skipped
                      else self.outputs.get(f"{member.name}[{i}]") for i in range(count)]
            output = json.dumps(values, ensure_ascii=False, separators=(",", ":"))
            await self.store.step_finished(
                self.run_id, member.name, status=StepStatus.SUCCEEDED, tries=1, ended_at=ended,
                output=output, inputs={"instances": count}, started_at=started, owner=self.owner)
            self.outputs[member.name] = output
            self._emit(StepEvent(self.run_id, member.name, member.kind, "succeeded", 1))
        return _Outcome(group.steps[0], True)

    def _outside_skip(self, member: StepSpec, group: ForEachSpec,
                      skipped_members: Mapping[str, str]) -> str | None:
        """Why a step of a block is skipped as a whole, before it runs: a step it needs was
        skipped (outside the block, or a step of the block skipped as a whole), or one of
        its conditions outside the block does not hold; else ``None``."""
        for need in [*member.refs, *(c.step for c in member.when)]:
            if need in skipped_members or (need not in group.steps and need in self.skipped):
                return f"{{{need}}} was skipped"
        for condition in member.when:
            if condition.step in group.steps:
                continue
            holds = _holds(self.outputs[condition.step])
            if holds is not None and holds == condition.negated:
                return _does_not_hold(condition, holds)
        return None

    def _spec(self, name: str) -> StepSpec:
        return next(s for s in self.wf.spec.steps if s.name == name)

    async def _attempt(self, executor: Executor, spec: StepSpec, prepared: PreparedStep,
                       ctx: StepContext) -> StepOutput | StepFailed:
        """One try: the output, or a :class:`StepFailed` saying why and whether to retry."""
        timeout = asyncio.timeout(spec.timeout_seconds)
        try:
            async with timeout:
                result: StepOutput = await executor.execute(spec, prepared, ctx)
        except StepFailed as exc:
            return exc
        except TimeoutError:
            if timeout.expired():
                return StepFailed(f"timed out after {spec.timeout_seconds:g}s",
                                  stderr=prepared.stderr)
            return StepFailed("TimeoutError raised by the step")
        except PlaceholderError as exc:
            return StepFailed(describe(exc), retryable=False)
        except Exception as exc:
            return StepFailed(f"{type(exc).__name__}: {describe(exc)}")
        size = len(result.output.encode("utf-8", errors="replace"))
        if size > spec.max_output_bytes:
            return StepFailed(f"output is larger than max_output_bytes ({spec.max_output_bytes} bytes)",
                              stderr=result.stderr, retryable=False)
        return result


#: A step still running this long after it started is recorded ``running``; one that ends
#: sooner is written once, finished (its start time and inputs with it).
MARK_AFTER_SECONDS = 0.05


class _RunningMark:
    """Records a step as ``running`` once it has run for :data:`MARK_AFTER_SECONDS`,
    without making the step wait for it.

    The write overlaps the step's own work (an HTTP call, a process); the
    writer's queue keeps it ahead of the final write, and :meth:`settle` lets it
    land first. A quick step (an LLM answer from a local model, a small
    function) costs one write instead of two, and nothing competes with its own
    work while it runs. If the process dies before the mark, the step is still
    ``pending`` and runs again on resume, as a ``running`` one would.
    """

    def __init__(self, store: RunStore, run_id: str, name: str, inputs: dict[str, object],
                 tries: int, started: datetime, owner: str) -> None:
        self.writing = False

        async def mark() -> None:
            await asyncio.sleep(MARK_AFTER_SECONDS)
            self.writing = True
            await store.step_running(run_id, name, inputs=inputs, tries=tries, started_at=started,
                                     owner=owner)

        self.task = asyncio.create_task(mark())
        # A mark whose step was stopped is never awaited: its error (a lost lease, a stalled
        # database) is the run's business, not an "exception never retrieved" report.
        self.task.add_done_callback(lambda t: t.cancelled() or t.exception())

    def drop(self) -> None:
        """Forget the mark unless its write has begun (a begun write lands first: the
        store's lock is first come, first served)."""
        if not self.writing:
            self.task.cancel()

    async def settle(self) -> None:
        """Before the final write: drop the mark if it was not begun, else let it land first.

        A mark that failed (a lost lease) raises here, on the step's own path.
        """
        self.drop()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def _settle(records: list[asyncio.Task[None]]) -> None:
    """Before a step's final write: let the records of its process groups land first (a
    record that failed, a lost lease included, raises here, on the step's own path)."""
    for task in records:
        await task
    records.clear()


def remember_known_secrets(wf: RunnableWorkflow) -> frozenset[str]:
    """Remember every secret this process can know of now (so it is scrubbed from all that
    is stored, the trigger included); return the variables no step sees unless it passes
    them itself through ``env=``: the webhook secret and ``secret()`` variables of every
    workflow defined in this process (and of ``wf``)."""
    names, literals = wf.spec.declared_secrets
    declare_secret_names(names)
    for literal in literals:
        remember(literal)
    protected = declared_secret_names()
    remember_environment(protected | {"LLM_API_KEY", "BRAIN_API_TOKEN", "THE_BRAIN_API_TOKEN"})
    return protected


def failure_runs(wf: RunnableWorkflow, trigger: TriggerData, run_id: str, error: str,
                 step: str | None, step_error: str | None, *,
                 loaded: Mapping[str, RunnableWorkflow] | None = None) -> list[QueuedRun]:
    """The runs of ``wf``'s failure handlers (``@workflow(on_failure=[...])``) to queue with
    its failure: each gets the failed run as a JSON body and ``trigger.event ==
    "failure"``. A run that itself handles a failure triggers nothing further.

    Each handler is taken as ``loaded`` (by default: the workflows of the service serving
    ``wf``, if any) has it now: a handler's file may have been reloaded since the failing
    workflow imported it, and a run queued under its old definition would fail as changed
    without running."""
    handlers: Iterable[RunnableWorkflow] = getattr(wf, "failure_handlers", ())
    if trigger.event == "failure":
        return []
    if loaded is None:
        loaded = getattr(getattr(wf, "served_by", None), "workflows", None) or {}
    body = json.dumps({"run_id": run_id, "workflow": wf.name, "error": error,
                       "failed_step": step, "failed_step_error": step_error},
                      ensure_ascii=False)
    queued = []
    for handler in handlers:
        h = loaded.get(handler.name, handler)
        queued.append(QueuedRun(run_id=uuid.uuid4().hex, workflow=h.name,
                                definition_hash=h.definition_hash,
                                trigger=TriggerData(event="failure", body=body),
                                step_rows=[(s.name, s.kind) for s in h.spec.steps]))
    return queued


def _does_not_hold(condition: Condition, holds: bool) -> str:
    """Why a step is skipped by its condition: ``condition {x} is false``."""
    return f"condition {condition.describe()} is {'true' if holds else 'false'}"


def _not_a_condition(condition: Condition, value: str) -> str:
    shown = value if len(value) <= 80 else value[:77] + "..."
    return (f"condition {condition.describe()} is {shown!r}: a condition's output must be "
            f"true or false (also 1/0, yes/no)")


def _element_text(item: Any) -> str:
    """A for_each element as ``{each.NAME}`` gives it: a string as it is, else compact JSON."""
    if isinstance(item, str):
        return item
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))


def _text(text: str | None, secrets: Iterable[str] = ()) -> str | None:
    """Text about to be stored: every known secret value replaced by ``***``."""
    return scrub(text, secrets)


def _scrub_deep(value: Any, secrets: Iterable[str]) -> Any:
    """Inputs about to be stored, with secret values scrubbed from every string in them."""
    secrets = list(secrets)
    if isinstance(value, str):
        return clean_text(scrub(value, secrets))
    if isinstance(value, dict):
        return {k: _scrub_deep(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_deep(v, secrets) for v in value]
    return value


def _internal_error(exc: BaseException) -> str:
    """The text stored for an error raised inside the orchestrator (secrets scrubbed). A
    database error is told by its driver's first line, never the SQL and its values."""
    orig = getattr(exc, "orig", None)
    if isinstance(orig, BaseException) and hasattr(exc, "statement"):
        lines = describe(orig).strip().splitlines()
        text = f"internal error: {type(orig).__name__}: {lines[0] if lines else ''}"
    else:
        text = f"internal error: {type(exc).__name__}: {describe(exc)}"
    # Scrubbed, then cut: a cut first could split a secret and keep its beginning. (Only
    # what the cut keeps, and a secret's length more, needs scrubbing.)
    return (scrub(clean_text(text[:2000 + longest()])) or "internal error")[:2000]


def describe(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when even that raises (an exception's ``__str__`` is
    user code too)."""
    try:
        return str(exc)
    except Exception:
        return f"{type(exc).__name__} (its message could not be read)"


def _fill(text: str, lookup: Callable[[Ref], str], shell_quote: bool) -> str:
    """A field filled in: a shell command (``shell_quote``) quoted as the check decided
    for each placeholder (bare, in "…" or in '…'), anything else raw."""
    return render_command(text, lookup) if shell_quote else render(text, lookup)
