"""``GET /api/events``: run and step changes as server-sent events, for the console and
for scripts.

One :class:`ChangeWatcher` per server looks at the database twice a second while
anybody listens (runs executed by ``brain worker`` processes elsewhere show up
too) and fans each change out to every listener whose filter it matches: the
database is read once per look, however many pages are open. It is also an
observer of the runs this process executes (``BrainService.observe``): their
changes reach listeners at once, without waiting for the next look, and a look
never announces what it read before such a change as if it came after.

Events (``data`` is JSON):

* ``run``: ``{"run_id", "workflow", "status", "error", "retry_of"}``
* ``step``: ``{"run_id", "workflow", "name", "kind", "status", "tries"}``
* ``log``: ``{"run_id", "workflow", "step", "lines": [{"seq", "stream", "t", "text"}]}``,
  the lines of one step stored since the last look
* ``progress``: ``{"run_id", "workflow", "step", "progress", "total", "message"}``, a
  step's latest progress report (SPEC §17) when it changed since the last look
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from brain._clock import utcnow
from brain._errors import RunNotFound
from brain.results import FINISHED_RUN, FINISHED_STEP, RunStatus, StepState, StepStatus
from brain.runner.observe import RunObserver

if TYPE_CHECKING:
    from brain.results import RunResult
    from brain.runner.events import LogEvent, ProgressEvent, RunEvent, StepEvent, WaitEvent
    from brain.server.access import ServiceAccess
    from brain.store import Store

log = logging.getLogger("brain.server")

LOOK_SECONDS = 0.5
#: A listener that falls this far behind is dropped (its page reconnects and reloads).
QUEUE_LIMIT = 1000


@dataclass(eq=False)
class _Listener:
    run_id: str | None
    workflow: str | None
    queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = field(
        default_factory=lambda: asyncio.Queue(QUEUE_LIMIT))

    def wants(self, data: dict[str, Any]) -> bool:
        return ((self.run_id is None or data["run_id"].startswith(self.run_id))
                and (self.workflow is None or data["workflow"] == self.workflow))


class ChangeWatcher(RunObserver):
    """Looks for changes while at least one listener is connected; fans them out. As an
    observer of this process's runs, it fans their changes out the moment they happen."""

    def __init__(self, store: Store, look_seconds: float = LOOK_SECONDS) -> None:
        self.store = store
        self._listeners: set[_Listener] = set()
        self._task: asyncio.Task[None] | None = None
        #: Last seen state: run id → (status, error); (run id, step) → (status, tries).
        self._runs: dict[str, tuple[str, str | None]] = {}
        self._steps: dict[tuple[str, str], tuple[str, int]] = {}
        #: (run id, step) → its latest progress announced (as stored).
        self._progress: dict[tuple[str, str], str] = {}
        #: (run id, step) → the last log line's ``seq`` announced.
        self._logged: dict[tuple[str, str], int] = {}
        self.looks = 0  # how many times the database was read (for tests)
        #: How long between two looks at the database.
        self.look_seconds = look_seconds
        #: Run id or (run id, step) → when this process last announced a change of it
        #: itself (``time.monotonic()``): a look that began before reads older state.
        self._pushed: dict[Any, float] = {}

    @contextlib.asynccontextmanager
    async def listen(self, run_id: str | None = None,
                     workflow: str | None = None) -> AsyncIterator[_Listener]:
        """A listener for changes matching the filters, while the block runs."""
        listener = _Listener(run_id.lower() if run_id else None, workflow)
        self._listeners.add(listener)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._watch(), name="brain-change-watcher")
        try:
            yield listener
        finally:
            self._listeners.discard(listener)

    async def close(self) -> None:
        """Stop looking and end every listener's stream."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for listener in list(self._listeners):
            with contextlib.suppress(asyncio.QueueFull):
                listener.queue.put_nowait(None)

    async def _watch(self) -> None:
        # The first look announces what is active now (and what ended in the last seconds):
        # a page that connects mid-run learns the state it may have missed.
        since = utcnow() - timedelta(seconds=5)
        while self._listeners:
            look_started = utcnow()
            read_at = time.monotonic()
            try:
                activity = await self.store.recent_activity(since)
            except Exception as exc:  # a busy database: look again next time
                log.debug("change watcher: %s", exc)
                await asyncio.sleep(self.look_seconds)
                continue
            self.looks += 1
            for run, step_states in reversed(activity):
                self._compare(run, step_states, read_at)
            await self._new_lines(since)
            since = look_started - timedelta(seconds=2)  # overlap: a commit may land late
            await asyncio.sleep(self.look_seconds)

    async def _new_lines(self, since: Any) -> None:
        """Announce the log lines stored since ``since`` not announced yet, a ``log`` event
        per step."""
        try:
            found = await self.store.recent_logs(since)
        except Exception as exc:  # a busy database: look again next time
            log.debug("change watcher: %s", exc)
            return
        batches: dict[tuple[str, str], tuple[str, list[dict[str, Any]]]] = {}
        for run_id, workflow, step, line in found:
            key = (run_id, step)
            if line.seq <= self._logged.get(key, 0):
                continue
            batches.setdefault(key, (workflow, []))[1].append(line.as_json())
        for (run_id, step), (workflow, lines) in batches.items():
            self._logged[(run_id, step)] = max(ln["seq"] for ln in lines)
            self._publish("log", {"run_id": run_id, "workflow": workflow, "step": step,
                                  "lines": lines})
        if len(self._logged) > 20_000:  # forget the oldest (announced long ago)
            for old in list(self._logged)[:10_000]:
                del self._logged[old]

    def _stale(self, key: Any, read_at: float) -> bool:
        """Whether a look that began at ``read_at`` read ``key`` before this process last
        announced a change of it (what it read is older than what listeners have)."""
        return self._pushed.get(key, -1.0) >= read_at

    def _compare(self, run: Any, step_states: dict[str, StepState],
                 read_at: float = float("inf")) -> None:
        # Steps first: a run's end is announced after the ends of its steps.
        for name, (kind, step_status, tries, progress) in step_states.items():
            key = (run.run_id, name)
            if key in self._pushed and (self._stale(key, read_at) or self._behind(key, step_status)):
                continue
            if self._steps.get(key) != (step_status, tries):
                self._steps[key] = (step_status, tries)
                self._publish("step", {"run_id": run.run_id, "workflow": run.workflow,
                                       "name": name, "kind": kind, "status": step_status,
                                       "tries": tries})
            if progress is not None and self._progress.get(key) != progress:
                self._progress[key] = progress
                self._publish("progress", {"run_id": run.run_id, "workflow": run.workflow,
                                           "step": name, **json.loads(progress)})
        status = str(run.status)
        known = self._runs.get(run.run_id)
        if self._stale(run.run_id, read_at) or (
                known is not None and known[0] in FINISHED_RUN and status not in FINISHED_RUN):
            # (a run's end is announced here as it is written: a look a moment later may
            # still read it running; an ended run never runs again, a retry is a new run)
            pass
        elif self._runs.get(run.run_id) != (status, run.error):
            self._runs[run.run_id] = (status, run.error)
            self._publish("run", {"run_id": run.run_id, "workflow": run.workflow,
                                  "status": status, "error": run.error, "retry_of": run.retry_of})
        if len(self._runs) > 20_000:  # forget old runs (they were announced long ago)
            for old in list(self._runs)[:10_000]:
                del self._runs[old]
            keep = set(self._runs)
            self._steps = {k: v for k, v in self._steps.items() if k[0] in keep}
            self._progress = {k: v for k, v in self._progress.items() if k[0] in keep}
            self._pushed = {k: v for k, v in self._pushed.items()
                            if (k[0] if isinstance(k, tuple) else k) in keep}

    def _behind(self, key: tuple[str, str], status: str) -> bool:
        """For a step this process announced: whether the status read is one listeners have
        or one it announced ahead of the store (``running`` before its mark is written)."""
        known = self._steps.get(key)
        return known is not None and (status == known[0] or status == StepStatus.PENDING.value)

    # --- observing this process's runs (pushed at once) -------------------------------

    def _push_step(self, run_id: str, workflow: str, step: str, kind: str, status: str,
                   tries: int) -> None:
        if not self._listeners:
            return
        key = (run_id, step)
        self._pushed[key] = time.monotonic()
        if self._steps.get(key) == (status, tries):
            return
        self._steps[key] = (status, tries)
        self._publish("step", {"run_id": run_id, "workflow": workflow, "name": step,
                               "kind": kind, "status": status, "tries": tries})

    def _push_run(self, run_id: str, workflow: str, status: str, error: str | None,
                  retry_of: str | None) -> None:
        if not self._listeners:
            return
        self._pushed[run_id] = time.monotonic()
        if self._runs.get(run_id) == (status, error):
            return
        self._runs[run_id] = (status, error)
        self._publish("run", {"run_id": run_id, "workflow": workflow, "status": status,
                              "error": error, "retry_of": retry_of})

    def run_started(self, run: RunEvent) -> None:
        """A run of this process began executing: ``running`` now."""
        self._push_run(run.run_id, run.workflow, RunStatus.RUNNING.value, None, run.retry_of)

    def run_ended(self, run: RunEvent, result: RunResult, seconds: float) -> None:
        """A run of this process stopped executing: its status now (unless it is still
        ``running``, its lease lost: whoever has it now tells)."""
        if result.status != RunStatus.RUNNING:
            self._push_run(run.run_id, run.workflow, str(result.status), result.error,
                           run.retry_of)

    def step_started(self, event: StepEvent) -> None:
        """A step of this process's runs began: ``running``."""
        self._push_step(event.run_id, event.workflow, event.step, event.kind, event.status,
                        event.tries)

    def step_ended(self, event: StepEvent) -> None:
        """A step ended (a try that is retried stays ``running``, as the store has it)."""
        if event.status != "retrying":
            self.step_started(event)

    def step_waiting(self, event: WaitEvent) -> None:
        """A step began to wait: ``waiting``."""
        self._push_step(event.run_id, event.workflow, event.step, event.kind,
                        StepStatus.WAITING.value, event.tries)

    def step_log(self, event: LogEvent) -> None:
        """New lines of a step: a ``log`` event now (a look skips them: it goes by ``seq``)."""
        if not self._listeners or not event.lines:
            return
        key = (event.run_id, event.step)
        fresh = [ln for ln in event.lines if ln.seq > self._logged.get(key, 0)]
        if not fresh:
            return
        self._logged[key] = max(ln.seq for ln in fresh)
        self._publish("log", {"run_id": event.run_id, "workflow": event.workflow,
                              "step": event.step, "lines": [ln.as_json() for ln in fresh]})

    def progress(self, event: ProgressEvent) -> None:
        """A step's new progress report: a ``progress`` event now."""
        if not self._listeners:
            return
        key = (event.run_id, event.step)
        stored = json.dumps(event.progress)  # as the store keeps it: a look compares the text
        if self._progress.get(key) == stored:
            return
        self._progress[key] = stored
        self._publish("progress", {"run_id": event.run_id, "workflow": event.workflow,
                                   "step": event.step, **event.progress})

    def _publish(self, event: str, data: dict[str, Any]) -> None:
        for listener in list(self._listeners):
            if not listener.wants(data):
                continue
            try:
                listener.queue.put_nowait((event, data))
            except asyncio.QueueFull:  # too slow: end its stream; the page reconnects
                self._listeners.discard(listener)
                with contextlib.suppress(asyncio.QueueEmpty):
                    listener.queue.get_nowait()
                listener.queue.put_nowait(None)


async def stream(watcher: ChangeWatcher, run_id: str | None,
                 workflow: str | None) -> AsyncIterator[Any]:
    """The server-sent events of one listener (a comment every 15 s keeps proxies open)."""
    from litestar.response import ServerSentEventMessage

    async with watcher.listen(run_id, workflow) as listener:
        yield ServerSentEventMessage(comment="listening", retry=2000)
        while True:
            try:
                item = await asyncio.wait_for(listener.queue.get(), 15)
            except TimeoutError:
                yield ServerSentEventMessage(comment="still here")
                continue
            if item is None:
                return
            event, data = item
            yield ServerSentEventMessage(event=event, data=json.dumps(data))


#: How often a follower of one step's log looks for new lines.
FOLLOW_SECONDS = 0.5


async def follow_log(access: ServiceAccess, run_id: str, step: str,
                     after: int) -> AsyncIterator[Any]:
    """The server-sent events of ``GET .../steps/{step}/log?follow=true``: a ``log`` event
    per batch of new lines, then ``end`` once the step has ended and its last lines were
    sent (a step's last lines are stored before its end, so the status is read first)."""
    from litestar.response import ServerSentEventMessage

    yield ServerSentEventMessage(comment="following", retry=2000)
    quiet = 0.0
    while True:
        try:
            run, status, lines = await access.step_log(run_id, step, after=after)
        except RunNotFound:  # pruned or deleted meanwhile: nothing more will come
            return
        except Exception as exc:  # a busy database: look again next time
            log.debug("following %s/%s: %s", run_id, step, exc)
            await asyncio.sleep(FOLLOW_SECONDS)
            continue
        if lines:
            after = lines[-1].seq
            quiet = 0.0
            yield ServerSentEventMessage(event="log", data=json.dumps(
                {"run_id": run.run_id, "step": step, "lines": [ln.as_json() for ln in lines]}))
            continue  # maybe more than one read's worth
        if status in FINISHED_STEP or run.status in FINISHED_RUN:
            yield ServerSentEventMessage(event="end", data=json.dumps(
                {"run_id": run.run_id, "step": step, "status": str(status)}))
            return
        await asyncio.sleep(FOLLOW_SECONDS)
        quiet += FOLLOW_SECONDS
        if quiet >= 15:
            quiet = 0.0
            yield ServerSentEventMessage(comment="still here")
