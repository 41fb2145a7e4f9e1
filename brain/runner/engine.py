"""Executes one claimed run: the DAG on asyncio, recording every step as it ends.

Every step's outcome is decided in one place (:meth:`RunExecution._run_step`):
whatever goes wrong inside the orchestrator while preparing, executing or
recording a step fails that step with the error text, so no run can end with a
step left ``pending`` or ``running``. Every write is conditional on this
executor still holding the run's lease; once it is lost, the run's work stops
and nothing more is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from brain._clock import utcnow
from brain._errors import LeaseLost, PlaceholderError, StepFailed
from brain._secrets import (
    declare_secret_names,
    declared_secret_names,
    make_undumpable,
    remember,
    remember_environment,
    scrub,
)
from brain.dsl.model import StepSpec, WorkflowSpec
from brain.executors import Executor, StepContext, default_executors
from brain.executors.base import PreparedStep, StepOutput
from brain.placeholders import Ref, render
from brain.results import RunStatus, StepStatus, TriggerData, clean_text
from brain.runner.events import EventHandler, StepEvent

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
        self._cancel = asyncio.Event()
        self._cancel_reason = "cancelled"
        self._lease_lost = False
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
        return render(text, self._lookup, shell_quote=shell_quote)

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
        waiting: dict[str, set[str]] = {}
        dependants: dict[str, list[str]] = {name: [] for name in specs}
        for spec in specs.values():
            if spec.name in self.outputs:
                continue
            waiting[spec.name] = {u for u in spec.upstream if u not in self.outputs}
            for up in spec.upstream:
                dependants[up].append(spec.name)
        ready = [n for n, deps in waiting.items() if not deps]
        running: dict[asyncio.Task[_Outcome], str] = {}
        failure: _Outcome | None = None
        failures: list[_Outcome] = []
        monitor = asyncio.create_task(self._monitor())
        cancel_wait = asyncio.create_task(self._cancel.wait())
        try:
            while True:
                for name in ready:
                    del waiting[name]
                    running[asyncio.create_task(self._run_step(specs[name]))] = name
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
            await asyncio.shield(self._stop(running, list(waiting), None, failures))
            raise
        finally:
            monitor.cancel()
            cancel_wait.cancel()
        return await self._stop(running, list(waiting), failure, failures)

    def _outcome_of(self, task: asyncio.Task[_Outcome], name: str) -> _Outcome | None:
        """A finished step task's outcome; ``None`` when it found the lease lost."""
        if task.cancelled():
            return _Outcome(name, False, self._cancel_reason, recorded=False)
        exc = task.exception()
        if isinstance(exc, LeaseLost):
            self._lease_lost = True
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
            await self.store.finish_run(self.run_id, RunStatus.FAILED, reason, owner=owner)
            self._emit_all(stopped, "cancelled")
            self._emit_all(not_started, "skipped")
            return RunStatus.FAILED
        if stopped or not_started:
            await self.store.steps_ended(self.run_id, stopped + not_started, StepStatus.CANCELLED,
                                         error=self._cancel_reason, owner=owner)
            await self.store.finish_run(self.run_id, RunStatus.CANCELLED, self._cancel_reason,
                                        owner=owner)
            self._emit_all(stopped + not_started, "cancelled")
            return RunStatus.CANCELLED
        missing = [n for n in self.kinds if n not in self.outputs]
        if missing:  # never "succeeded" with a step that did not succeed
            reason = f"internal error: steps {', '.join(map(repr, missing))} never finished"
            await self.store.steps_ended(self.run_id, missing, StepStatus.FAILED, error=reason,
                                         owner=owner)
            await self.store.finish_run(self.run_id, RunStatus.FAILED, reason, owner=owner)
            return RunStatus.FAILED
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
                log.warning("run %s: lease could not be renewed in time; stopping its work",
                            self.run_id)
                self.stalled = True
                self._lease_lost = True
                self._cancel.set()
                return
            renew = sent - last_renew >= renew_every
            try:
                ours, cancel = await asyncio.wait_for(self.store.heartbeat(
                    self.run_id, self.owner, self.lease_seconds if renew else None), left)
            except Exception:  # a busy database: try again at the next tick
                continue
            if renew and ours:
                last_renew = sent
            if cancel or not ours:
                self._lease_lost = not ours
                self._cancel.set()
                return

    # --- one step ---

    def _emit(self, event: StepEvent) -> None:
        if self.on_event is not None:
            with contextlib.suppress(Exception):
                self.on_event(event)

    def _emit_all(self, names: list[str], status: str) -> None:
        for name in names:
            self._emit(StepEvent(self.run_id, name, self.kinds[name], status))

    async def _run_step(self, spec: StepSpec) -> _Outcome:
        """Run one step to its final status: the one place a step's outcome is decided.

        Whatever the orchestrator itself raises on the way (a preparation that
        breaks, a value that cannot be recorded) fails the step with that error;
        only a lost lease and cancellation pass through.
        """
        marked: list[_RunningMark] = []
        try:
            return await self._step(spec, marked)
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

    async def _step(self, spec: StepSpec, marked: list[_RunningMark]) -> _Outcome:
        executor = self.executors.get(spec.kind)
        tries = self.prior_tries.get(spec.name, 0)
        started = utcnow()
        t0 = time.perf_counter()
        prepared: PreparedStep | None = None
        try:
            if executor is None:
                raise StepFailed(f"no executor for {spec.kind!r} steps in this process",
                                 retryable=False)
            prepared = executor.prepare(spec, self._resolve)
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
        self._emit(StepEvent(self.run_id, spec.name, spec.kind, "running", tries + 1))
        attempt = 0
        while True:
            attempt += 1
            tries += 1
            try:
                result = await self._attempt(executor, spec, prepared)
            except asyncio.CancelledError:
                mark.drop()  # the run records this step as cancelled; no late "running"
                raise
            ended = utcnow()  # when the work ended, not when its record was written
            if isinstance(result, StepOutput):
                output = clean_text(_text(result.output, secrets)) or ""
                await mark.settle()
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
            await self.store.step_finished(
                self.run_id, spec.name, status=StepStatus.FAILED, tries=tries, ended_at=ended,
                inputs=inputs, started_at=started,
                error=message, stderr=_text(result.stderr, secrets), owner=self.owner)
            self._emit(StepEvent(self.run_id, spec.name, spec.kind, "failed", tries, message,
                                 seconds=time.perf_counter() - t0))
            return _Outcome(spec.name, False, message)

    async def _attempt(self, executor: Executor, spec: StepSpec,
                       prepared: PreparedStep) -> StepOutput | StepFailed:
        """One try: the output, or a :class:`StepFailed` saying why and whether to retry."""
        timeout = asyncio.timeout(spec.timeout_seconds)
        try:
            async with timeout:
                result: StepOutput = await executor.execute(spec, prepared, self.ctx)
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


class _RunningMark:
    """Records a step as ``running`` as it starts, without making the step wait for it.

    The write overlaps the step's own work (an HTTP call, a process start); the
    store's lock keeps it ahead of the final write, and :meth:`settle` lets it
    land first. A step that ends within the same loop turn (a mocked one) is
    written once, finished, with its inputs and start time.
    """

    def __init__(self, store: RunStore, run_id: str, name: str, inputs: dict[str, object],
                 tries: int, started: datetime, owner: str) -> None:
        self.writing = False

        async def mark() -> None:
            await asyncio.sleep(0)
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
    """The text stored for an error raised inside the orchestrator (secrets scrubbed)."""
    text = f"internal error: {type(exc).__name__}: {describe(exc)}"[:2000]
    return scrub(clean_text(text)) or "internal error"


def describe(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when even that raises (an exception's ``__str__`` is
    user code too)."""
    try:
        return str(exc)
    except Exception:
        return f"{type(exc).__name__} (its message could not be read)"
