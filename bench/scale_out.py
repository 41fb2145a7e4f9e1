"""Scale-out: runs whose step sleeps 0.5 s, drained by 1, 2 and 4 ``brain worker`` processes
on PostgreSQL; and how soon an idle worker picks up a run another process queued.

SPEC §19. The work waits rather than computes, so what more workers add is slots:

- **Drain.** For each worker count, a fresh database; the workers
  (``brain worker flows.py --concurrency 4``, separate processes) are started and
  ready (start-up line written) first. Then a separate host-app process
  (``bench/_scale_enqueue.py``) queues ``--runs`` (default 200) one-step runs, one
  transaction each, 8 in flight (``--enqueue``: ``shared``, the default, opens the
  database once and queues through ``brain.runner.queueing.enqueue``, which
  ``wf.enqueue()`` calls; ``wf`` calls ``await wf.enqueue()``, which opens and closes the
  database every time and so costs the host app ~10 ms of CPU per run). The figure is
  the time from the first run's ``created_at`` to the last run's ``ended_at``, read from
  the database; every run must succeed. Printed side by side, with each count's speed-up
  over one worker (target: 4 workers at least 3.5x one) and the ideal (ceil(runs / slots)
  rounds of 0.5 s, with no orchestration at all).
- **Pickup latency.** One idle worker; the host app queues 20 runs one at a time, each
  after the previous one ended and a random 0.3-1.3 s pause. Latency = the wall clock
  the step itself records when it starts (``time.time()``) minus the moment the
  enqueue returned, after its commit (a lower bound; with ``--enqueue wf`` the call
  also closes its connection after the commit); and, as an upper bound, minus the run's
  ``created_at`` (stamped by the enqueuer just before its insert). Prints the median
  and p95 of both (target: 50 ms at the median on PostgreSQL).

The step (``--step``): ``python`` (default) is a ``@step`` doing ``time.sleep(0.5)``
in a thread, which stresses the queue (claims, leases, step records) and spawns no
process; ``shell`` is ``shell("nap", command="sleep 0.5")`` (and ``date +%s.%N`` for
the latency), which adds a fork/exec per run on this machine's cores.

Prints figures and ratios against one worker measured in the same run; asserts
nothing but that every run succeeded. Every database it creates
(``bench_scale_<pid>_...``) is dropped, every worker stopped (SIGTERM, then SIGKILL).

    .venv/bin/python bench/scale_out.py [--runs 200] [--workers 1,2,4] [--concurrency 4]
        [--repeat 1] [--latency-runs 20] [--step python|shell] [--enqueue shared|wf]
        [--pg postgresql+asyncpg://...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _scale_workers import database, machine_ticks, sql, workers  # noqa: E402

NAP_SECONDS = 0.5
ENQUEUE_IN_FLIGHT = 8

FLOWS = {
    "python": '''
import time

from brain import step, workflow


@step
def nap() -> str:
    time.sleep(0.5)
    return "slept"


@step
def stamp() -> str:
    return repr(time.time())


@workflow(name="nap")
def nap_run():
    nap()


@workflow(name="stamp")
def stamp_run():
    stamp()


WORKFLOWS = {"nap": nap_run, "stamp": stamp_run}
''',
    "shell": '''
from brain import shell, workflow


@workflow(name="nap")
def nap_run():
    shell("nap", command="sleep 0.5")


@workflow(name="stamp")
def stamp_run():
    shell("stamp", command="date +%s.%N")


WORKFLOWS = {"nap": nap_run, "stamp": stamp_run}
''',
}

ENQUEUE_LABEL = {
    "shared": "queued by another process through one store it opened once "
              "(brain.runner.queueing.enqueue, what wf.enqueue() calls)",
    "wf": "queued by another process with wf.enqueue() (each call opens and closes the "
          "database)"}

STEP_LABEL = {"python": "@step doing time.sleep(0.5) (a thread; no process spawned)",
              "shell": 'shell("nap", command="sleep 0.5") (a /bin/sh and a sleep per run)'}


@dataclass
class Drain:
    """One drain of the queue, from the database's rows."""

    workers: int
    seconds: float  # first created_at to last ended_at
    enqueue_seconds: float  # first created_at to last created_at
    first_start: float  # first created_at to the first step's start
    run_overhead_ms: float  # median of a run's (ended_at - started_at) minus the sleep
    busy: float  # share of slot time spent in steps
    ready_seconds: float  # median worker start-up (Popen to start-up line), not counted
    worker_cpu: float  # CPU seconds of all workers (and their steps) from enqueue to end
    enqueuer_cpu: float  # CPU seconds of the enqueuing process
    machine_busy: float  # share of the machine's CPU time busy from enqueue to end (all users)


def drain(url: str, count: int, args: argparse.Namespace, flows: Path, env: dict[str, str],
          logs: Path) -> Drain:
    """Start ``count`` workers, queue the runs from another process, wait for the last end."""
    slots = count * args.concurrency
    with workers(count, flows, url, args.concurrency, env, logs) as started:
        cpu0, (busy0, total0) = started.cpu_seconds(), machine_ticks()
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, str(HERE / "_scale_enqueue.py"), "batch", args.enqueue,
                        str(flows), "nap", str(args.runs), str(ENQUEUE_IN_FLIGHT)],
                       env=dict(env, BRAIN_DATABASE_URL=url), check=True,
                       stdout=subprocess.DEVNULL)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        enqueuer_cpu = (children.ru_utime + children.ru_stime
                        - children0.ru_utime - children0.ru_stime)
        deadline = time.monotonic() + 60 + 4 * args.runs * NAP_SECONDS / slots
        while True:
            ended = sql(url, "SELECT count(*) FROM brain_runs WHERE ended_at IS NOT NULL")[0][0]
            if ended >= args.runs:
                break
            if time.monotonic() > deadline:
                sys.exit(f"only {ended} of {args.runs} runs ended in time ({count} workers)")
            time.sleep(0.1)
        worker_cpu = started.cpu_seconds() - cpu0
        busy1, total1 = machine_ticks()
    failed = sql(url, "SELECT count(*) FROM brain_runs WHERE status <> 'succeeded'")[0][0]
    if failed:
        sys.exit(f"{failed} of {args.runs} runs did not succeed ({count} workers)")
    (first, last_created, last_end), = sql(
        url, "SELECT min(created_at), max(created_at), max(ended_at) FROM brain_runs")
    first_step = sql(url, "SELECT min(started_at) FROM brain_steps")[0][0]
    spans = sql(url, "SELECT extract(epoch FROM ended_at - started_at) FROM brain_runs")
    steps = sql(url, "SELECT sum(extract(epoch FROM ended_at - started_at)) FROM brain_steps")
    seconds = (last_end - first).total_seconds()
    return Drain(
        workers=count, seconds=seconds,
        enqueue_seconds=(last_created - first).total_seconds(),
        first_start=(first_step - first).total_seconds(),
        run_overhead_ms=(statistics.median(float(s[0]) for s in spans) - NAP_SECONDS) * 1000,
        busy=float(steps[0][0]) / (slots * seconds),
        ready_seconds=statistics.median(started.ready), worker_cpu=worker_cpu,
        enqueuer_cpu=enqueuer_cpu,
        machine_busy=(busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0)


def pickup(url: str, args: argparse.Namespace, flows: Path, env: dict[str, str],
           logs: Path) -> dict[str, list[float]]:
    """Latencies (s) of runs queued one at a time for one idle worker, from the enqueue
    returning and from ``created_at``, and the enqueue calls (s)."""
    with workers(1, flows, url, args.concurrency, env, logs):
        time.sleep(2)  # past its first scans: idle
        done = subprocess.run([sys.executable, str(HERE / "_scale_enqueue.py"), "latency",
                               args.enqueue, str(flows), "stamp", str(args.latency_runs),
                               "19"],
                              env=dict(env, BRAIN_DATABASE_URL=url), check=True,
                              capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def p95(values: list[float]) -> float:
    """The 95th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", default="1,2,4",
                        help="worker counts, comma-separated; the first is the baseline")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of all worker counts (interleaved); medians are printed")
    parser.add_argument("--latency-runs", type=int, default=20)
    parser.add_argument("--step", choices=sorted(FLOWS), default="python")
    parser.add_argument("--enqueue", choices=sorted(ENQUEUE_LABEL), default="shared")
    parser.add_argument("--pg", default=os.environ.get(
        "BRAIN_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"))
    args = parser.parse_args()
    counts = [int(c) for c in args.workers.split(",")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "THE_BRAIN_"))}
    print(f"step: {STEP_LABEL[args.step]}; {args.runs} runs, {ENQUEUE_LABEL[args.enqueue]}, "
          f"{ENQUEUE_IN_FLIGHT} in flight; brain worker --concurrency {args.concurrency}; "
          f"PostgreSQL; {os.cpu_count()} CPU cores, shared", flush=True)
    results: dict[int, list[Drain]] = {c: [] for c in counts}
    with tempfile.TemporaryDirectory() as tmp:
        flows = Path(tmp) / "flows.py"
        flows.write_text(FLOWS[args.step])
        for round_ in range(args.repeat):
            for count in counts:
                name = f"bench_scale_{os.getpid()}_w{count}_{round_}"
                with database(args.pg, name, env) as url:
                    d = drain(url, count, args, flows, env, Path(tmp))
                results[count].append(d)
                print(f"  {count} worker(s): {d.seconds:6.2f} s from first enqueue to last end "
                      f"(enqueue {d.enqueue_seconds:.2f} s, first step at "
                      f"+{d.first_start:.2f} s, run overhead {d.run_overhead_ms:.0f} ms median, "
                      f"slots busy {d.busy:.0%}; CPU: workers {d.worker_cpu:.1f} s, enqueuer "
                      f"{d.enqueuer_cpu:.1f} s, machine {d.machine_busy:.0%} busy (all "
                      f"processes); worker start-up {d.ready_seconds:.2f} s, not counted)",
                      flush=True)
        if args.latency_runs:
            with database(args.pg, f"bench_scale_{os.getpid()}_lat", env) as url:
                picked = pickup(url, args, flows, env, Path(tmp))

    base = statistics.median(d.seconds for d in results[counts[0]])
    print()
    print(f"| workers | slots | seconds (first enqueue to last end) | vs {counts[0]} worker(s) "
          f"| ideal seconds (ceil(runs / slots) x 0.5 s) | of ideal |")
    print("|---|---|---|---|---|---|")
    for count in counts:
        seconds = statistics.median(d.seconds for d in results[count])
        slots = count * args.concurrency
        ideal = -(-args.runs // slots) * NAP_SECONDS
        every = ", ".join(f"{d.seconds:.2f}" for d in results[count])
        shown = f"{seconds:.2f}" + (f" (median of {every})" if args.repeat > 1 else "")
        print(f"| {count} | {slots} | {shown} | {base / seconds:.2f}x | {ideal:.2f} "
              f"| {ideal / seconds:.0%} |")
    if 1 in results and 4 in results:
        four = statistics.median(d.seconds for d in results[4])
        one = statistics.median(d.seconds for d in results[1])
        print(f"\n4 workers / 1 worker: {one / four:.2f}x (target >= 3.5x)")
    if args.latency_runs:
        ms = [x * 1000 for x in picked["latencies"]]
        upper = [x * 1000 for x in picked["from_created"]]
        print(f"\npickup latency of an idle worker (1 x brain worker --concurrency "
              f"{args.concurrency}), {len(ms)} runs queued one at a time by another process "
              f"(target: median <= 50 ms):")
        print(f"  step start - the enqueue returned (after the commit): median "
              f"{statistics.median(ms):.1f} ms, p95 {p95(ms):.1f} ms (min {min(ms):.1f}, "
              f"max {max(ms):.1f})")
        print(f"  step start - created_at (before the commit):         median "
              f"{statistics.median(upper):.1f} ms, p95 {p95(upper):.1f} ms (min "
              f"{min(upper):.1f}, max {max(upper):.1f})")
        print(f"  the enqueue call itself: median "
              f"{statistics.median(picked['calls']) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
