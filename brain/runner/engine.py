"""Executes one claimed run: the DAG on asyncio, recording every step as it ends."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from brain._errors import PlaceholderError, StepFailed
from brain.dsl.model import StepSpec
from brain.executors import Executor, StepContext, default_executors
from brain.executors.base import PreparedStep, StepOutput
from brain.placeholders import Ref, render
from brain.results import RunStatus, StepStatus, TriggerData
from brain.runner.events import EventHandler, StepEvent
from brain.store.store import utcnow

if TYPE_CHECKING:
    from datetime import datetime

    from brain.dsl.workflow import Workflow
    from brain.store.base import RunStore

POLL_SECONDS = 0.5


@dataclass
class _Outcome:
    name: str
    ok: bool
    error: str | None = None


class RunExecution:
    """Runs the steps of ``run_id`` that have not succeeded yet, under ``owner``'s lease."""

    def __init__(self, wf: Workflow, store: RunStore, run_id: str, owner: str, *,
                 trigger: TriggerData, previous_run_id: str | None, lease_seconds: float,
                 outputs: dict[str, str] | None = None, tries: Mapping[str, int] | None = None,
                 executors: Mapping[str, Executor] | None = None,
                 on_event: EventHandler | None = None,
                 protected_env: frozenset[str] = frozenset(),
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
                               protected_env=protected_env | webhook_secret_names())
        # Outputs {previous.X} reads; loaded from previous_run_id on first need unless given.
        self._previous: dict[str, str] | None = (None if previous_outputs is None
                                                 else dict(previous_outputs))
        self.kinds = {s.name: s.kind for s in wf.spec.steps}
        self._cancel = asyncio.Event()
        self._cancel_reason = "cancelled"
        self._lease_lost = False

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
                    running.pop(task)  # type: ignore[arg-type]
                    outcome = task.result()
                    assert isinstance(outcome, _Outcome)
                    if not outcome.ok:
                        failure = failure or outcome
                        continue
                    for child in dependants[outcome.name]:
                        deps = waiting.get(child)
                        if deps is not None:
                            deps.discard(outcome.name)
                            if not deps:
                                ready.append(child)
                if failure is not None:
                    break
        except BaseException:
            # The executing task itself was cancelled (Ctrl-C, shutdown): stop and record,
            # or, for a server shutting down, stop and leave the run to be resumed.
            self._cancel_reason = "interrupted"
            if self.abandon_on_cancel is not None and self.abandon_on_cancel():
                self._lease_lost = True
            await asyncio.shield(self._stop(running, list(waiting), None))
            raise
        finally:
            monitor.cancel()
            cancel_wait.cancel()
        return await self._stop(running, list(waiting), failure)

    async def _close_executors(self) -> None:
        for executor in self.executors.values():
            close = getattr(executor, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    async def _stop(self, running: dict[asyncio.Task[_Outcome], str], pending: list[str],
                    failure: _Outcome | None) -> RunStatus:
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        if self._lease_lost:
            # Another executor resumed this run after our lease expired (or this server is
            # shutting down and leaves it to be resumed): write nothing.
            return RunStatus.RUNNING
        stopped = list(running.values())
        not_started = [n for n in pending if n not in stopped]
        if failure is not None:
            reason = f"step {failure.name!r} failed: {failure.error}"
            await self.store.steps_ended(self.run_id, stopped, StepStatus.CANCELLED,
                                         error=f"cancelled because {reason}")
            await self.store.steps_ended(self.run_id, not_started, StepStatus.SKIPPED)
            await self.store.finish_run(self.run_id, RunStatus.FAILED, reason)
            self._emit_all(stopped, "cancelled")
            self._emit_all(not_started, "skipped")
            return RunStatus.FAILED
        if stopped or not_started:
            await self.store.steps_ended(self.run_id, stopped + not_started, StepStatus.CANCELLED,
                                         error=self._cancel_reason)
            await self.store.finish_run(self.run_id, RunStatus.CANCELLED, self._cancel_reason)
            self._emit_all(stopped + not_started, "cancelled")
            return RunStatus.CANCELLED
        await self.store.finish_run(self.run_id, RunStatus.SUCCEEDED)
        return RunStatus.SUCCEEDED

    async def _monitor(self) -> None:
        """Renew the lease now and then; notice cancel requests within a second."""
        renew_every = max(self.lease_seconds / 3, POLL_SECONDS)
        last_renew = time.monotonic()
        while True:
            await asyncio.sleep(POLL_SECONDS)
            renew = time.monotonic() - last_renew >= renew_every
            try:
                ours, cancel = await self.store.heartbeat(
                    self.run_id, self.owner, self.lease_seconds if renew else None)
            except Exception:  # a busy database: try again at the next tick
                continue
            if renew:
                last_renew = time.monotonic()
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
            msg = exc.message if isinstance(exc, StepFailed) else str(exc)
            await self.store.step_finished(self.run_id, spec.name, status=StepStatus.FAILED,
                                           tries=tries + 1, ended_at=utcnow(), error=msg)
            self._emit(StepEvent(self.run_id, spec.name, spec.kind, "failed", tries + 1, msg))
            return _Outcome(spec.name, False, msg)
        marked = _RunningMark(self.store, self.run_id, spec.name, prepared.inputs, tries + 1,
                              started)
        self._emit(StepEvent(self.run_id, spec.name, spec.kind, "running", tries + 1))
        attempt = 0
        while True:
            attempt += 1
            tries += 1
            try:
                result = await self._attempt(executor, spec, prepared)
            except asyncio.CancelledError:
                marked.drop()  # the run records this step as cancelled; no late "running"
                raise
            ended = utcnow()  # when the work ended, not when its record was written
            if isinstance(result, StepOutput):
                output = _scrub(result.output, prepared.secrets) or ""
                await marked.settle()
                await self.store.step_finished(
                    self.run_id, spec.name, status=StepStatus.SUCCEEDED, tries=tries,
                    ended_at=ended, output=output, inputs=prepared.inputs, started_at=started,
                    stderr=_scrub(result.stderr, prepared.secrets))
                self.outputs[spec.name] = output
                self._emit(StepEvent(self.run_id, spec.name, spec.kind, "succeeded", tries,
                                     seconds=time.perf_counter() - t0))
                return _Outcome(spec.name, True)
            message = _scrub(result.message, prepared.secrets) or "failed"
            if result.retryable and attempt <= spec.retries:
                self._emit(StepEvent(self.run_id, spec.name, spec.kind, "retrying", tries, message))
                delay = spec.retry_delay_seconds * 2 ** (attempt - 1)
                await asyncio.sleep(max(delay, result.retry_after or 0.0))
                continue
            await marked.settle()
            await self.store.step_finished(
                self.run_id, spec.name, status=StepStatus.FAILED, tries=tries, ended_at=ended,
                inputs=prepared.inputs, started_at=started,
                error=message, stderr=_scrub(result.stderr, prepared.secrets))
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
            return StepFailed(str(exc), retryable=False)
        except Exception as exc:
            return StepFailed(f"{type(exc).__name__}: {exc}")
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

    DELAY_SECONDS = 0.0

    def __init__(self, store: RunStore, run_id: str, name: str, inputs: dict[str, object],
                 tries: int, started: datetime) -> None:
        self.writing = False

        async def mark() -> None:
            await asyncio.sleep(self.DELAY_SECONDS)
            self.writing = True
            await store.step_running(run_id, name, inputs=inputs, tries=tries, started_at=started)

        self.task = asyncio.create_task(mark())

    def drop(self) -> None:
        """Forget the mark unless its write has begun (a begun write lands first: the
        store's lock is first come, first served)."""
        if not self.writing:
            self.task.cancel()

    async def settle(self) -> None:
        """Before the final write: drop the mark if it was not begun, else let it land first."""
        self.drop()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def webhook_secret_names() -> frozenset[str]:
    """The secret variables of every webhook trigger defined in this process."""
    from brain.dsl.triggers import WebhookTrigger
    from brain.dsl.workflow import REGISTRY

    return frozenset(t.secret_env for wf in REGISTRY.values() for t in wf.triggers
                     if isinstance(t, WebhookTrigger))


def _scrub(text: str | None, secrets: list[str]) -> str | None:
    """Replace secret values that a step echoed with ``***``."""
    if not text or not secrets:
        return text
    for value in secrets:
        if value:
            text = text.replace(value, "***")
    return text
