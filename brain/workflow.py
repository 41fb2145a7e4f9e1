"""``@workflow`` and the callable :class:`Workflow` it returns: a traced spec you can run.

This sits above the runner: the DSL (:mod:`brain.dsl`) only traces a function
into a plain :class:`~brain.dsl.model.WorkflowSpec`; running it, now or through
a queue, is added here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, overload

from brain._errors import WorkflowDefinitionError
from brain._secrets import declare_secret_names, remember
from brain.dsl.cost import Limit
from brain.dsl.fingerprint import WorkflowPrint, fingerprint, workflow_version
from brain.dsl.model import WorkflowGraph, WorkflowSpec
from brain.dsl.trace import trace_workflow
from brain.dsl.tracing import current_tracer
from brain.dsl.triggers import TriggerSpec
from brain.results import RunResult, TriggerData

if TYPE_CHECKING:
    from brain.runner.events import EventHandler, LogHandler
    from brain.runner.now import WaitHandler
    from brain.runner.observe import RunObserver
    from brain.store.base import RunStore


#: The keyword arguments of a run (``wf(...)``); any other keyword is a parameter.
_RUN_OPTIONS = frozenset({"trigger", "store", "on_event", "on_log", "on_wait", "observers",
                          "params"})


class Workflow:
    """A traced workflow. Call it to run it: ``result = wf(service="api")`` passes its
    parameters by name (``wf(trigger={"body": "..."})`` gives the trigger)."""

    def __init__(self, fn: Callable[..., Any], spec: WorkflowSpec,
                 failure_handlers: Sequence[Workflow] = ()) -> None:
        self.fn = fn
        self.spec = spec
        self.name = spec.name
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.source_dir = os.path.dirname(spec.source_file) if spec.source_file else os.getcwd()
        self.definition_hash = spec.definition_hash()
        #: ``on_failure=``: workflows queued, in the same transaction, when a run fails.
        self.failure_handlers: tuple[Workflow, ...] = tuple(failure_handlers)

    def __repr__(self) -> str:
        return f"<Workflow {self.name!r}: {len(self.spec.steps)} steps>"

    @cached_property
    def fingerprint(self) -> WorkflowPrint:
        """What each step does (SPEC §24), computed once for this loaded definition: what a
        run stores, and what a run that goes on after a change is checked against."""
        return fingerprint(self.spec)

    @cached_property
    def version(self) -> str | None:
        """The version of its file as loaded (its content's digest, and the git commit
        when in a repository; see :func:`brain.dsl.fingerprint.workflow_version`), read
        once."""
        return workflow_version(self.spec.source_file)

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

    @property
    def params_schema(self) -> dict[str, Any]:
        """The JSON Schema of its parameters (an object, one property per parameter)."""
        return self.spec.params_schema

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of its return annotation, or ``None`` without one."""
        return self.spec.output_schema

    def validate_params(self, raw: Mapping[str, Any] | None) -> dict[str, Any]:
        """``raw`` validated against the parameters, defaults applied, as JSON values;
        :class:`~brain.WorkflowInputError` when they do not validate."""
        return self.spec.params.validate(raw)

    async def arun(self, trigger: object = None, *, store: RunStore | str | None = None,
                   on_event: EventHandler | None = None, on_log: LogHandler | None = None,
                   on_wait: WaitHandler | None = None,
                   observers: Sequence[RunObserver] = (),
                   params: Mapping[str, Any] | None = None) -> RunResult:
        """Run now and wait for the result (async form of calling the workflow).

        ``params``: the workflow's parameters, validated (defaults applied) before anything
        is recorded (:class:`~brain.WorkflowInputError` when they do not validate).

        The run is recorded in ``store`` (a :class:`brain.store.Store` or a
        database URL), else in ``BRAIN_DATABASE_URL``. ``on_event`` is told of every
        step's change of status, ``on_log`` of new lines of steps' logs. A run whose
        steps wait (``sleep``, ``approval``, ``wait_for``) is waited for here until it
        ends; ``on_wait`` is told what it waits for (by default, a log line).
        ``observers`` (:class:`brain.runner.observe.RunObserver`) are told of the run's
        start and end and of every step's events. Settings (``BRAIN_LEASE_SECONDS``,
        ``LLM_MODEL``...) are read from the environment now, once, for this run.
        """
        from brain.runner import run_workflow_now
        from brain.runner.context import RunContext

        self.validate_params(params)  # before the environment or any store is read
        context = RunContext.from_environment(observers=observers)
        return await run_workflow_now(self, trigger, store=store, on_event=on_event,
                                      on_log=on_log, on_wait=on_wait, context=context,
                                      params=params)

    async def enqueue(self, body: object = None, *, headers: dict[str, str] | None = None,
                      params: Mapping[str, Any] | None = None) -> str:
        """Queue a run for the executors and return its id (committed before this returns).

        ``params`` are validated before anything is queued (:class:`~brain.
        WorkflowInputError`).

        Inside a process serving this workflow (``brain serve``, ``brain worker``
        or a host app with ``BrainPlugin``) the run goes to that service's queue;
        otherwise it is written to ``BRAIN_DATABASE_URL`` for a running ``brain
        serve`` or ``brain worker`` to take.
        """
        from brain.runner.queueing import enqueue_here_or_there

        trigger = TriggerData.from_input({"body": body, "headers": headers or {}}, event="manual")
        return await enqueue_here_or_there(self, trigger, trigger_key="api", params=params)

    async def enqueue_many(self, runs: Iterable[object]) -> list[str]:
        """Queue a run per item of ``runs`` in one transaction and return their ids, in order
        (all committed before this returns, or none: a full queue refuses the whole batch).

        An item is a body, as :meth:`enqueue` takes it, or a dict whose only keys are
        ``body``, ``headers`` and ``params`` (``{"params": {"service": "api"}}``). Every
        item's parameters are validated before any run is queued (a
        :class:`~brain.WorkflowInputError` whose ``loc`` starts with the item's index).
        Inside a process serving this workflow the runs go to that service's queue, one by
        one.
        """
        from brain.runner.queueing import enqueue_many_here_or_there

        if isinstance(runs, (str, bytes, Mapping)):
            raise TypeError("enqueue_many() takes a list of bodies (or of dicts with body, "
                            f"headers and params), not a {type(runs).__name__}")
        items = [_queued_input(item) for item in runs]
        triggers = [TriggerData.from_input({"body": i["body"], "headers": i["headers"]},
                                           event="manual") for i in items]
        return await enqueue_many_here_or_there(self, triggers, trigger_key="api",
                                                params=[i["params"] for i in items])

    def run(self, trigger: object = None, *, store: RunStore | str | None = None,
            on_event: EventHandler | None = None, on_log: LogHandler | None = None,
            on_wait: WaitHandler | None = None,
            observers: Sequence[RunObserver] = (),
            params: Mapping[str, Any] | None = None) -> RunResult:
        """Run now and return the :class:`RunResult`; works inside a running event loop too
        (see :meth:`arun`)."""
        if current_tracer() is not None:
            raise WorkflowDefinitionError(
                f"workflow {self.name!r}.run() was called while tracing another workflow: "
                f"call it as {self.name}(name=value, ...) to record a child run")
        self.validate_params(params)  # raised here, in the caller's thread
        from brain._sync import run_sync

        return run_sync(self.arun(trigger, store=store, on_event=on_event, on_log=on_log,
                                  on_wait=on_wait, observers=observers, params=params),
                        thread_name=f"brain-run-{self.name}")

    def __str__(self) -> str:
        """While another workflow is traced, ``f"{summarize}"`` is the placeholder of its
        step named like this workflow (SPEC §22): ``{summarize}``."""
        if current_tracer() is not None:
            from brain.dsl.children import placeholder

            return placeholder(self)
        return repr(self)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def with_options(self, **options: Any) -> Callable[..., Any]:
        """Options for this workflow called as a child run (SPEC §22), as ``@step`` takes
        them: ``summarize.with_options(name="sum", timeout_seconds=600, retries=1)(url=u)``
        (``name``, ``timeout_seconds``, ``retries``, ``retry_delay_seconds``)."""
        from brain.dsl.children import with_options

        return with_options(self, lambda **params: self(**params), **options)

    def __call__(self, trigger: object = None, *, store: RunStore | str | None = None,
                 on_event: EventHandler | None = None, on_log: LogHandler | None = None,
                 on_wait: WaitHandler | None = None, observers: Sequence[RunObserver] = (),
                 params: Mapping[str, Any] | None = None, **kwargs: Any) -> RunResult:
        """Run now, as :meth:`run`: ``deploy(service="api", dry_run=True)`` passes the
        parameters by name (a parameter named like an option of :meth:`run` goes in
        ``params={...}``). Called while another workflow is traced, it records a child-run
        step instead (SPEC §22) and returns its output's node."""
        if current_tracer() is not None:
            from brain.dsl.children import child_step

            return child_step(self, _merged_params(params, kwargs) or {})  # type: ignore[return-value]
        return self.run(trigger, store=store, on_event=on_event, on_log=on_log,
                        on_wait=on_wait, observers=observers,
                        params=_merged_params(params, kwargs))


def _merged_params(params: Mapping[str, Any] | None,
                   named: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``params={...}`` and parameters given by name, together (each name once)."""
    if not named:
        return params
    both = set(named) & set(params or {})
    if both:
        raise TypeError(f"parameter {sorted(both)[0]!r} is given twice (by name and in params=)")
    return {**(params or {}), **named}


def _queued_input(item: object) -> dict[str, Any]:
    """An item of :meth:`Workflow.enqueue_many` as a trigger's fields and parameters: a dict
    of only ``body``/``headers``/``params`` gives them, anything else is the body."""
    if isinstance(item, Mapping) and item and set(item) <= {"body", "headers", "params"}:
        headers = item.get("headers") or {}
        if not isinstance(headers, Mapping):
            raise TypeError(f"headers must be a dict, not {type(headers).__name__}")
        return {"body": item.get("body"), "headers": headers, "params": item.get("params")}
    return {"body": item, "headers": {}, "params": None}


@overload
def workflow(fn: Callable[..., Any], /) -> Workflow: ...


@overload
def workflow(*, name: str | None = None, triggers: Sequence[TriggerSpec] = (),
             description: str | None = None, max_concurrent_runs: int | None = None,
             concurrency_key: str | None = None, on_failure: Sequence[Workflow] = (),
             mcp: bool = False, limits: Mapping[str, Limit] | None = None
             ) -> Callable[[Callable[..., Any]], Workflow]: ...


def workflow(fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
             triggers: Sequence[TriggerSpec] = (), description: str | None = None,
             max_concurrent_runs: int | None = None, concurrency_key: str | None = None,
             on_failure: Sequence[Workflow] = (), mcp: bool = False,
             limits: Mapping[str, Limit] | None = None) -> Any:
    """Trace a plain function into a workflow, once, when it is decorated.

    >>> @workflow                                  # doctest: +SKIP
    ... def hello():
    ...     who = shell("who", command="whoami")
    ...     shell("greet", argv=["echo", f"hello {who}"])
    >>> hello().succeeded                          # doctest: +SKIP
    True

    ``max_concurrent_runs=N``: at most N runs execute at once (queued runs wait);
    with ``concurrency_key="{trigger.headers.x-repo}"`` the limit counts only runs whose
    key resolved to the same text when they were queued (SPEC §19).

    ``limits={"openai": Limit(requests=60, tokens=90_000, per="1m")}``: rate limits its
    steps name with ``limit="openai"`` (SPEC §26), shared by name with every workflow and
    process using the same database (a module-level ``limit(...)`` declares one for all).

    ``on_failure=[other, ...]``: when a run finally fails, a run of each of these
    workflows is queued in the same transaction, with ``trigger.event ==
    "failure"`` and the failed run as a JSON body (``run_id``, ``workflow``,
    ``error``, ``failed_step``, ``failed_step_error``).

    ``mcp=True``: The Brain's MCP server (``/mcp`` on ``brain serve``, ``brain mcp serve``)
    offers the workflow as a tool named after it, its parameters the tool's input (SPEC
    §23). Nothing is offered unless it says so.
    """

    given: Any = on_failure
    handlers: list[Workflow] = list(given) if isinstance(given, (list, tuple)) else [given]
    for handler in handlers:
        if not isinstance(handler, Workflow):
            raise WorkflowDefinitionError(
                f"workflow {name or getattr(fn, '__name__', '?')!r}: on_failure takes "
                f"workflows (decorated with @workflow), not {type(handler).__name__}")
        if handler.spec.params.required:
            raise WorkflowDefinitionError(
                f"workflow {name or getattr(fn, '__name__', '?')!r}: on_failure handler "
                f"{handler.name!r} has required parameters "
                f"({', '.join(handler.spec.params.required)}), which a failure cannot supply: "
                f"give them defaults")

    def decorate(f: Callable[..., Any]) -> Workflow:
        spec = trace_workflow(f, name or f.__name__, list(triggers), description,
                              max_concurrent_runs, concurrency_key, mcp=mcp, limits=limits)
        # What this workflow declares secret is kept from every step of every workflow
        # in this process, and scrubbed from all that is stored.
        names, literals = spec.declared_secrets
        declare_secret_names(names)
        for literal in literals:
            remember(literal)
        # A handler named twice still gets one run per failure.
        return Workflow(f, spec, list({h.name: h for h in handlers}.values()))

    if fn is not None:
        return decorate(fn)
    return decorate
