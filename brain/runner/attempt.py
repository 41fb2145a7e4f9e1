"""One step of a run, from its decision to its final record: tries, retries, the record.

:meth:`StepRunner.run` is the one place a step's outcome is decided: whatever
goes wrong inside the orchestrator while preparing, executing or recording a
step fails that step with the error text, so no run can end with a step left
``pending`` or ``running``; only a lost lease and cancellation pass through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from brain._clock import utcnow
from brain._errors import LeaseLost, PlaceholderError, StepFailed
from brain._secrets import scrub
from brain.dsl.model import StepSpec
from brain.executors.base import PreparedStep, StepContext, StepOutput
from brain.results import StepStatus, WaitTimer, clean_text
from brain.runner.caching import hit_mark
from brain.runner.plan import Fail, Plan, Scope, Skip
from brain.runner.record import Outcome, Recorder
from brain.runner.texts import describe, internal_error, scrub_deep, stored_text, stored_text_apart

if TYPE_CHECKING:
    from datetime import datetime

    from brain.executors import Executor
    from brain.executors.waits import WaitRequest
    from brain.runner.caching import StepCaches
    from brain.runner.children import ChildSteps
    from brain.runner.context import RunTracer
    from brain.runner.lease import Lease
    from brain.runner.limits import RunLimits
    from brain.runner.logwriter import LogWriter
    from brain.runner.values import Values
    from brain.runner.waiting import WaitRoom
    from brain.store.cache import CachedOutput
    from brain.store.interfaces import RecordStore

log = logging.getLogger("brain.runner")

#: A step still running this long after it started is recorded ``running``; one that ends
#: sooner is written once, finished (its start time and inputs with it).
MARK_AFTER_SECONDS = 0.05


class StepRunner:
    """Runs the steps of one execution, each to its final status (see the module)."""

    def __init__(self, plan: Plan, values: Values, recorder: Recorder, lease: Lease,
                 executors: Mapping[str, Executor], ctx: StepContext,
                 prior_tries: Mapping[str, int], room: WaitRoom,
                 waiting: frozenset[str] = frozenset(), *,
                 tracer: RunTracer | None = None) -> None:
        self.plan = plan
        self.values = values
        self.recorder = recorder
        self.lease = lease
        self.executors = executors
        self.ctx = ctx
        self.prior_tries = prior_tries
        self.room = room
        #: Steps the store has ``waiting`` already (the run was let go of and taken again).
        self.waiting = waiting
        #: What runs the child steps (SPEC §22), set by the execution.
        self.children: ChildSteps | None = None
        #: Each try's span (SPEC §25), when traces are on.
        self.tracer = tracer
        #: The workflow's rate limits and its steps' cache (SPEC §26), when it uses them.
        self.limits: RunLimits | None = None
        self.caches: StepCaches | None = None

    async def run(self, spec: StepSpec, scope: Scope | None = None) -> Outcome:
        """Run one step (or one instance of a block's step) to its final status."""
        marked: list[_RunningMark] = []
        try:
            return await self._step(spec, marked, scope)
        except (asyncio.CancelledError, LeaseLost):
            raise
        except Exception as exc:
            for mark in marked:
                with contextlib.suppress(Exception):
                    await mark.settle()
            message = internal_error(exc)
            log.error("run %s: step %r failed inside the orchestrator: %s",
                      self.recorder.run_id, spec.name, message)
            if log.isEnabledFor(logging.DEBUG):
                import traceback

                log.debug("the error behind it:\n%s",
                          scrub("".join(traceback.format_exception(exc))))
            self.recorder.emit(spec.name, "failed", error=message)
            return Outcome(spec.name, False, message, recorded=False)

    async def skip(self, names: list[str], reason: str) -> Outcome:
        """Record steps as skipped, saying why (a success: what depends on their order
        goes on)."""
        await self.recorder.ended(names, StepStatus.SKIPPED, reason)
        self.plan.skip(names)
        return Outcome(names[0], True)

    async def fail_before_start(self, name: str, message: str, tries: int | None = None) -> Outcome:
        """A step (or a block, by its first step) fails before any try: ``message`` says why."""
        tries = self.prior_tries.get(name, 0) if tries is None else tries
        await self.recorder.finished(name, StepStatus.FAILED, tries=tries, error=message)
        return Outcome(name, False, message)

    async def _step(self, spec: StepSpec, marked: list[_RunningMark],
                    scope: Scope | None) -> Outcome:
        decided = self.plan.decide(spec, scope)
        if isinstance(decided, Skip):
            return await self.skip([spec.name], decided.reason)
        if isinstance(decided, Fail):
            return await self.fail_before_start(spec.name, decided.reason)
        if spec.name in self.waiting:  # waiting since an earlier execution: await its end
            return await self._awaited(spec.name)
        executor = self.executors.get(spec.kind)
        tries = self.prior_tries.get(spec.name, 0)
        started = utcnow()
        try:
            if executor is None:
                raise StepFailed(f"no executor for {spec.kind!r} steps in this process",
                                 retryable=False)
            prepared = executor.prepare(spec, self.values.resolver(scope))
        except (StepFailed, PlaceholderError) as exc:
            # The step cannot even start (a missing trigger field, an unset secret, an
            # invalid argument): that is one failed try, not worth repeating.
            msg = stored_text(exc.message if isinstance(exc, StepFailed) else describe(exc))
            return await self.fail_before_start(spec.name, msg or "failed", tries + 1)
        inputs = scrub_deep(prepared.inputs, prepared.secrets)
        if "child" in prepared.payload and self.children is not None:  # a child run (SPEC §22)
            return await self.children.run(spec, prepared.payload["child"],  # type: ignore[arg-type]
                                           inputs, tries, started)
        if getattr(executor, "durable", False):
            return await self._wait(spec.name, prepared.payload["wait"], inputs, tries + 1,
                                    started)
        cache_key = None
        if spec.cache is not None and self.caches is not None:
            look = await self.caches.look(spec, prepared, self.values.resolver(scope))
            if look.entry is not None:
                return await self._cached(spec.name, look.entry, inputs, prepared.secrets,
                                          tries + 1, started)
            cache_key = look.key
        mark = _RunningMark(self.recorder.store, self.recorder.run_id, spec.name, inputs,
                            tries + 1, started, self.recorder.owner)
        marked.append(mark)
        self.recorder.emit(spec.name, "running", tries + 1)
        writer = self.recorder.log_writer(spec.name, tries)
        writer.log.secrets = list(prepared.secrets)
        try:
            return await self._tries(executor, spec, prepared,
                                     _Try(tries, started, inputs, mark, writer, cache_key))
        finally:
            if not writer.closed:  # stored already, unless the step broke off
                await asyncio.shield(writer.close())

    async def _cached(self, name: str, entry: CachedOutput, inputs: dict[str, Any],
                      secrets: list[str], tries: int, started: datetime) -> Outcome:
        """A cache hit (SPEC §26): the step ends ``succeeded`` at once with the entry's
        output, marked cached with the usage it saved."""
        output = clean_text(stored_text(entry.output, secrets)) or ""
        await self.recorder.finished(name, StepStatus.SUCCEEDED, tries=tries, inputs=inputs,
                                     output=output, stderr=stored_text(entry.stderr, secrets),
                                     started_at=started, seconds=0.0, cached=hit_mark(entry),
                                     cache_outcome="hit")
        self.plan.succeeded(name, output)
        return Outcome(name, True)

    async def _wait(self, name: str, request: WaitRequest, inputs: dict[str, Any], tries: int,
                    started: datetime) -> Outcome:
        """A step that waits (SPEC §16): recorded ``waiting`` with its timer, then awaited;
        a sleep whose time is already past ends at once."""
        if request.kind == "sleep" and request.due is not None and request.due <= utcnow():
            assert request.on_due is not None
            await self.recorder.finished(name, StepStatus.SUCCEEDED, tries=tries, inputs=inputs,
                                         output=request.on_due.text, started_at=started)
            self.plan.succeeded(name, request.on_due.text)
            return Outcome(name, True)
        timer = None
        if request.due is not None and request.on_due is not None:
            timer = WaitTimer(request.due, request.on_due)
        await self.recorder.store.step_waiting(
            self.recorder.run_id, name, inputs=inputs, tries=tries, started_at=started,
            waiting_for=request.shown or {"kind": request.kind}, signal=request.signal,
            key=request.key, timer=timer, owner=self.recorder.owner)
        self.recorder.waiting(name, tries, request)
        return await self._awaited(name)

    async def _awaited(self, name: str) -> Outcome:
        """Await the end of a waiting step (the store records it: a timer, a decision or a
        signal ended it)."""
        status, output, error = await self.room.wait(name)
        if status == StepStatus.SUCCEEDED.value:
            self.plan.succeeded(name, output or "")
            self.recorder.emit(name, status)
            return Outcome(name, True)
        self.recorder.emit(name, status, error=error)
        return Outcome(name, False, error or status)

    async def _tries(self, executor: Executor, spec: StepSpec, prepared: PreparedStep,
                     state: _Try) -> Outcome:
        """Try, and try again while the failure is worth it and ``retries`` allow."""
        gate = (self.limits.gate(spec, state.writer.log)
                if self.limits is not None and prepared.limited else None)
        ctx = replace(self.ctx, on_process=partial(self.lease.process_started, spec.name,
                                                   state.records), log=state.writer.log,
                      gate=gate)
        secrets = prepared.secrets
        t0 = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            if gate is not None:  # room in its rate limit first, outside its timeout
                await gate.enter(prepared.reserve_tokens)
            state.tries += 1
            try:
                result = await self._attempt(executor, spec, prepared, ctx, state.tries)
            except asyncio.CancelledError:
                state.mark.drop()  # the run records this step as cancelled; no late "running"
                # What it printed so far is kept with its end, which the run writes.
                self.recorder.cut_off(spec.name, stored_text(prepared.output, secrets),
                                      stored_text(prepared.stderr, secrets),
                                      state.writer.log.usage)
                if gate is not None:  # its request may have gone: it counts from now
                    await gate.cut_off()
                raise
            finally:
                self.lease.step_ended(spec.name)
            ended = utcnow()  # when the work ended, not when its record was written
            if gate is not None:
                await gate.leave()
                if isinstance(result, StepFailed) and result.throttled and result.retry_after:
                    await gate.pause(result.retry_after)
            if isinstance(result, StepOutput):
                output = clean_text(await self._output(spec.name, result, state, secrets)) or ""
                stderr = stored_text(result.stderr, secrets)
                await self._finish(spec.name, StepStatus.SUCCEEDED, state, ended, t0,
                                   output=output, stderr=stderr)
                if state.cache_key is not None and self.caches is not None:
                    await self._keep(spec, state.cache_key, output, stderr,
                                     state.writer.log.usage)
                self.plan.succeeded(spec.name, output)
                return Outcome(spec.name, True)
            message = stored_text(result.message, secrets) or "failed"
            if result.retryable and attempt <= spec.retries:
                await state.writer.flush()  # the try's lines first, then its retry
                self.recorder.emit(spec.name, "retrying", state.tries, message)
                delay = max(spec.retry_delay_seconds * 2 ** (attempt - 1), result.retry_after or 0.0)
                state.writer.log.say(f"try {state.tries} failed: {message}; "
                                     f"trying again in {delay:g} s")
                await asyncio.sleep(delay)
                continue
            await self._finish(spec.name, StepStatus.FAILED, state, ended, t0, error=message,
                               stderr=stored_text(result.stderr, secrets),
                               output=clean_text(await self._output(spec.name, result, state,
                                                                    secrets)))
            return Outcome(spec.name, False, message)

    async def _keep(self, spec: StepSpec, key: str, output: str, stderr: str | None,
                    usage: dict[str, int] | None) -> None:
        """Store a succeeded step's output in its cache; a cache that cannot be written
        costs the next run a miss, not this run its step."""
        assert self.caches is not None
        try:
            await self.caches.keep(spec, key, output, stderr, usage)
        except (asyncio.CancelledError, LeaseLost):
            raise
        except Exception as exc:
            log.warning("run %s: step %r: its output was not cached: %s", self.recorder.run_id,
                        spec.name, internal_error(exc))

    async def _attempt(self, executor: Executor, spec: StepSpec, prepared: PreparedStep,
                       ctx: StepContext, tries: int) -> StepOutput | StepFailed:
        """One try, inside its span when traces are on (SPEC §25): the executor is handed
        it, and the span is the current context while it works."""
        trace = None
        if self.tracer is not None:
            trace = self.tracer.step_trace(self.recorder.run_id, spec.name, tries)
        if trace is None:
            return await attempt_once(executor, spec, prepared, ctx)
        with trace.activated():
            return await attempt_once(executor, spec, prepared, replace(ctx, trace=trace))

    async def _output(self, name: str, result: StepOutput | StepFailed, state: _Try,
                      secrets: list[str]) -> str | None:
        """The output a try ended with, scrubbed (a long one off the loop). Cut off meanwhile,
        the step keeps it, as a cut-off try keeps what it printed."""
        try:
            return await stored_text_apart(result.output, secrets)
        except asyncio.CancelledError:
            self.recorder.cut_off(name, stored_text(result.output, secrets),
                                  stored_text(result.stderr, secrets), state.writer.log.usage)
            raise

    async def _finish(self, name: str, status: StepStatus, state: _Try, ended: datetime,
                      t0: float, **fields: Any) -> None:
        """The final write of a step that ran: its running mark, process records and log
        land first (a record that failed, a lost lease included, raises here)."""
        try:
            await state.writer.close()
        except asyncio.CancelledError:  # ended, then cut off before its end was written
            self.recorder.cut_off(name, fields.get("output"), fields.get("stderr"),
                                  state.writer.log.usage)
            raise
        await state.mark.settle()
        for task in state.records:
            await task
        state.records.clear()
        if state.cache_key is not None:
            fields["cache_outcome"] = "miss"
        await self.recorder.finished(name, status, tries=state.tries, ended_at=ended,
                                     seconds=time.perf_counter() - t0, inputs=state.inputs,
                                     started_at=state.started, usage=state.writer.log.usage,
                                     **fields)


class _Try:
    """What a step's tries share: how many so far, when it started, its stored inputs, its
    running mark, the records of the process groups it started and its log."""

    def __init__(self, tries: int, started: datetime, inputs: dict[str, Any],
                 mark: _RunningMark, writer: LogWriter, cache_key: str | None = None) -> None:
        self.tries = tries
        #: The step's cache key (SPEC §26), when it has a cache and missed.
        self.cache_key = cache_key
        self.started = started
        self.inputs = inputs
        self.mark = mark
        self.writer = writer
        self.records: list[asyncio.Task[None]] = []


async def attempt_once(executor: Executor, spec: StepSpec, prepared: PreparedStep,
                       ctx: StepContext) -> StepOutput | StepFailed:
    """One try: the output, or a :class:`StepFailed` saying why and whether to retry."""
    timeout = asyncio.timeout(spec.timeout_seconds)
    prepared.output = prepared.stderr = None  # an earlier try's
    try:
        async with timeout:
            result: StepOutput = await executor.execute(spec, prepared, ctx)
    except StepFailed as exc:
        return exc
    except TimeoutError:
        if timeout.expired():
            return StepFailed(f"timed out after {spec.timeout_seconds:g} s",
                              stderr=prepared.stderr, output=prepared.output)
        return StepFailed("TimeoutError raised by the step")
    except PlaceholderError as exc:
        return StepFailed(describe(exc), retryable=False)
    except Exception as exc:
        return StepFailed(f"{type(exc).__name__}: {describe(exc)}")
    size = len(result.output.encode("utf-8", errors="replace"))
    if size > spec.max_output_bytes:
        return StepFailed(f"output is larger than max_output_bytes ({spec.max_output_bytes} bytes)",
                          stderr=result.stderr, retryable=False)  # too large to keep
    return result


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

    def __init__(self, store: RecordStore, run_id: str, name: str, inputs: dict[str, object],
                 tries: int, started: datetime, owner: str) -> None:
        self.writing = False
        self.task: asyncio.Future[None] | None = None

        def begin() -> None:
            self.writing = True
            self.task = asyncio.ensure_future(store.step_running(
                run_id, name, inputs=inputs, tries=tries, started_at=started, owner=owner))
            # A mark whose step was stopped is never awaited: its error (a lost lease, a
            # stalled database) is the run's business, not an "exception never retrieved".
            self.task.add_done_callback(lambda t: t.cancelled() or t.exception())

        # A timer, not a task: most steps end before it fires, and then cost nothing.
        self._timer = asyncio.get_running_loop().call_later(MARK_AFTER_SECONDS, begin)

    def drop(self) -> None:
        """Forget the mark unless its write has begun (a begun write lands first: the
        store's lock is first come, first served)."""
        if not self.writing:
            self._timer.cancel()

    async def settle(self) -> None:
        """Before the final write: drop the mark if it was not begun, else let it land first.

        A mark that failed (a lost lease) raises here, on the step's own path.
        """
        self.drop()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
