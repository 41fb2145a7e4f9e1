"""Per-step overhead of the runner, tracing/running a 10,000-step workflow, and CLI start-up.

Prints figures; it asserts nothing (the machines are shared and noisy).

    .venv/bin/python bench/step_overhead.py

Targets: at most 0.5 ms per recorded step of a 1,000-step chain, printed next to
the same-run floor (one plain sqlite3 commit per step on the same file); trace of
10,000 steps < 1 s, run < 15 s, peak memory < 300 MB; `brain run` of a one-step
shell workflow: median at most 0.45 s and 60 MiB peak (7 runs, `/usr/bin/time -v`), and
at most 2x the same-run import floor (`python -c 'import pydantic, wrapt, asyncio, sqlite3'`,
median of 7 processes): the start-up ratio. `brain run` is timed on a database file that
already exists, as a user's `./brain.db` does; the first run on a new file (which creates
the schema) is printed apart.

    .venv/bin/python bench/step_overhead.py --startup    # the start-up figures only
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The child's first line: ``bench/`` on its path, for ``_chain``.
FIND_CHAIN = f"import sys; sys.path.insert(0, {str(REPO / 'bench')!r})\n"

CHAIN = FIND_CHAIN + r'''
import json, resource, statistics, sys, time
from _chain import chain_workflow

N = int(sys.argv[1]); URL = sys.argv[2]
t0 = time.perf_counter()
wf = chain_workflow(N)
trace_s = time.perf_counter() - t0
t0 = time.perf_counter()
result = wf(store=URL)
run_s = time.perf_counter() - t0
assert result.succeeded, result.error
starts = sorted(s.started_at for s in result.steps.values())
gaps = [(b - a).total_seconds() * 1000 for a, b in zip(starts, starts[1:])]
print(json.dumps({"trace_s": trace_s, "run_s": run_s, "median_gap_ms": statistics.median(gaps),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


BASELINE = r'''
import json, sqlite3, statistics, sys, time

N = int(sys.argv[1]); PATH = sys.argv[2]

# The floor: one plain sqlite3 commit per step (one UPDATE), on the same file, with the
# same settings The Brain uses (WAL, synchronous=NORMAL).
conn = sqlite3.connect(PATH, isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("PRAGMA synchronous=NORMAL")
conn.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, status TEXT, out TEXT)")
conn.execute("INSERT INTO floor (id, status) VALUES " + ",".join(f"({i}, 'pending')" for i in range(N)))
gaps, last = [], time.perf_counter()
for i in range(N):
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE floor SET status='ok', out=? WHERE id=?", (str(i), i))
    conn.execute("COMMIT")
    now = time.perf_counter(); gaps.append((now - last) * 1000); last = now
print(json.dumps({"median_gap_ms": statistics.median(gaps)}))
'''


def run_baseline(n: int, path: str) -> float:
    out = subprocess.run([sys.executable, "-c", BASELINE, str(n), path], check=True,
                         capture_output=True, text=True, cwd=REPO).stdout
    return float(json.loads(out.strip().splitlines()[-1])["median_gap_ms"])


def run_chain(n: int, url: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHAIN, str(n), url], check=True,
                         capture_output=True, text=True, cwd=REPO).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def timed(argv: list[str], env: dict[str, str], cwd: str, n: int = 7) -> tuple[float, float]:
    """Median wall seconds and median peak RSS (MiB) of ``n`` runs, by ``/usr/bin/time -v``."""
    times, peaks = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-v", *argv], env=env, cwd=cwd, check=True,
                              capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        for line in done.stderr.splitlines():
            if "Maximum resident set size" in line:
                peaks.append(int(line.rsplit(":", 1)[1]) / 1024)
    return statistics.median(times), statistics.median(peaks)


FLOOR_IMPORTS = "import pydantic, wrapt, asyncio, sqlite3"


def startup(tmp: str) -> None:
    """Whole-process `brain run` of a one-step shell workflow against the import floor."""
    # Byte-compile the package first, as the first run in a normal environment does
    # (this machine sets PYTHONDONTWRITEBYTECODE, which would otherwise make every
    # start compile The Brain from source).
    import compileall

    compileall.compile_dir(str(REPO / "brain"), quiet=1)
    env = dict(os.environ, BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{tmp}/cli.db")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    brain = str(Path(sys.executable).parent / "brain")
    one = Path(tmp) / "one.py"
    one.write_text("from brain import shell, workflow\n\n\n@workflow\ndef one():\n"
                   "    shell(\"hi\", argv=[\"echo\", \"hi\"])\n")
    # The first run writes the bytecode of every module the run imports and creates cli.db.
    subprocess.run([brain, "run", str(one)], env=env, cwd=tmp, check=True, capture_output=True)
    subprocess.run([sys.executable, "-c", FLOOR_IMPORTS], env=env, cwd=tmp, check=True)
    bare, bare_mb = timed([sys.executable, "-c", "pass"], env, tmp)
    # Floor and `brain run` in turns, so a noisy moment on a shared machine weighs on both.
    rounds = [(timed([sys.executable, "-c", FLOOR_IMPORTS], env, tmp, n=1),
               timed([brain, "run", str(one)], env, tmp, n=1)) for _ in range(7)]
    floor = statistics.median(f[0] for f, _ in rounds)
    floor_mb = statistics.median(f[1] for f, _ in rounds)
    cli = statistics.median(c[0] for _, c in rounds)
    cli_mb = statistics.median(c[1] for _, c in rounds)
    firsts = []
    for i in range(7):  # a new database file each time: the schema is created
        fresh = dict(env, BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{tmp}/first{i}.db")
        firsts.append(timed([brain, "run", str(one)], fresh, tmp, n=1)[0])
    print(f"`brain run` of a one-step shell workflow, as a process (median of 7, existing "
          f"database file): {cli:.3f} s (target <= 0.45 s), peak {cli_mb:.1f} MiB "
          f"(target <= 60 MiB)")
    print(f"  first run on a new database file (median of 7): {statistics.median(firsts):.3f} s")
    print(f"  import floor `python -c '{FLOOR_IMPORTS}'` (median of 7): {floor:.3f} s, "
          f"{floor_mb:.1f} MiB; bare `python -c pass`: {bare:.3f} s, {bare_mb:.1f} MiB")
    print(f"start-up ratio: {cli / floor:.2f}x (target <= 2x)")


def main() -> None:
    if "--startup" in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            startup(tmp)
        return
    with tempfile.TemporaryDirectory() as tmp:
        small = run_chain(1000, f"sqlite+aiosqlite:///{tmp}/bench.db")
        floor = run_baseline(1000, f"{tmp}/bench.db")
        print(f"1,000-step @step chain, every step recorded in SQLite: "
              f"median per-step overhead {small['median_gap_ms']:.3f} ms (target <= 0.5 ms); "
              f"whole run {small['run_s']:.2f} s")
        print(f"  same-run floor (one plain sqlite3 commit per step, same file): "
              f"{floor:.3f} ms; ratio {small['median_gap_ms'] / floor:.1f}x")
        big = run_chain(10_000, f"sqlite+aiosqlite:///{tmp}/big.db")
        print(f"10,000-step workflow: trace {big['trace_s']:.2f} s (target < 1 s), "
              f"run {big['run_s']:.2f} s (target < 15 s), peak memory {big['peak_mb']:.0f} MB "
              f"(target < 300 MB)")

        startup(tmp)


if __name__ == "__main__":
    main()
