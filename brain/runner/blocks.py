"""A ``for_each`` block: expanded as the plan says, its instances run, its lists recorded."""

from __future__ import annotations

import asyncio

from brain._clock import utcnow
from brain.dsl.model import ForEachSpec, StepSpec
from brain.results import StepStatus, base_name
from brain.runner.attempt import StepRunner
from brain.runner.plan import Expansion, Fail, Scope, Skip, element_text
from brain.runner.record import Outcome


async def run_block(runner: StepRunner, group: ForEachSpec) -> Outcome:
    """Expand the block (instance rows committed first), run its instances up to
    ``max_parallel`` at once, then record each step's list of outputs."""
    plan, recorder = runner.plan, runner.recorder
    first = group.steps[0]
    expansion = plan.expand(group)
    if isinstance(expansion, Skip):
        return await runner.skip(list(group.steps), expansion.reason)
    if isinstance(expansion, Fail):  # fails the block once, not each instance
        return await runner.fail_before_start(first, expansion.reason)
    if len(expansion.skipped) == len(group.steps):
        # Every step of it skipped as a whole (its own row too, so what reads it after
        # the block is skipped in turn).
        for name, reason in expansion.skipped.items():
            await runner.skip([name], reason)
        return Outcome(first, True)
    count = len(expansion.items)
    members = [plan.specs[n] for n in group.steps]
    rows = [(f"{m.name}[{i}]", m.kind, m.position) for i in range(count) for m in members]
    await recorder.store.add_steps(recorder.run_id, rows, owner=recorder.owner)
    started = utcnow()
    with runner.room.aside():  # its instances count as work on their own
        failed = await _run_instances(runner, group, members, expansion)
    if failed is not None:  # an instance failed: the run halts
        await recorder.ended([base_name(failed.name)], StepStatus.FAILED,
                             f"{failed.name} failed: {failed.error}", emit=False)
        return failed
    ended = utcnow()
    for member in members:
        if member.name in expansion.skipped:
            await runner.skip([member.name], expansion.skipped[member.name])
            continue
        output = plan.block_output(member.name, count)
        await recorder.finished(member.name, StepStatus.SUCCEEDED, tries=1, ended_at=ended,
                                output=output, inputs={"instances": count}, started_at=started)
        plan.succeeded(member.name, output)
    return Outcome(first, True)


async def _run_instances(runner: StepRunner, group: ForEachSpec, members: list[StepSpec],
                         expansion: Expansion) -> Outcome | None:
    """Run every instance of the block (``members``: its steps' specs); the first instance
    that failed, or ``None``."""
    members_set = frozenset(group.steps)
    limit = asyncio.Semaphore(group.max_parallel)

    async def instance(index: int, element: str) -> Outcome | None:
        scope = Scope(index, element, members_set)
        async with limit:
            with runner.room.working():
                return await steps_of(scope)

    async def steps_of(scope: Scope) -> Outcome | None:
        """The block's steps in one instance, in order, until one does not end well."""
        for member in members:
            name = scope.name(member.name)
            if name in runner.plan.outputs:  # finished before a resume
                continue
            spec = member.model_copy(update={"name": name, "instance": scope.index})
            outcome = await runner.run(spec, scope)
            if not outcome.ok:
                return outcome
        return None

    tasks = [asyncio.create_task(instance(i, element_text(item)))
             for i, item in enumerate(expansion.items)]
    try:
        pending: set[asyncio.Task[Outcome | None]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                outcome = task.result()
                if outcome is not None:
                    return outcome
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return None
