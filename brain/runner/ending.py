"""How a run ends: one row of a small table per kind of end, and one writer for all.

Every step ends in a final status, then the run, in that order; a failed run
queues its failure handlers in the same write as its end.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from brain.dsl.model import WorkflowSpec
from brain.dsl.output import resolve_output
from brain.results import RunStatus, StepStatus
from brain.runner.record import Outcome, Recorder
from brain.store.base import QueuedRun

#: ``(error, failed step, its error) -> runs to queue``: the failure handlers' runs.
FailureRuns = Callable[[str, str | None, str | None], list[QueuedRun]]


@dataclass(frozen=True)
class StepsEnd:
    """Steps that end in one status, with one error text (``None``: none)."""

    names: tuple[str, ...]
    status: StepStatus
    error: str | None = None


@dataclass(frozen=True)
class End:
    """One kind of run end: what its steps become, then the run."""

    run: RunStatus
    error: str | None = None
    steps: tuple[StepsEnd, ...] = ()
    #: The status (and error) of ``for_each`` instances left unfinished, if the run has blocks.
    instances: tuple[StepStatus, str | None] | None = None
    #: ``(failed step, its error)`` when the failure handlers are queued with the end.
    failed_step: tuple[str | None, str | None] | None = None
    #: Whether each of ``steps`` gets its event once the run has ended.
    emit: bool = True
    #: What the workflow returned (JSON text), for a run that succeeded (SPEC §21).
    output: str | None = None


def end_of(stopped: list[str], unstarted: list[str], failure: Outcome | None,
           missing: list[str], cancel_reason: str) -> End:
    """The end of a run whose work stopped: ``stopped`` steps were cut off while running,
    ``unstarted`` never began, ``failure`` is the first failure (if any) and ``missing``
    the steps that neither succeeded nor were skipped."""
    not_started = tuple(n for n in unstarted if n not in stopped)
    if failure is not None:
        reason = f"step {failure.name!r} failed: {failure.error}"
        because = f"cancelled because {reason}"
        return End(RunStatus.FAILED, reason,
                   (StepsEnd(tuple(stopped), StepStatus.CANCELLED, because),
                    StepsEnd(not_started, StepStatus.SKIPPED)),
                   instances=(StepStatus.SKIPPED, because),
                   failed_step=(failure.name, failure.error))
    if stopped or not_started:
        return End(RunStatus.CANCELLED, cancel_reason,
                   (StepsEnd((*stopped, *not_started), StepStatus.CANCELLED, cancel_reason),),
                   instances=(StepStatus.CANCELLED, cancel_reason))
    if missing:  # never "succeeded" with a step that did not succeed
        reason = f"internal error: steps {', '.join(map(repr, missing))} never finished"
        return End(RunStatus.FAILED, reason, (StepsEnd(tuple(missing), StepStatus.FAILED, reason),),
                   failed_step=(missing[0], reason), emit=False)
    # Instances a resume or a retry put back to pending inside a block that had already
    # finished (they were skipped there): they stay skipped.
    return End(RunStatus.SUCCEEDED, instances=(StepStatus.SKIPPED, None))


def with_output(end: End, spec: WorkflowSpec, outputs: Mapping[str, str],
                params: Mapping[str, Any], secrets: Callable[[Any], Any]) -> End:
    """A succeeded run's end with what its workflow returned (resolved from the steps'
    outputs and the parameters, validated against the return type, secrets scrubbed by
    ``secrets``); a failed end when it does not validate (SPEC §21)."""
    if end.run is not RunStatus.SUCCEEDED or spec.output is None:
        return end
    in_blocks = {name for group in spec.groups for name in group.steps}
    value = resolve_output(spec.output, {s.name: s for s in spec.steps}, outputs, params,
                           in_blocks.__contains__)
    try:
        value = spec.params.validate_output(value)
    except ValueError as exc:
        return End(RunStatus.FAILED, str(exc), failed_step=(None, None), emit=False)
    return replace(end, output=json.dumps(secrets(value), ensure_ascii=False,
                                          separators=(",", ":")))


async def write_end(end: End, recorder: Recorder, failures: list[Outcome], *, has_blocks: bool,
                    failure_runs: FailureRuns) -> RunStatus:
    """Write ``end``: failures not written with their step first, then each row's steps,
    the block instances left, and the run (with its failure handlers' runs)."""
    store, run_id, owner = recorder.store, recorder.run_id, recorder.owner
    await recorder.write_cut_off()
    for failed in failures:
        if not failed.recorded:  # an orchestrator error kept the step's own write from happening
            await recorder.ended([failed.name], StepStatus.FAILED, failed.error, emit=False)
    for steps in end.steps:
        await recorder.ended(list(steps.names), steps.status, steps.error, emit=False)
    if has_blocks and end.instances is not None:
        status, error = end.instances
        await store.end_unfinished_steps(run_id, pending=status, error=error, owner=owner)
    then_queue: list[QueuedRun] = []
    if end.failed_step is not None:
        then_queue = failure_runs(end.error or "failed", *end.failed_step)
    await store.finish_run(run_id, end.run, end.error, owner=owner, then_queue=then_queue,
                           output=end.output)
    if end.emit:
        for steps in end.steps:
            recorder.emit_all(steps.names, str(steps.status))
    return end.run
