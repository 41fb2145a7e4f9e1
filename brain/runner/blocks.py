"""A ``for_each`` block's own work, as the plan hands it out: its expansion (instance rows
committed before any instance starts, then the plan grows a unit per step of each
instance), a step of an instance, and the gathering of each step's list of outputs once
every instance ended. The instances themselves are scheduled by the plan
(:meth:`brain.runner.plan.Plan.grow`), ``max_parallel`` at a time, with every other unit.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from datetime import datetime

from brain._clock import utcnow
from brain.results import StepStatus, base_name
from brain.runner.attempt import StepRunner
from brain.runner.plan import Fail, Skip, Unit
from brain.runner.record import Outcome


async def expand_block(runner: StepRunner, unit: Unit,
                       started: MutableMapping[str, datetime]) -> Outcome:
    """Decide the block as one — skipped, failed once, every step of it skipped as a
    whole — or expand it: its instance rows are committed, then the plan grows its
    instances (``started`` notes when, for the block's own rows)."""
    plan, recorder, group = runner.plan, runner.recorder, unit.group
    assert group is not None
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
    members = [plan.specs[n] for n in group.steps]
    rows = [(f"{m.name}[{i}]", m.kind, m.position)
            for i in range(len(expansion.items)) for m in members]
    await recorder.store.add_steps(recorder.run_id, rows, owner=recorder.owner)
    started[unit.name] = utcnow()
    plan.grow(unit.name, expansion)
    return Outcome(first, True)


async def run_instance_step(runner: StepRunner, unit: Unit) -> Outcome:
    """One step of one instance; one that fails fails its block's row too (the run halts)."""
    outcome = await runner.run(runner.plan.instance_spec(unit), unit.scope)
    if not outcome.ok:
        await runner.recorder.ended([base_name(unit.name)], StepStatus.FAILED,
                                    f"{unit.name} failed: {outcome.error}", emit=False)
    return outcome


async def gather_block(runner: StepRunner, unit: Unit, started: datetime | None) -> Outcome:
    """Every instance ended well: record each step of the block with the JSON list of its
    instances' outputs (a step skipped as a whole, skipped)."""
    plan, recorder, group = runner.plan, runner.recorder, unit.group
    assert group is not None
    block = plan.blocks[unit.name]
    ended = utcnow()
    for member in group.steps:
        if member in block.skipped:
            await runner.skip([member], block.skipped[member])
            continue
        output = plan.block_output(member, block.count)
        await recorder.finished(member, StepStatus.SUCCEEDED, tries=1, ended_at=ended,
                                output=output, inputs={"instances": block.count},
                                started_at=started or ended)
        plan.succeeded(member, output)
    return Outcome(group.steps[0], True)
