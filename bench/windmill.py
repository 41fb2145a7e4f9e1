"""Windmill's published workflow-engine workload: 40 sequential ``fibo(10)`` tasks, and 10
sequential ``fibo(33)`` tasks, as a workflow of ``@step`` calls.

Windmill (windmill-labs/windmilldocs, "Comparison with other workflow engines", results
for Python) ran it on Airflow, Prefect, Temporal, Kestra, Hatchet and Windmill itself,
each engine from its recommended docker-compose file on an AWS m4.large instance, and
published each flow's total duration. Those figures are printed as they were published,
labelled "published, their hardware": they were not measured here.

Measured here, in the same run, on this machine (``--repeat`` times each; medians):

- **plain Python**: the same calls in a plain loop, no orchestrator (the floor);
- **brain run**: ``brain run flows.py:WORKFLOW --json`` as a process (CLI, embedded
  SQLite file that already exists), wall time of the whole command, and the run's own
  ``started_at`` to ``ended_at``;
- **brain serve**: ``brain serve flows.py`` on 127.0.0.1 with a temporary SQLite file;
  ``POST /api/workflows/WORKFLOW/runs`` with ``{"wait": true}``, timed from the request
  to the run's ``ended_at`` (how much later the answer came is printed apart);
- Prefect and DBOS, in-process, when they are importable in this venv (else the output
  says they are not, and nothing is measured for them).

Each engine's overhead per task is printed against the plain-Python floor of the same
run. Asserts nothing but that every run succeeded.

    .venv/bin/python bench/windmill.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _serve import brain_serve, serve_env  # noqa: E402

#: (workflow name, tasks, fibo argument)
WORKLOADS = [("fibo_40_10", 40, 10), ("fibo_10_33", 10, 33)]

#: Total flow durations in seconds, as published (40 x fibo(10), 10 x fibo(33)), Python,
#: one worker: windmill-labs/windmilldocs, docs/misc/3_benchmarks/competitors/results/python
#: (the study "last run in 2025"; versions from the same pages).
PUBLISHED: list[tuple[str, float, float]] = [
    ("Airflow 2.7.3", 116.221, 54.668),
    ("Kestra 0.22.3", 6.044, 15.786),
    ("Prefect 2.14.4", 4.872, 15.489),
    ("Temporal 2.34.0", 2.967, 7.247),
    ("Hatchet 0.62.0", 1.222, 7.793),
    ("Windmill 1.483.1", 4.383, 8.347),
    ("Windmill 1.483.1, dedicated worker", 2.092, 7.701),
]
PUBLISHED_WHERE = ("published, their hardware: each engine's docker-compose on an AWS m4.large "
                   "instance (windmill-labs/windmilldocs, competitors/results/python)")

FLOWS = '''
from brain import step, workflow


def fibo(n: int) -> int:
    if n <= 1:
        return n
    return fibo(n - 1) + fibo(n - 2)


@step
def fibo_task(n: int) -> int:
    return fibo(n)


@workflow(name="fibo_40_10")
def fibo_40_10():
    for _ in range(40):
        fibo_task(10)


@workflow(name="fibo_10_33")
def fibo_10_33():
    for _ in range(10):
        fibo_task(33)


@workflow(name="warm")
def warm():
    fibo_task(1)
'''

FLOOR = r'''
import sys, time

def fibo(n):
    if n <= 1:
        return n
    return fibo(n - 1) + fibo(n - 2)

tasks, n = int(sys.argv[1]), int(sys.argv[2])
t0 = time.perf_counter()
for _ in range(tasks):
    fibo(n)
print(time.perf_counter() - t0)
'''


def span(started: str, ended: str) -> float:
    """Seconds between two ISO times of a run's JSON."""
    return (datetime.fromisoformat(ended.replace("Z", "+00:00"))
            - datetime.fromisoformat(started.replace("Z", "+00:00"))).total_seconds()


def between_steps(run: dict[str, Any]) -> float:
    """The run's seconds outside its steps: its span minus the time inside steps (the
    orchestration, whatever the CPU time of fibo does on a noisy machine)."""
    inside = sum(span(s["started_at"], s["ended_at"]) for s in run["steps"])
    return span(run["started_at"], run["ended_at"]) - inside


def floor(tasks: int, n: int) -> float:
    """The plain loop, in a fresh interpreter (seconds)."""
    out = subprocess.run([sys.executable, "-c", FLOOR, str(tasks), str(n)], check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip())


def cli(flows: Path, name: str, env: dict[str, str]) -> tuple[float, float, float]:
    """``brain run`` as a process: (wall seconds, the run's own seconds, its seconds outside
    its steps)."""
    brain = str(Path(sys.executable).with_name("brain"))
    t0 = time.perf_counter()
    done = subprocess.run([brain, "run", f"{flows}:{name}", "--json"], env=env,
                          cwd=flows.parent, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"brain run {name} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    run = json.loads(done.stdout)
    return wall, span(run["started_at"], run["ended_at"]), between_steps(run)


def served(url: str, name: str) -> tuple[float, float, float, float]:
    """One run through the API: (request to the run's ``ended_at``, the run's own seconds,
    its seconds outside its steps, how long after ``ended_at`` the ``wait`` answer came)."""
    import httpx

    with httpx.Client(base_url=url, timeout=120) as client:
        t0 = time.time()  # wall clock, to compare with the run's ended_at (same machine)
        answer = client.post(f"/api/workflows/{name}/runs", json={"wait": True})
        run_id = answer.json()["run_id"]
        while answer.status_code == 202:  # over the server's 30 s wait: look until it ends
            time.sleep(0.01)
            answer = client.get(f"/api/runs/{run_id}")
            if answer.json()["status"] in ("succeeded", "failed", "cancelled"):
                break
        answered = time.time()
        run = client.get(f"/api/runs/{run_id}").json()
    if run["status"] != "succeeded":
        sys.exit(f"run {run_id} of {name} {run['status']}: {run.get('error')}")
    ended = datetime.fromisoformat(run["ended_at"].replace("Z", "+00:00")).timestamp()
    return (ended - t0, span(run["started_at"], run["ended_at"]), between_steps(run),
            answered - ended)


def other(engine: str, tasks: int, n: int, tmp: str) -> tuple[float | None, str]:
    """Another engine, in-process, when importable: (seconds or None, a note)."""
    if importlib.util.find_spec(engine) is None:
        return None, "not installed in this venv: not measured"
    done = subprocess.run([sys.executable, str(HERE / "_windmill_others.py"), engine,
                           str(tasks), str(n), tmp], capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"importable, but the measurement failed: {tail}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return float(out["seconds"]), f"{engine} {out['version']}, in-process, second call"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    samples: dict[tuple[str, str], list[float]] = {}

    def add(name: str, key: str, value: float) -> None:
        samples.setdefault((name, key), []).append(value)

    others: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        flows = Path(tmp) / "flows.py"
        flows.write_text(FLOWS)
        env = serve_env(Path(tmp) / "cli.db")
        brain = str(Path(sys.executable).with_name("brain"))
        # The database file exists before the timed runs, as a user's ./brain.db does.
        subprocess.run([brain, "run", f"{flows}:warm"], env=env, cwd=tmp, check=True,
                       capture_output=True)
        for _ in range(args.repeat):  # in turns, so a noisy moment weighs on every figure
            for name, tasks, n in WORKLOADS:
                add(name, "floor", floor(tasks, n))
                for key, value in zip(("cli", "cli run", "cli outside"), cli(flows, name, env),
                                      strict=True):
                    add(name, key, value)
        log = Path(tmp) / "serve.log"
        with brain_serve(flows, serve_env(Path(tmp) / "serve.db"), log) as url:
            served(url, "warm")
            for _ in range(args.repeat):
                for name, _, _ in WORKLOADS:
                    for key, value in zip(("serve", "serve run", "serve outside", "serve lag"),
                                          served(url, name), strict=True):
                        add(name, key, value)
        for engine in ("prefect", "dbos"):
            for name, tasks, n in WORKLOADS:
                seconds, others[engine] = other(engine, tasks, n, tmp)
                if seconds is not None:
                    add(name, engine, seconds)
    got = {key: statistics.median(values) for key, values in samples.items()}

    print(f"Windmill's workload, Python, one worker. Measured here: median of {args.repeat}, "
          f"{os.cpu_count()} CPU cores, shared. Rows marked * are {PUBLISHED_WHERE}: not "
          f"measured here.")
    for index, (name, tasks, n) in enumerate(WORKLOADS):
        base = got[(name, "floor")]

        def per_task(seconds: float, base: float = base, tasks: int = tasks) -> str:
            return f"{(seconds - base) / tasks * 1000:.1f} ms"

        print(f"\n{tasks} sequential tasks of fibo({n})\n")
        print("| engine | seconds | its run alone (started_at to ended_at) | over the floor, "
              "per task | run time outside its steps, per task |")
        print("|---|---|---|---|---|")
        print(f"| plain Python loop (floor, this run) | {base:.3f} | | | |")
        for key, label in (("cli", "brain run (CLI process, embedded SQLite)"),
                           ("serve", "brain serve (HTTP request to the run's ended_at, SQLite)")):
            seconds, run, outside = (got[(name, key)], got[(name, f"{key} run")],
                                     got[(name, f"{key} outside")])
            print(f"| {label} | {seconds:.3f} | {run:.3f} | {per_task(seconds)} | "
                  f"{outside / tasks * 1000:.1f} ms |")
        for engine, note in others.items():
            if (name, engine) in got:
                print(f"| {note} | {got[(name, engine)]:.3f} | | {per_task(got[(name, engine)])} "
                      f"| |")
        for engine, light, heavy in PUBLISHED:
            print(f"| * {engine} | {(light, heavy)[index]:.3f} | | | |")
    print()
    lags = ", ".join(f"{tasks} x fibo({n}) {got[(name, 'serve lag')] * 1000:.0f} ms"
                     for name, tasks, n in WORKLOADS)
    print(f"brain serve: the answer to {{\"wait\": true}} came this long after the run's "
          f"ended_at (median): {lags}")
    for engine, note in others.items():
        if not note.startswith(engine):
            print(f"{engine}: {note}")
    print("Windmill's pages give fibo(10) ~10 ms in their setup; in a plain loop here it takes "
          "microseconds. Their per-task figures include how each engine runs a task (a new "
          "process per task in Windmill's normal mode and Kestra's Process runner, say their "
          "pages); a @step runs in a thread of the executing process. For fibo(33), the time "
          "inside the steps moves with this shared machine's load; the last column is the "
          "orchestration alone.")


if __name__ == "__main__":
    main()
