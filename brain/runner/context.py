"""What a run executes with, passed down instead of read from globals: :class:`RunContext`.

The settings the runner used to read from the environment deep inside (the lease's
length, the queue limit, the concurrency, the ``llm()`` defaults) are read once into a
frozen :class:`Settings` where a run or a service starts (``wf.run()``/``wf.arun()``,
``BrainService``) and handed down with the observers (:mod:`brain.runner.observe`),
the store, the local queues and the secrets view.

Two things stay one per process, because what users call needs them to be, and they
are the context's: :data:`PROCESS_QUEUES`, the queues of the services this process
serves (``wf.enqueue()`` from a script or a host app's handler reaches a service of
the same process through it), and :data:`STORE_LOANS`, the count of runs sharing a
store given to them unopened (concurrent ``wf.arun(store=Store(url))`` calls on one
store open it once and the last one closes it). A context names them; a test or an
embedding may give its own.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from brain._errors import BrainError, StoreError
from brain.executors.base import LlmDefaults
from brain.runner.observe import Observers, RunObserver, callbacks
from brain.runner.workflows import RunnableWorkflow, remember_known_secrets

if TYPE_CHECKING:
    from brain.executors.traced import StepTrace
    from brain.results import TriggerData
    from brain.runner.events import EventHandler, LogHandler
    from brain.store.base import RunStore


def env_int(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """A whole number of at least 1 from the environment, ``default`` when unset."""
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BrainError(f"{name} must be a whole number, not {raw!r}") from None
    if value < 1:
        raise BrainError(f"{name} must be at least 1")
    return value


def env_lease_seconds(environ: Mapping[str, str] | None = None) -> float:
    """How long a lease lasts without a heartbeat (``BRAIN_LEASE_SECONDS``, default 30, at
    least 1)."""
    raw = (os.environ if environ is None else environ).get("BRAIN_LEASE_SECONDS", "30")
    try:
        value = float(raw)
    except ValueError:
        raise StoreError(f"BRAIN_LEASE_SECONDS must be a number of seconds, not {raw!r}") from None
    return max(value, 1.0)


def env_traces(environ: Mapping[str, str] | None = None) -> bool:
    """Whether traces are on (SPEC §25): the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``
    (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) or ``OTEL_TRACES_EXPORTER`` is set (and
    neither ``OTEL_TRACES_EXPORTER=none`` nor ``OTEL_SDK_DISABLED=true`` says otherwise)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(exporter or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def env_seconds(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    """A number of seconds (0 or more, finite) from the environment, ``default`` when unset."""
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BrainError(f"{name} must be a number of seconds, not {raw!r}") from None
    if not 0 <= value < float("inf"):
        raise BrainError(f"{name} must be a number of seconds, 0 or more")
    return value


@dataclass(frozen=True)
class Settings:
    """The settings of the runs of one edge (a ``wf.run()`` call, a service), read once."""

    #: ``BRAIN_LEASE_SECONDS``: how long a run's lease lasts without a heartbeat.
    lease_seconds: float = 30.0
    #: ``BRAIN_MAX_QUEUED_RUNS``: how many runs may wait in the queue.
    max_queued_runs: int = 1000
    #: ``BRAIN_CONCURRENCY``: how many runs a serving process executes at once.
    concurrency: int = 4
    #: ``LLM_MODEL``, ``LLM_BASE_URL``, ``LLM_API_KEY``: what ``llm()`` steps use by default.
    llm: LlmDefaults = field(default_factory=LlmDefaults)
    #: ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_TRACES_EXPORTER`` set: runs are traced.
    traces: bool = False
    #: ``BRAIN_OTEL_CAPTURE_CONTENT=1``: traces hold prompts and answers (scrubbed).
    trace_content: bool = False
    #: ``BRAIN_MCP_WAIT_SECONDS``: how long an MCP ``tools/call`` waits for its run's end
    #: before it answers with the run's state (SPEC §23).
    mcp_wait_seconds: float = 60.0

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every setting from ``environ`` (the process's environment by default); a
        malformed one is a :class:`BrainError` naming it."""
        return cls(lease_seconds=env_lease_seconds(environ),
                   max_queued_runs=env_int("BRAIN_MAX_QUEUED_RUNS", 1000, environ),
                   concurrency=env_int("BRAIN_CONCURRENCY", 4, environ),
                   llm=LlmDefaults.from_environment(environ),
                   traces=env_traces(environ),
                   trace_content=(os.environ if environ is None else environ).get(
                       "BRAIN_OTEL_CAPTURE_CONTENT", "").strip() in ("1", "true"),
                   mcp_wait_seconds=env_seconds("BRAIN_MCP_WAIT_SECONDS", 60.0, environ))


class LocalQueue(Protocol):
    """A queue this process serves (a ``BrainService``): it takes runs of the workflows
    it has loaded and wakes its executors for them."""

    def serves(self, wf: RunnableWorkflow) -> bool:
        """Whether runs of ``wf`` (this very definition) go to this queue."""
        ...

    async def enqueue(self, wf: RunnableWorkflow, trigger: TriggerData, *,
                      trigger_key: str,
                      params: Mapping[str, Any] | None = None) -> tuple[str | None, bool]:
        """Queue a run of ``wf`` with ``params`` (validated first); ``(run_id, created)``."""
        ...


class LocalQueues:
    """The queues services of this process serve, in the order they started serving."""

    def __init__(self) -> None:
        self._queues: list[LocalQueue] = []

    def add(self, queue: LocalQueue) -> None:
        """``queue`` takes the runs enqueued here for the workflows it serves."""
        if queue not in self._queues:
            self._queues.append(queue)

    def remove(self, queue: LocalQueue) -> None:
        """``queue`` no longer takes runs enqueued here."""
        if queue in self._queues:
            self._queues.remove(queue)

    def wake_all(self) -> None:
        """New work may be queued (a child run ended, its parent woken): every queue that
        can be woken looks now."""
        for queue in list(self._queues):
            wake = getattr(queue, "wake", None)
            if wake is not None:
                wake()

    def serving(self, wf: RunnableWorkflow) -> LocalQueue | None:
        """The first queue serving ``wf`` (this very definition), if any."""
        return next((q for q in list(self._queues) if q.serves(wf)), None)


#: The queues of this process's services: ``wf.enqueue()`` looks here (see the module).
PROCESS_QUEUES = LocalQueues()


class StoreLoans:
    """Stores given unopened to runs, by how many of those runs use each: the runs open
    such a store together and the last one to finish closes it."""

    def __init__(self) -> None:
        self._users: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    def owned_by_caller(self, store: RunStore) -> bool:
        """Whether ``store`` was opened by the caller (it stays the caller's)."""
        return store.is_open and store not in self._users

    @contextlib.asynccontextmanager
    async def borrow(self, store: RunStore) -> AsyncIterator[RunStore]:
        """``store``, opened by the first run that needs it and closed when the last ends."""
        self._users[store] = self._users.get(store, 0) + 1
        try:
            await store.open()
            yield store
        finally:
            self._users[store] -= 1
            if not self._users[store]:
                del self._users[store]
                await store.close()


#: The stores this process's runs borrow (see the module).
STORE_LOANS = StoreLoans()


class SecretsView(Protocol):
    """What a run needs of the secrets this process knows (``brain._secrets`` keeps them)."""

    def protect(self, wf: RunnableWorkflow) -> frozenset[str]:
        """Remember every secret known now (scrubbed from all that is stored); return the
        variables no step of ``wf`` sees unless it passes them itself."""
        ...


class ProcessSecrets:
    """The secrets of this process, as ``brain._secrets`` keeps them (one set per process:
    a secret one run reveals is scrubbed from every run's records)."""

    def protect(self, wf: RunnableWorkflow) -> frozenset[str]:
        """See :meth:`SecretsView.protect`."""
        return remember_known_secrets(wf)


class RunTracer(RunObserver, Protocol):
    """Traces of runs (SPEC §25): an observer that also gives run creation its trace
    context and each step try its span. ``brain.runner.tracing.RunTracing`` is the one
    implementation; nothing of OpenTelemetry is imported unless one is made."""

    def new_trace(self, incoming: Mapping[str, str] | None = None) -> str:
        """The trace context to store with a new run: its root span's, continuing
        ``incoming`` (W3C ``traceparent``/``tracestate`` headers) when given and valid."""
        ...

    def child_trace(self, run_id: str, step: str) -> str | None:
        """The trace context of a child run queued by ``step`` of ``run_id``: under that
        step's span."""
        ...

    def step_trace(self, run_id: str, step: str, tries: int) -> StepTrace | None:
        """The span of try ``tries`` of ``step`` (begun now if it is not open yet)."""
        ...


def tracer_for(settings: Settings) -> RunTracer | None:
    """This process's run tracer when ``settings`` turn traces on, else ``None`` (and
    nothing of OpenTelemetry imported). A :class:`BrainError` with one clear line when the
    OpenTelemetry packages are missing."""
    if not settings.traces:
        return None
    try:
        from brain.runner.tracing import process_tracing
    except ImportError as exc:
        raise BrainError(
            f"traces are asked for (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER is "
            f"set) but OpenTelemetry is not installed ({exc.name or exc}): install "
            f"'the-brain[otel]', or unset those variables") from None
    return process_tracing(capture_content=settings.trace_content)


@dataclass(frozen=True)
class RunContext:
    """What the runs of one edge (a ``wf.run()`` call, a service) execute with.

    ``store``: where they record, when the edge has one open (``None``: each run
    finds its own); ``queues``: where ``wf.enqueue()`` looks for a service of this
    process; ``observers``: who is told of every run's events.
    """

    settings: Settings = field(default_factory=Settings)
    observers: Observers = field(default_factory=Observers)
    store: RunStore | None = None
    queues: LocalQueues = PROCESS_QUEUES
    loans: StoreLoans = STORE_LOANS
    secrets: SecretsView = field(default_factory=ProcessSecrets)
    #: Traces of the runs (SPEC §25), when on; it is one of the observers too.
    tracer: RunTracer | None = None

    @classmethod
    def from_environment(cls, *, observers: Iterable[RunObserver] = (),
                         store: RunStore | None = None) -> RunContext:
        """A context with :meth:`Settings.from_environment`: call it at the edge, once."""
        settings = Settings.from_environment()
        return cls(settings, Observers(observers), store).traced_by(tracer_for(settings))

    def traced_by(self, tracer: RunTracer | None) -> RunContext:
        """This context with its runs traced by ``tracer`` (which observes them too)."""
        if tracer is None:
            return self
        return replace(self, tracer=tracer, observers=self.observers.joined(tracer))

    def new_trace(self, incoming: Mapping[str, str] | None = None) -> str | None:
        """The trace context to store with a new run (``None`` when traces are off)."""
        return None if self.tracer is None else self.tracer.new_trace(incoming)

    def observed_by(self, *more: RunObserver | None) -> RunContext:
        """This context with ``more`` observers too (``None`` left out)."""
        if not any(o is not None for o in more):
            return self
        return replace(self, observers=self.observers.joined(*more))

    def with_callbacks(self, on_event: EventHandler | None,
                       on_log: LogHandler | None) -> RunContext:
        """This context with ``on_event``/``on_log`` told too (see ``observe.Callbacks``)."""
        return self.observed_by(callbacks(on_event, on_log))


def context_for(context: RunContext | None, on_event: EventHandler | None = None,
                on_log: LogHandler | None = None) -> RunContext:
    """``context`` (read from the environment now when ``None``) with the callbacks given."""
    return (context or RunContext.from_environment()).with_callbacks(on_event, on_log)


__all__ = ["PROCESS_QUEUES", "STORE_LOANS", "LocalQueue", "LocalQueues", "ProcessSecrets",
           "RunContext", "RunTracer", "SecretsView", "Settings", "StoreLoans", "context_for",
           "env_int", "env_lease_seconds", "env_traces", "tracer_for"]
