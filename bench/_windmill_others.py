"""Windmill's workload on another Python engine, in this process: ``bench/windmill.py`` runs
it only when that engine is importable, and prints what it measured or why it could not.

    python bench/_windmill_others.py prefect|dbos TASKS FIBO_N WORKDIR

Prints one JSON object: ``{"seconds": flow call wall time, "version": ...}``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def fibo(n: int) -> int:
    return n if n <= 1 else fibo(n - 1) + fibo(n - 2)


def prefect(tasks: int, n: int, workdir: Path) -> dict[str, object]:
    import prefect as pf  # type: ignore[import-not-found]
    from prefect import flow, task  # type: ignore[import-not-found]

    @task
    def fibo_task(k: int) -> int:
        return fibo(k)

    @flow(name=f"bench_{tasks}")
    def bench() -> None:
        for _ in range(tasks):
            fibo_task(n)

    bench()  # the first call starts Prefect's local API: not counted
    t0 = time.perf_counter()
    bench()
    return {"seconds": time.perf_counter() - t0, "version": pf.__version__}


def dbos(tasks: int, n: int, workdir: Path) -> dict[str, object]:
    from importlib.metadata import version

    from dbos import DBOS  # type: ignore[import-not-found]

    DBOS(config={"name": "windmill_bench",  # type: ignore[typeddict-item]
                 "system_database_url": f"sqlite:///{workdir / 'dbos.sqlite'}"})

    @DBOS.step()
    def fibo_step(k: int) -> int:
        return fibo(k)

    @DBOS.workflow()
    def bench() -> None:
        for _ in range(tasks):
            fibo_step(n)

    DBOS.launch()
    try:
        bench()  # warm-up: not counted
        t0 = time.perf_counter()
        bench()
        seconds = time.perf_counter() - t0
    finally:
        DBOS.destroy()
    return {"seconds": seconds, "version": version("dbos")}


def main() -> None:
    engine, tasks, n, workdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    measure = {"prefect": prefect, "dbos": dbos}[engine]
    print(json.dumps(measure(tasks, n, workdir)))


if __name__ == "__main__":
    main()
