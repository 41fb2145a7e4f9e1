"""Letting go of a run whose steps all wait (SPEC §16): never while a wait that ended has
work to hand on, whenever that wait ended (here: between the last look and the letting
go, the narrowest place)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from brain import approval, parallel, shell, workflow
from brain.results import RunStatus, StepStatus
from brain.store import Store


@workflow
def two_gates() -> None:
    with parallel():
        a = approval("a", prompt="A?")
        approval("b", prompt="B?")
        shell("after_a", argv=["echo", f"a said {a}"])


class DecidesBeforeLettingGo(Store):
    """A store on which step ``a`` is approved (by someone else) just before the executor's
    first attempt to let go of the run: the attempt must fail and ``a``'s end be handed on."""

    decided = False

    async def park_run(self, run_id: str, owner: str, wakes: int) -> bool:
        if not self.decided:
            self.decided = True
            await self.decide(run_id, "a", approved=True, by="api")
        return await super().park_run(run_id, owner, wakes)


async def _waiting_for(store: Store, run_id: str, step: str) -> None:
    for _ in range(400):
        run = await store.get_run(run_id)
        if run.status == RunStatus.WAITING and run.steps[step].status == StepStatus.WAITING:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"run never waited on {step}: {run.status}")


async def test_a_wait_that_ended_just_before_the_letting_go_is_handed_on(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = DecidesBeforeLettingGo(url)
    async with store:
        running: asyncio.Task[Any] = asyncio.create_task(two_gates.arun(store=store,
                                                                        on_wait=lambda *_: None))
        async with Store(url) as other:
            for _ in range(400):
                runs = await other.list_runs(workflow="two_gates")
                if runs:
                    break
                await asyncio.sleep(0.05)
            run_id = runs[0].run_id
            await _waiting_for(other, run_id, "b")
            run = await other.get_run(run_id)
            # a's end was handed on before the run was let go of: its dependant ran
            assert run.steps["a"].status == StepStatus.SUCCEEDED
            assert run.steps["after_a"].status == StepStatus.SUCCEEDED
            assert run.steps["after_a"].output == "a said true"
            await other.decide(run_id, "b", approved=False, by="cli")
        result = await asyncio.wait_for(running, 60)
    assert store.decided
    assert result.status == RunStatus.SUCCEEDED
    assert result.steps["b"].output == "false"
    assert result.steps["b"].decision is not None and result.steps["b"].decision["by"] == "cli"
