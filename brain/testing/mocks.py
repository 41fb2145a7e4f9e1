"""``run_workflow``: run a workflow with mocked steps on a SQLite database in memory.

The real runner and the real placeholder rules run; only the steps' work is
replaced. A mocked step's inputs are resolved exactly as a real run would
send them (each executor's own ``prepare``), then the mock answers instead of
the process, the HTTP call or the MCP server.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import Field

from brain._errors import StepFailed
from brain.dsl.model import WAIT_KINDS, LlmStepSpec
from brain.executors import Executor, default_executors
from brain.executors.base import PreparedStep, Resolve, StepContext, StepOutput
from brain.executors.function import output_text
from brain.executors.llm_schema import checked_answer
from brain.results import RunResult, base_name
from brain.runner.queueing import failure_of

if TYPE_CHECKING:
    from brain.store.base import RunStore
    from brain.workflow import Workflow

KINDS = ("shell", "llm", "mcp_tool", "step", "sleep", "approval", "wait_for")
#: A mock: the step's output — text, or any JSON-serialisable value, stored as a ``@step``'s
#: return value is (``None`` as ``""``, a list or dict as its JSON text) — or a callable
#: that gets the :class:`MockCall` and returns such a value (or raises).
Mock = Callable[["MockCall"], Any] | Callable[["MockCall"], Awaitable[Any]] | Any


@dataclass(frozen=True)
class MockCall:
    """What a mock receives, and what the result records: one try of one step."""

    name: str
    kind: str
    inputs: dict[str, Any]
    try_number: int
    #: Which instance of a ``for_each`` block this is (``None`` outside one). ``name`` is
    #: the step's own name, the same for every instance.
    index: int | None = None


class MockedRunResult(RunResult):
    """A :class:`RunResult` plus ``calls`` (each mocked step's calls, tries included) and
    ``failure_runs`` (the runs of ``on_failure`` workflows the run's failure queued; they
    are queued, not run)."""

    calls: dict[str, list[MockCall]] = Field(default_factory=dict)
    failure_runs: list[RunResult] = Field(default_factory=list)


@dataclass
class _Mocking:
    mocks: Mapping[str, Mock]
    step_names: frozenset[str]
    strict: bool
    calls: dict[str, list[MockCall]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def mock_for(self, name: str, kind: str) -> Mock | None:
        name = base_name(name)  # a mock by step name applies to every for_each instance
        if name in self.mocks:
            return self.mocks[name]
        if kind in self.mocks and kind not in self.step_names:
            return self.mocks[kind]
        return None


class _MockingExecutor:
    """Wraps a real executor: real ``prepare``; the mock (or, unless strict, the real work)."""

    def __init__(self, real: Executor, mocking: _Mocking) -> None:
        self.real = real
        self.kind = real.kind
        self.mocking = mocking

    def prepare(self, spec: Any, resolve: Resolve, *, mocked: bool = False) -> PreparedStep:
        is_mocked = self.mocking.mock_for(spec.name, spec.kind) is not None
        if not is_mocked and self.mocking.strict and spec.kind not in WAIT_KINDS:
            raise _not_mocked(spec)
        prepared = self.real.prepare(spec, resolve, mocked=is_mocked)
        prepared.limited = not is_mocked  # a mock reaches no provider: no rate limit to wait for
        return prepared

    async def execute(self, spec: Any, prepared: PreparedStep, ctx: StepContext) -> StepOutput:
        mock = self.mocking.mock_for(spec.name, spec.kind)
        if mock is None:
            if self.mocking.strict and spec.kind not in WAIT_KINDS:
                raise _not_mocked(spec)
            return await self.real.execute(spec, prepared, ctx)
        index = getattr(spec, "instance", None)
        with self.mocking.lock:
            calls = self.mocking.calls.setdefault(base_name(spec.name), [])
            tries = sum(1 for c in calls if c.index == index)
            call = MockCall(base_name(spec.name), spec.kind, dict(prepared.inputs), tries + 1,
                            index)
            calls.append(call)
        if not callable(mock):
            return StepOutput(output=_checked(spec, output_text(mock)))
        value = mock(call)
        if inspect.isawaitable(value):
            value = await value
        return StepOutput(output=_checked(spec, output_text(value)))

    async def close(self) -> None:
        close = getattr(self.real, "close", None)
        if close is not None:
            await close()


def _checked(spec: Any, output: str) -> str:
    """A mock's output as the real step would give it: an ``llm()`` step with a schema
    (SPEC §18) gives the validated answer's compact JSON, and a mock that does not match
    the schema fails the step."""
    if not isinstance(spec, LlmStepSpec) or spec.output_schema is None:
        return output
    checked, reason = checked_answer(spec, output)
    if checked is None:
        raise StepFailed(f"the mock of step {base_name(spec.name)!r} does not match its schema: "
                         f"{reason}", retryable=False)
    return checked


def _not_mocked(spec: Any) -> StepFailed:
    name = base_name(spec.name)
    return StepFailed(f"step {name!r} ({spec.kind}) is not mocked and strict=True: "
                      f"add mocks={{{name!r}: ...}}", retryable=False)


def _check_mocks(wf: Workflow, mocks: Mapping[str, Mock]) -> frozenset[str]:
    names = frozenset(s.name for s in wf.spec.steps)
    for key, mock in mocks.items():
        if key not in names and key not in KINDS:
            raise ValueError(f"mock key {key!r} names no step of workflow {wf.name!r} and no step "
                             f"kind ({', '.join(KINDS)}); its steps are: {', '.join(sorted(names))}")
        if not callable(mock):
            try:
                output_text(mock)
            except StepFailed:
                raise TypeError(f"mock {key!r} must be the output (a string or a "
                                f"JSON-serialisable value) or a callable, not "
                                f"{type(mock).__name__}") from None
    return names


async def arun_workflow(wf: Workflow, trigger: object = None, *,
                        mocks: Mapping[str, Mock] | None = None, strict: bool = False,
                        previous: Mapping[str, str] | None = None,
                        store: RunStore | None = None,
                        params: Mapping[str, Any] | None = None) -> MockedRunResult:
    """Async form of :func:`run_workflow`."""
    from brain.runner import run_workflow_now
    from brain.store import Store
    from brain.store.urls import MEMORY_URL

    wf.validate_params(params)  # as every entry point: before anything is opened or stored
    mocks = dict(mocks or {})
    mocking = _Mocking(mocks, _check_mocks(wf, mocks), strict)
    executors = {kind: _MockingExecutor(real, mocking) for kind, real in default_executors().items()}
    own = store is None
    st: RunStore = store if store is not None else Store(MEMORY_URL)
    if not st.is_open:
        await st.open()
    try:
        result = await run_workflow_now(wf, trigger, store=st, executors=executors,
                                        previous_outputs=None if previous is None else dict(previous),
                                        params=params)
        queued = [r for r in await st.list_runs(status="queued", event="failure", limit=1000)
                  if (failure_of(r) or {}).get("run_id") == result.run_id]
    finally:
        if own:
            await st.close()
    return MockedRunResult(**dict(result), calls=mocking.calls, failure_runs=queued)


def run_workflow(wf: Workflow, trigger: object = None, *, mocks: Mapping[str, Mock] | None = None,
                 strict: bool = False, previous: Mapping[str, str] | None = None,
                 store: RunStore | None = None,
                 params: Mapping[str, Any] | None = None) -> MockedRunResult:
    """Run ``wf`` with the real runner and the real store on a new SQLite database in
    memory (``sqlite:///:memory:``, thrown away after the run), with mocked steps.

    ``mocks`` maps a step name — or a kind, ``"shell"``, ``"llm"``,
    ``"mcp_tool"``, ``"step"``, for every step of that kind — to the output,
    or to a callable that gets a :class:`MockCall` and returns the output (or
    raises to fail the step; retries and halting then behave as in a real
    run). An output is stored as a ``@step``'s return value is: a string as
    is, ``None`` as ``""``, anything else (a list, a dict, a number) as its
    JSON text. A mock of an ``llm()`` step with ``schema=`` is validated as a real
    answer would be: its output is the validated value's compact JSON, and a mock that
    does not match fails the step. Unmocked steps run for real unless ``strict=True``.
    ``previous`` seeds ``{previous.X}``. ``params`` are the workflow's parameters,
    validated as every way of starting a run does (:class:`~brain.WorkflowInputError`);
    the result's ``output`` is what the workflow returned.

    >>> r = run_workflow(daily_digest, trigger={"body": "db outage"},    # doctest: +SKIP
    ...                  mocks={"recall": "memo A", "llm": "short"})
    >>> r.steps["fast"].inputs["prompt"]                                  # doctest: +SKIP
    'Two sentences: memo A'
    """
    from brain._sync import run_sync

    return run_sync(arun_workflow(wf, trigger, mocks=mocks, strict=strict, previous=previous,
                                  store=store, params=params), thread_name="brain-run-workflow")
