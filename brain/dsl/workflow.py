"""``@workflow``: trace a function into a :class:`Workflow` at decoration time."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, overload

from brain import placeholders
from brain._errors import WorkflowDefinitionError
from brain.dsl.model import WorkflowGraph, WorkflowSpec
from brain.dsl.nodes import MISUSE
from brain.dsl.tracing import current_tracer, tracing
from brain.dsl.triggers import TriggerSpec

if TYPE_CHECKING:
    from brain.results import RunResult
    from brain.runner.events import EventHandler
    from brain.store.base import RunStore

#: Every workflow defined in this process, by name; a new definition replaces the old.
REGISTRY: dict[str, Workflow] = {}
#: The server service running in this process (set by ``BrainPlugin``), for ``enqueue``.
ACTIVE_SERVICE: Any = None


class Workflow:
    """A traced workflow. Call it to run it: ``result = wf(trigger={"body": "..."})``."""

    def __init__(self, fn: Callable[[], Any], spec: WorkflowSpec) -> None:
        self.fn = fn
        self.spec = spec
        self.name = spec.name
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.source_dir = os.path.dirname(spec.source_file) if spec.source_file else os.getcwd()
        self.definition_hash = spec.definition_hash()

    def __repr__(self) -> str:
        return f"<Workflow {self.name!r}: {len(self.spec.steps)} steps>"

    @property
    def graph(self) -> WorkflowGraph:
        """``nodes`` (step names in call order) and ``edges`` (``(upstream, downstream)``)."""
        return self.spec.graph

    @property
    def triggers(self) -> tuple[TriggerSpec, ...]:
        """The triggers given to ``@workflow(triggers=[...])``."""
        return self.spec.triggers

    @property
    def description(self) -> str | None:
        """The description, or the function's docstring."""
        return self.spec.description

    async def arun(self, trigger: object = None, *, store: RunStore | str | None = None,
                   on_event: EventHandler | None = None) -> RunResult:
        """Run now and wait for the result (async form of calling the workflow).

        The run is recorded in ``store`` (a :class:`brain.store.Store` or a
        database URL), else in ``BRAIN_DATABASE_URL``.
        """
        from brain.runner import run_workflow_now

        return await run_workflow_now(self, trigger, store=store, on_event=on_event)

    async def enqueue(self, body: object = None, *, headers: dict[str, str] | None = None) -> str:
        """Queue a run for the executors and return its id (committed before this returns).

        Inside a process serving The Brain (``BrainPlugin``) the run goes to that
        server's queue; otherwise it is written to ``BRAIN_DATABASE_URL`` for a
        running ``brain serve`` or ``brain worker`` to take.
        """
        from brain.results import TriggerData

        trigger = TriggerData.from_input({"body": body, "headers": headers or {}}, event="manual")
        service = ACTIVE_SERVICE
        if service is not None and service.workflows.get(self.name) is self:
            run_id, _ = await service.enqueue(self, trigger, trigger_key="api")
            return str(run_id)
        import uuid

        from brain.store import Store

        async with Store() as store:
            run_id, _ = await store.enqueue_run(
                run_id=uuid.uuid4().hex, workflow=self.name, definition_hash=self.definition_hash,
                trigger=trigger, step_rows=[(s.name, s.kind) for s in self.spec.steps],
                trigger_key="api")
        return str(run_id)

    def run(self, trigger: object = None, *, store: RunStore | str | None = None,
            on_event: EventHandler | None = None) -> RunResult:
        """Run now and return the :class:`RunResult`; works inside a running event loop too."""
        if current_tracer() is not None:
            raise WorkflowDefinitionError(
                f"workflow {self.name!r} was called while tracing another workflow: "
                f"sub-workflows are not supported yet")
        from brain._sync import run_sync

        return run_sync(self.arun(trigger, store=store, on_event=on_event),
                        thread_name=f"brain-run-{self.name}")

    __call__ = run


def _check_trigger_identities(where: str, triggers: Sequence[TriggerSpec]) -> None:
    """Two triggers with one identity would share one fire history (SPEC §5): refuse them."""
    seen: set[str] = set()
    for trig in triggers:
        key = trig.key()
        if key in seen and trig.name is not None:
            raise WorkflowDefinitionError(
                f"{where}: two triggers are named {trig.name!r}: give each its own name=")
        if key in seen:
            raise WorkflowDefinitionError(
                f"{where}: two {trig.type} triggers are the same ({key!r}): remove one, "
                f"or give each its own name= if both are meant to fire")
        seen.add(key)


def _trace(fn: Callable[[], Any], name: str, triggers: Sequence[TriggerSpec],
           description: str | None, max_concurrent_runs: int | None) -> WorkflowSpec:
    where = f"workflow {name!r}"
    if not placeholders.NAME_RE.match(name):
        raise WorkflowDefinitionError(f"{where}: a workflow name is letters, digits, '_' and '-'")
    if inspect.iscoroutinefunction(fn):
        raise WorkflowDefinitionError(f"{where}: a workflow is a plain def (its steps may be async)")
    required = [p.name for p in inspect.signature(fn).parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if required:
        raise WorkflowDefinitionError(
            f"{where}: a workflow takes no required parameters (got {', '.join(required)}); "
            f"its input is `trigger`")
    if current_tracer() is not None:
        raise WorkflowDefinitionError(f"{where}: workflows cannot be defined while tracing another")
    if max_concurrent_runs is not None and max_concurrent_runs < 1:
        raise WorkflowDefinitionError(f"{where}: max_concurrent_runs must be at least 1")
    with tracing(name) as tracer:
        try:
            fn()
        except WorkflowDefinitionError as exc:
            text = str(exc)
            if text.startswith(where):
                raise
            raise WorkflowDefinitionError(f"{where}: {text}") from None
        except TypeError as exc:  # json.dumps(node) and friends
            if "StepNode" in str(exc) or "TriggerField" in str(exc):
                raise WorkflowDefinitionError(f"{where}: {MISUSE}") from None
            raise
    tracer.check_previous_refs()
    if not tracer.steps:
        raise WorkflowDefinitionError(f"{where}: no steps were called")
    for trig in triggers:
        problem = trig.problem() if hasattr(trig, "problem") else "not a trigger"
        if problem:
            raise WorkflowDefinitionError(f"{where}: {problem}")
    _check_trigger_identities(where, triggers)
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:
        source = None
    return WorkflowSpec(name=name, description=description or inspect.getdoc(fn),
                        steps=tuple(tracer.steps), triggers=tuple(triggers),
                        max_concurrent_runs=max_concurrent_runs,
                        source_file=os.path.abspath(source) if source else None)


@overload
def workflow(fn: Callable[[], Any], /) -> Workflow: ...


@overload
def workflow(*, name: str | None = None, triggers: Sequence[TriggerSpec] = (),
             description: str | None = None,
             max_concurrent_runs: int | None = None) -> Callable[[Callable[[], Any]], Workflow]: ...


def workflow(fn: Callable[[], Any] | None = None, /, *, name: str | None = None,
             triggers: Sequence[TriggerSpec] = (), description: str | None = None,
             max_concurrent_runs: int | None = None) -> Any:
    """Trace a plain function into a workflow, once, when it is decorated.

    >>> @workflow                                  # doctest: +SKIP
    ... def hello():
    ...     who = shell("who", command="whoami")
    ...     shell("greet", argv=["echo", f"hello {who}"])
    >>> hello().succeeded                          # doctest: +SKIP
    True
    """

    def decorate(f: Callable[[], Any]) -> Workflow:
        spec = _trace(f, name or f.__name__, list(triggers), description, max_concurrent_runs)
        wf = Workflow(f, spec)
        REGISTRY[wf.name] = wf
        return wf

    if fn is not None:
        return decorate(fn)
    return decorate
