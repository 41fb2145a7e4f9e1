"""Cost of a child run (SPEC §22): 1,000 one-step children through ``for_each`` against the
same 1,000 steps inline, on a SQLite file, in one process (``wf.run()``: the children are
executed here, beside the parent). Both runs use the same ``max_parallel``.

Prints both times and the added milliseconds per child; asserts nothing.

    .venv/bin/python bench/children.py [N] [MAX_PARALLEL]

Target: at most 2 ms added per child.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from brain import for_each, step, workflow

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
MAX_PARALLEL = int(sys.argv[2]) if len(sys.argv) > 2 else 8


@step
def double(n: int) -> int:
    return 2 * n


@workflow
def child(n: int) -> int:
    return double(n)


@workflow
def inline() -> None:
    with for_each(list(range(N)), max_parallel=MAX_PARALLEL) as n:
        double(n)


@workflow
def children() -> None:
    with for_each(list(range(N)), max_parallel=MAX_PARALLEL) as n:
        child(n=n)


def timed(wf: object, url: str) -> float:
    start = time.perf_counter()
    result = wf.run(store=url)  # type: ignore[attr-defined]
    took = time.perf_counter() - start
    assert result.succeeded, result.error
    return took


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        timed(inline, url)  # warm up: the schema, the imports
        base = timed(inline, url)
        kids = timed(children, url)
    added = (kids - base) / N * 1000
    print(f"{N} steps inline:          {base:7.2f} s  ({base / N * 1000:.2f} ms each)")
    print(f"{N} one-step child runs:   {kids:7.2f} s  ({kids / N * 1000:.2f} ms each)")
    print(f"added per child:           {added:7.2f} ms  (target: at most 2 ms; "
          f"max_parallel={MAX_PARALLEL})")


if __name__ == "__main__":
    main()
