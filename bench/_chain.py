"""The benchmarks' chain: ``N`` small ``@step`` calls, each taking the one before's output
(``bench/step_overhead.py`` and ``bench/tracing.py`` time it in a fresh process each).

Imported by the child processes those scripts start (their first line puts this folder
on ``sys.path``).
"""

from __future__ import annotations

from brain import step, workflow
from brain.workflow import Workflow


@step
def inc(x: str) -> str:
    """The chain's step: hands its input on."""
    return x


def chain_workflow(n: int) -> Workflow:
    """A workflow ``chain{n}`` of ``n`` :func:`inc` steps in a chain."""

    def chain() -> None:
        node = inc("0")
        for _ in range(n - 1):
            node = inc(node)

    return workflow(name=f"chain{n}")(chain)
