"""Waiting runs: 1,000 runs that sleep then run one step, on one ``brain serve``: wake lateness
and the server's memory with 1,000 runs waiting against none.

One ``brain serve`` subprocess on 127.0.0.1 (SQLite file in a temp dir, or a fresh database
on ``--postgres URL``), ``--concurrency`` (default 4, the server's default) runs executed at
once. Every run is created with ``POST /api/workflows/{name}/runs`` (httpx, 16 connections).
Two workflows, each ``sleep("nap", ...)`` then one ``@step`` (``woke``) taking its output:

* **all at once** (``nap_at``): ``sleep("nap", until=trigger.body)``. The 1,000 runs are
  created together, their body one wake time T, ``--lead`` seconds ahead, and every run
  must be waiting (status ``waiting``, no lease) 2 s before T, so every sleep lasts at
  least 2 s (the bench stops otherwise: give a longer ``--lead``); the memory
  is read while all 1,000 wait. At T all 1,000 timers fall due together, so the woken runs
  queue behind each other for the ``--concurrency`` executor slots.
* **spread** (``nap_2s``): ``sleep("nap", "2s")``, the 1,000 runs created as fast as the
  API takes them (the issue's workload: 1,000 runs that each sleep 2 s), or evenly over
  ``--spread`` seconds: each sleeps 2 s from its own start, so the wakes come as the runs
  came, while new runs keep arriving. The "all at once" case is the harder one: every
  wake in the same instant, queueing behind each other.

Definitions, per run, from the database after the runs ended (the store API: each run's
steps as ``GET /api/runs/{id}`` gives them):

* due = the sleep's output (its UTC wake time, ISO 8601);
* **wake lateness = the ``woke`` step's ``started_at`` - due** (target p99 ≤ 1 s, SPEC §16);
* timer fired = the sleep step's ``ended_at`` - due (the timer taken, the step ended and
  the run queued again, one transaction);
* claimed = the server's log line ``run … continued`` (``BRAIN_LOG_FORMAT=json``, ms) - due;
* run ended = the run's ``ended_at`` - due.

Memory: the server process's RSS, PSS and USS (private clean + dirty) from
``/proc/PID/smaps_rollup`` (``VmRSS`` from ``/proc/PID/status`` if unreadable): idle before
any run, idle after a warm-up of 20 runs (none waiting: the baseline), with 1,000 runs
waiting, and again after they all ended. Target: with 1,000 waiting < 50 MB (MiB) more RSS
than none waiting.

    .venv/bin/python bench/waiting.py [--runs 1000] [--concurrency 4] [--spread 0]
                                      [--postgres postgresql+asyncpg://postgres@127.0.0.1/x]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _serve import free_port, start, stop, wait_healthy

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from brain.results import RunResult  # noqa: E402
from brain.store import Store  # noqa: E402

WORKFLOWS = '''
from brain import sleep, step, trigger, workflow


@step
def woke(wake: str) -> str:
    return wake


@workflow
def nap_at():
    woke(sleep("nap", until=trigger.body))


@workflow
def nap_2s():
    woke(sleep("nap", "2s"))
'''

CONNECTIONS = 16
WARMUP_RUNS = 20
MIN_SLEEP_S = 2.0
TARGET_P99_S = 1.0
TARGET_MB = 50.0


# --- the server's memory ---------------------------------------------------------------------

def memory_kb(pid: int) -> dict[str, int]:
    """``rss``, ``pss``, ``uss`` in KiB of ``pid`` (only ``rss`` without smaps_rollup)."""
    try:
        fields: dict[str, int] = {}
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1])
        return {"rss": fields["Rss"], "pss": fields["Pss"],
                "uss": fields["Private_Clean"] + fields["Private_Dirty"]}
    except (OSError, KeyError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return {"rss": int(line.split()[1])}
    raise SystemExit(f"cannot read the memory of process {pid}")


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def show_memory(kb: dict[str, int]) -> str:
    return "   ".join(f"{k.upper()} {v / 1024:7.1f} MB" for k, v in kb.items())


# --- the database ----------------------------------------------------------------------------

async def counts(store: Store, workflow: str) -> dict[str, int]:
    return {status: await store.count_active(workflow=workflow, status=status)
            for status in ("queued", "running", "waiting")}


async def read_runs(store: Store, run_ids: list[str]) -> list[RunResult]:
    found: list[RunResult] = []
    for i in range(0, len(run_ids), 50):
        found += await asyncio.gather(*(store.get_run(r) for r in run_ids[i:i + 50]))
    return found


async def wait_until(store: Store, workflow: str, done: Callable[[dict[str, int]], bool],
                     within: float,
                     what: str) -> dict[str, int]:
    """Poll the run counts every 0.2 s until ``done(counts)``; exit after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        now = await counts(store, workflow)
        if done(now):
            return now
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {within:.0f} s ({now})")
        await asyncio.sleep(0.2)


# --- creating runs ---------------------------------------------------------------------------

async def create_runs(base: str, workflow: str, bodies: list[str],
                      at: list[float] | None = None) -> tuple[list[str], float]:
    """POST one run per body (the i-th not before ``at[i]``, monotonic); their ids, and the
    seconds it took."""
    import httpx

    ids: list[str | None] = [None] * len(bodies)
    errors: list[str] = []
    limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    gate = asyncio.Semaphore(CONNECTIONS)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
        async def one(i: int) -> None:
            if at is not None:
                await asyncio.sleep(max(0.0, at[i] - time.monotonic()))
            async with gate:
                for attempt in range(20):
                    answer = await client.post(f"/api/workflows/{workflow}/runs",
                                               json={"body": bodies[i]})
                    if answer.status_code == 202:
                        ids[i] = answer.json()["run_id"]
                        return
                    if answer.status_code != 429:
                        break
                    await asyncio.sleep(0.1 * (attempt + 1))
                errors.append(f"{answer.status_code} {answer.text[:200]}")

        t0 = time.monotonic()
        await asyncio.gather(*(one(i) for i in range(len(bodies))))
        took = time.monotonic() - t0
    if errors:
        raise SystemExit(f"{len(errors)} runs not created, e.g. {errors[0]}")
    return [i for i in ids if i is not None], took


# --- the figures -----------------------------------------------------------------------------

def parse_time(value: str) -> datetime:
    when = datetime.fromisoformat(value)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def line(name: str, values: list[float]) -> str:
    if not values:
        return f"  {name:<36} none"
    return (f"  {name:<36} p50 {pct(values, .5):7.3f}   p90 {pct(values, .9):7.3f}   "
            f"p99 {pct(values, .99):7.3f}   max {max(values):7.3f}   min {min(values):7.3f}")


def claims_from_log(log: Path) -> dict[str, datetime]:
    """``run id → when the server took it again`` (its ``continued`` log line)."""
    found = {}
    for text in log.read_text(errors="replace").splitlines():
        if not text.startswith("{"):
            continue
        try:
            record = json.loads(text)
        except ValueError:
            continue
        if record.get("logger") == "brain.runs" and record.get("message", "").endswith(
                " continued") and "run_id" in record:
            found[record["run_id"]] = parse_time(record["time"])
    return found


def analyse(title: str, runs: list[RunResult], claims: dict[str, datetime],
            burst: bool = False) -> list[float]:
    """Print the figures of one scenario; the wake lateness of each run (s)."""
    late: list[float] = []
    fired: list[float] = []
    claimed: list[float] = []
    ended: list[float] = []
    slept: list[float] = []
    sleep_starts: list[datetime] = []
    bad = [r for r in runs if r.status != "succeeded"]
    for run in runs:
        nap, after = run.steps["nap"], run.steps["woke"]
        if not nap.output or after.started_at is None or nap.ended_at is None \
                or nap.started_at is None:
            continue
        due = parse_time(nap.output)
        late.append((after.started_at - due).total_seconds())
        fired.append((nap.ended_at - due).total_seconds())
        if run.ended_at is not None:
            ended.append((run.ended_at - due).total_seconds())
        slept.append((due - nap.started_at).total_seconds())
        sleep_starts.append(nap.started_at)
        if run.run_id in claims:
            claimed.append((claims[run.run_id] - due).total_seconds())
    print(f"\n{title}")
    print(f"  runs: {len(runs)}, succeeded {len(runs) - len(bad)}"
          + (f", NOT succeeded {len(bad)} (e.g. {bad[0].status}: {bad[0].error})" if bad else ""))
    if sleep_starts:
        span = (max(sleep_starts) - min(sleep_starts)).total_seconds()
        print(f"  sleeps began over {span:.2f} s; each slept (due - sleep started_at) "
              f"{min(slept):.2f} … {max(slept):.2f} s")
    print("  seconds after due (the sleep's output):")
    print(line("timer fired   (nap ended_at)", fired))
    print(line("claimed again (log 'continued')", claimed))
    print(line("WAKE LATENESS (woke started_at)", late))
    print(line("run ended     (run ended_at)", ended))
    if claimed and late:
        print(f"  p50 of the phases: fired {pct(fired, .5):.3f} s → claimed "
              f"+{pct(claimed, .5) - pct(fired, .5):.3f} s → step started "
              f"+{pct(late, .5) - pct(claimed, .5):.3f} s")
    if burst and late:
        print(f"  woken runs' steps started at {len(late) / (max(late) - min(fired)):.0f}/s "
              f"(runs / (last step start - first timer fired))")
    return late


# --- the bench -------------------------------------------------------------------------------

async def bench(args: argparse.Namespace, url: str, tmp: Path) -> None:
    flows = tmp / "flows"
    flows.mkdir()
    (flows / "waiting.py").write_text(textwrap.dedent(WORKFLOWS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "THE_BRAIN_"))}
    env.update(BRAIN_DATABASE_URL=url, BRAIN_LOG_FORMAT="json",
               BRAIN_CONCURRENCY=str(args.concurrency))
    if url.startswith("postgresql"):  # a new database: `brain serve` wants its schema first
        schema_store = Store(url)
        try:
            await schema_store.upgrade_schema()
        finally:
            await schema_store.close()
    log = tmp / "serve.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start([str(Path(sys.executable).with_name("brain")), "serve", str(flows), "--port",
                  str(port), "--concurrency", str(args.concurrency)], env, log)
    n = args.runs
    store = Store(url)
    try:
        wait_healthy(base, proc, log)
        await store.open()
        await asyncio.sleep(2)
        print(f"brain serve (pid {proc.pid}), --concurrency {args.concurrency}, "
              f"{'PostgreSQL' if url.startswith('postgresql') else 'SQLite file'}, "
              f"{os.cpu_count()} CPU cores shared with this script; runs created with "
              f"POST /api/workflows/{{name}}/runs, {CONNECTIONS} connections", flush=True)
        cold = memory_kb(proc.pid)

        # Warm-up: every code path once (the lazily imported parts), then idle again.
        await create_runs(base, "nap_2s", [""] * WARMUP_RUNS)
        await wait_until(store, "nap_2s", lambda c: sum(c.values()) == 0, 60, "warm-up")
        await asyncio.sleep(2)
        idle = memory_kb(proc.pid)

        # All at once: every run waits for the same T.
        per_run = 0.08 if url.startswith("postgresql") else 0.02  # creating and parking one
        lead = args.lead if args.lead else max(15.0, n * per_run + MIN_SLEEP_S + 3)
        due = datetime.now(UTC) + timedelta(seconds=lead)
        due_text = due.isoformat()
        print(f"\nall at once: creating {n} runs of nap_at, all due at {due:%H:%M:%S.%f} UTC "
              f"(in {lead:.0f} s) …", flush=True)
        at_ids, took = await create_runs(base, "nap_at", [due_text] * n)
        state = await wait_until(store, "nap_at", lambda c: c["waiting"] == n,
                                 max(1.0, (due - datetime.now(UTC)).total_seconds()
                                     - MIN_SLEEP_S),
                                 f"all {n} runs waiting before they are due (a slower "
                                 f"machine: give a longer --lead than {lead:.0f} s)")
        all_waiting = (datetime.now(UTC) - (due - timedelta(seconds=lead))).total_seconds()
        waiting_mem = memory_kb(proc.pid)
        left = (due - datetime.now(UTC)).total_seconds()
        print(f"  created in {took:.2f} s ({n / took:.0f}/s); all {state['waiting']} waiting "
              f"{all_waiting:.2f} s after the first was created; memory read {left:.2f} s "
              f"before they are due", flush=True)
        await asyncio.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds() - 0.05))
        cpu0 = cpu_seconds(proc.pid)
        await wait_until(store, "nap_at", lambda c: sum(c.values()) == 0, 600, "all runs ended")
        cpu = cpu_seconds(proc.pid) - cpu0
        drained = (datetime.now(UTC) - due).total_seconds()
        print(f"  all ended ≤ {drained:.2f} s after due (polled every 0.2 s); server CPU from "
              f"due to then: {cpu:.2f} s ({cpu / drained * 100:.0f}% of one core, "
              f"{cpu / n * 1000:.1f} ms per woken run)", flush=True)
        await asyncio.sleep(2)
        after_mem = memory_kb(proc.pid)
        kids = children(proc.pid)

        # Spread: a fixed 2 s sleep, runs created evenly over --spread seconds.
        pace = (f"evenly over {args.spread:g} s ({n / args.spread:.0f}/s)" if args.spread > 0
                 else "as fast as the API takes them (--spread 0)")
        print(f"\nspread: creating {n} runs of nap_2s {pace}, each sleeping 2 s …", flush=True)
        t0 = time.monotonic() + 0.2
        at = [t0 + i * args.spread / n for i in range(n)]
        peak = {"waiting": 0}

        async def watch_peak() -> None:
            while True:
                c = await counts(store, "nap_2s")
                peak["waiting"] = max(peak["waiting"], c["waiting"])
                await asyncio.sleep(0.5)

        watcher = asyncio.create_task(watch_peak())
        spread_ids, took = await create_runs(base, "nap_2s", [""] * n, at)
        await wait_until(store, "nap_2s", lambda c: sum(c.values()) == 0, 600, "all runs ended")
        watcher.cancel()
        print(f"  created in {took:.2f} s; at most {peak['waiting']} waiting at once "
              f"(sampled every 0.5 s)", flush=True)
    finally:
        stop(proc)

    claims = claims_from_log(log)
    try:
        runs_at = await read_runs(store, at_ids)
        runs_spread = await read_runs(store, spread_ids)
    finally:
        await store.close()
    late_at = analyse(f"ALL AT ONCE: {n} runs, sleep until one T (every run waiting ≥ "
                      f"{MIN_SLEEP_S:g} s before T), then one @step; --concurrency {args.concurrency}",
                      runs_at, claims, burst=True)
    late_spread = analyse(f"SPREAD: {n} runs, sleep 2 s, created over {args.spread:g} s, "
                          f"then one @step; --concurrency {args.concurrency}",
                          runs_spread, claims)

    print("\nserver memory (MB = MiB; USS = private clean + dirty"
          f"{', child processes: ' + str(kids) if kids else ', no child processes'}):")
    rows = [("idle, before any run", cold),
            (f"idle after {WARMUP_RUNS} warm-up runs, none waiting", idle),
            (f"{n} runs waiting", waiting_mem), ("idle after they all ended", after_mem)]
    for label, kb in rows:
        print(f"  {label:<42} {show_memory(kb)}")
    more = {k: (waiting_mem[k] - idle[k]) / 1024 for k in waiting_mem}
    print(f"  {f'{n} waiting - none waiting':<42} "
          + "   ".join(f"{k.upper()} {v:+7.1f} MB" for k, v in more.items())
          + f"   ({more['rss'] * 1024 / n:.1f} KiB RSS per waiting run)")

    p99_at, p99_spread = pct(late_at, .99), pct(late_spread, .99)
    print("\nwake lateness = (the step after the sleep: started_at) - (the sleep's due time = its "
          "output, the UTC wake time)")
    print("targets:")
    print(f"  wake lateness p99 ≤ {TARGET_P99_S:g} s, all at once:  p99 {p99_at:.3f} s "
          f"(p50 {pct(late_at, .5):.3f} s) → {'MET' if p99_at <= TARGET_P99_S else 'NOT MET'}")
    print(f"  wake lateness p99 ≤ {TARGET_P99_S:g} s, spread:       p99 {p99_spread:.3f} s "
          f"(p50 {pct(late_spread, .5):.3f} s) → "
          f"{'MET' if p99_spread <= TARGET_P99_S else 'NOT MET'}")
    print(f"  memory, {n} waiting - none < {TARGET_MB:g} MB (RSS): {more['rss']:+.1f} MB → "
          f"{'MET' if more['rss'] < TARGET_MB else 'NOT MET'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--spread", type=float, default=0.0,
                        help="seconds over which the spread runs are created (default 0: as "
                             "fast as the API takes them, the issue's workload)")
    parser.add_argument("--lead", type=float, default=None,
                        help="seconds from creating the all-at-once runs to their wake time "
                             "(default: 0.02 s per run + 5 s on SQLite, 0.08 s per run + 5 s "
                             "on PostgreSQL, at least 15)")
    parser.add_argument("--postgres", default=None, metavar="URL",
                        help="a PostgreSQL server (postgresql+asyncpg://...): the bench "
                             "creates a database of its own there and drops it after")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="brain-bench-waiting-") as tmp_dir:
        tmp = Path(tmp_dir)
        if args.postgres is None:
            asyncio.run(bench(args, f"sqlite+aiosqlite:///{tmp / 'brain.db'}", tmp))
            return
        name = f"bench_{uuid.uuid4().hex[:10]}"
        _psql(args.postgres, f"CREATE DATABASE {name}")
        try:
            asyncio.run(bench(args, args.postgres.rsplit("/", 1)[0] + "/" + name, tmp))
        finally:
            _psql(args.postgres, f"DROP DATABASE {name} WITH (FORCE)")


def _psql(url: str, sql: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    async def go() -> None:
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(go())


if __name__ == "__main__":
    main()
