"""Worker threads for sync ``@step`` functions: N steps at once get N threads, no job is lost.

No timing assertions: steps that can only finish together (a shared barrier)
prove they ran at the same time.
"""

from __future__ import annotations

import asyncio
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from brain import parallel, step, workflow
from brain.executors import threads
from brain.executors.threads import run_in_thread

# Three sync steps that each wait here; it opens only when all three are inside at once.
_together = threading.Barrier(3, timeout=5)


@step
def meet(label: str) -> str:
    _together.wait()
    return label


def test_sync_steps_in_parallel_run_at_the_same_time() -> None:
    """The issue's case: three sync steps in ``parallel()`` ran one after another."""
    _together.reset()

    @workflow
    def three_at_once() -> None:
        with parallel():
            meet("a")
            meet("b")
            meet("c")

    result = three_at_once()
    assert result.succeeded, {name: s.error for name, s in result.steps.items()}
    assert sorted(str(s.output) for s in result.steps.values()) == ["a", "b", "c"]


async def test_jobs_submitted_in_one_loop_turn_each_get_a_thread() -> None:
    barrier = threading.Barrier(8, timeout=5)
    results = await asyncio.gather(*(run_in_thread(barrier.wait) for _ in range(8)))
    assert sorted(results) == list(range(8))


@settings(max_examples=30, deadline=None)
@given(bursts=st.lists(st.tuples(st.integers(1, 8), st.sampled_from([0.0, 0.0005, 0.002])),
                       min_size=1, max_size=20))
def test_no_job_is_ever_lost_across_submit_and_exit_cycles(bursts: list[tuple[int, float]]) -> None:
    """Idle workers leave; a job submitted as one leaves must still run (every future completes)."""
    saved = threads._MAX_IDLE_WAIT
    threads._MAX_IDLE_WAIT = 0.0005  # workers exit almost at once when idle: many exit races

    async def go() -> None:
        for size, pause in bursts:
            jobs = [run_in_thread(lambda n=n: n * 2) for n in range(size)]
            assert await asyncio.wait_for(asyncio.gather(*jobs), timeout=10) == [n * 2 for n in range(size)]
            await asyncio.sleep(pause)

    try:
        asyncio.run(go())
    finally:
        threads._MAX_IDLE_WAIT = saved
