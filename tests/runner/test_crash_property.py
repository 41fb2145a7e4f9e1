"""Durability as a property (SPEC §4): wherever its executor is killed, a run is resumed and
finishes, and no step that was recorded as succeeded runs again.

Hypothesis draws a workflow of 1 to 8 steps: shell steps and ``@step`` calls, some side by
side in ``parallel()``, maybe a ``for_each`` block (over literal items or over a step's JSON
output), maybe blocks under ``when`` on a ``true``/``false`` step, and data edges between
them. ``brain run FILE`` executes it in a process and session of its own (forked, imports
done, from ``crash_support.ForkServer``), SIGKILLed (the whole process group) once the run is
recorded or its steps have written the drawn number of lines to the log, so the kill lands
mid-step or between steps; a shell step may linger on after it. A ``brain worker`` then
resumes the run (it finds the dead executor's run at start-up), or a process calling
``resume_run`` until the lease (1 s) expires; now and then that resumer is killed too, and
another one finishes the run. Every step appends a line when it starts and one when its work
is done (see ``crash_support.py``), so the log tells which tries of which step ran, under
which executor, to the end, and what input each got. Checked, against the store after each
kill and at the end:

- exactly one run, which ends ``succeeded``, every step ``succeeded`` (or ``skipped`` as
  its condition says), a ``for_each`` row holding its instances' outputs;
- a step recorded succeeded at a kill never starts again, and keeps its output and tries;
- a step ran to the end more than once only when it was running at a kill; an executor
  starts a step once; two tries of a step never run at once, and nothing a killed executor
  started still runs once the run has ended;
- a step's stored output is that of a try that ran to the end under the executor that
  recorded it, and every try of a step got the output its referenced step ended with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.append(str(HERE))  # ``import crash_support`` (importlib mode adds no test folder)

from crash_support import (  # noqa: E402
    Block,
    Executor,
    FlowPlan,
    ForkServer,
    Line,
    RunState,
    StepPlan,
    poll,
    processes_mentioning,
    read_log,
    read_runs,
    wait_finished,
)

PAUSES = [0.0, 0.0, 0.01, 0.05, 0.15]

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


# --- what hypothesis draws --------------------------------------------------------------------------


@st.composite
def flow_plans(draw: st.DrawFn) -> FlowPlan:
    """A workflow of 1 to 8 steps, as blocks (see ``crash_support.Block``)."""
    budget = draw(st.integers(1, 8))
    blocks: list[Block] = []
    defined: list[str] = []  # every step so far, in call order: what a later step may read
    has_each = False

    def new_step(visible: list[str], out: str = "") -> StepPlan:
        name = f"s{len(defined) + 1}"
        ref = draw(st.none() | st.sampled_from(visible)) if visible and not out else None
        kind = draw(st.sampled_from(["shell", "func"]))
        # Now and then a shell step outlives a killed ``brain run`` by a second or so.
        linger = 1.5 if kind == "shell" and draw(st.integers(0, 9)) == 0 else 0.0
        plan = StepPlan(name, kind, draw(st.sampled_from(PAUSES)), ref, out, linger)
        defined.append(name)
        return plan

    while len(defined) < budget:
        left = budget - len(defined)
        kinds = ["single"] + (["parallel"] if left >= 2 else []) + ([] if has_each else ["each"])
        kind = draw(st.sampled_from(kinds))
        size = 1 if kind == "single" else \
            draw(st.integers(2, min(3, left)) if kind == "parallel" else st.integers(1, min(2, left)))
        condition = None
        negate = False
        if left - size >= 1 and draw(st.booleans()):
            value = draw(st.sampled_from(["true", "false"]))
            cond = new_step([], out=value)
            blocks.append(Block((cond,)))
            condition, negate = cond.name, draw(st.booleans())
        each: tuple[str, ...] | str | None = None
        if kind == "each":
            has_each = True
            count = draw(st.integers(0, 3))
            items = [str(i) for i in range(count)]
            if budget - len(defined) - size >= 1 and draw(st.booleans()):
                source = new_step([], out="[" + ",".join(f'"{i}"' for i in items) + "]")
                blocks.append(Block((source,)))
                each = source.name
            else:
                each = tuple(items) or ("0",)
        outer = list(defined)
        steps: list[StepPlan] = []
        for _ in range(size):
            steps.append(new_step(outer + [s.name for s in steps]))
        blocks.append(Block(tuple(steps), parallel=kind == "parallel", each=each,
                            when=condition, negate=negate))
    return FlowPlan("crashy", tuple(blocks))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[FlowPlan, list[int], list[str]]:
    """A workflow, the log lines after which each executor in turn is killed (the first is
    ``brain run``, 0 lines: as soon as its run is recorded; one resumer may be killed too),
    and who resumes after each kill."""
    plan = draw(flow_plans())
    lines = 2 * len(plan.executed())
    kills = [draw(st.integers(0, lines))]
    if draw(st.integers(0, 3)) == 0:  # now and then the resumer dies too
        kills.append(draw(st.integers(1, lines)))
    resumers = [draw(st.sampled_from(["worker", "worker", "lease"])) for _ in kills]
    return plan, kills, resumers


# --- running a scenario -------------------------------------------------------------------------------


def play(folder: Path, url: str, plan: FlowPlan, kills: list[int], resumers: list[str],
         forks: ForkServer, snapshots: list[RunState]) -> tuple[RunState, list[Line]]:
    """Run the workflow, kill its executors as planned, resume it; return the run as it
    ended and the log (``snapshots`` gets the run as the store had it after each kill)."""
    log = folder / "steps.log"
    flow = folder / "flow.py"
    flow.write_text(plan.source(log))
    env = {**os.environ, "BRAIN_DATABASE_URL": url, "BRAIN_LEASE_SECONDS": "1"}
    executors: list[Executor] = []
    try:
        executors.append(forks.start(["brain", "run", str(flow)], env, folder, 0, "run"))
        for phase, target in enumerate(kills):
            executor = executors[-1]
            if phase > 0:  # aim within what is left to do (it may finish first: no kill then)
                left = [n for n in plan.executed()
                        if snapshots[-1].steps.get(n, None) is None
                        or snapshots[-1].steps[n].status != "succeeded"]
                target = min(target, 2 * len(left))
            if phase == 0 and target == 0:
                poll(lambda: not executors[0].alive() or read_runs(url, plan.name), 60,
                     "the run to be recorded")
            poll(lambda ex=executor, p=phase, n=target:
                 not ex.alive() or sum(line.phase == p for line in read_log(log)) >= n,
                 60, f"{target} lines from phase {phase}")
            executor.kill()
            runs = read_runs(url, plan.name)
            assert len(runs) == 1, f"a run was lost or doubled: {runs}"
            snapshots.append(runs[0])
            if runs[0].ended:
                break
            argv = (["brain", "worker", str(folder)] if resumers[phase] == "worker"
                    else ["resume", str(flow), runs[0].run_id])
            executors.append(forks.start(argv, env, folder, phase + 1, resumers[phase]))
        last = executors[-1]
        wait_finished(url, plan.name, 60, last.alive)
        # The run has ended: nothing of it runs any more, not even what a killed executor left
        # (whoever resumed ended that before running the step again).
        left = processes_mentioning(str(log))
        if left:
            time.sleep(1)
            left = processes_mentioning(str(log))
        assert not left, f"step processes still run after the run ended: {left}"
        last.stop()
        runs = read_runs(url, plan.name)
        assert len(runs) == 1, f"a run was lost or doubled: {runs}"
        return runs[0], read_log(log)
    finally:
        for executor in executors:
            with contextlib.suppress(Exception):
                executor.kill()


def outputs_of(folder: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                     for p in sorted(folder.glob("phase*.out")))


# --- what must hold ------------------------------------------------------------------------------------


def check(plan: FlowPlan, snapshots: list[RunState], final: RunState, lines: list[Line],
          stalled: set[int]) -> None:
    """What must hold once the run has ended. Phase ``p`` is the ``p``-th executor of the run
    (0: ``brain run``); ``snapshots[p]`` is the run as the store had it once phase ``p`` was
    killed (or had ended it); the last phase is the one that ended the run. ``stalled``:
    phases whose executor lost its lease to a stall and took the run again itself (as a kill
    and a resume in one process: a step may start twice there)."""
    assert final.status == "succeeded", f"the run ended {final.status}: {final.error}"
    assert final.ended
    rows = plan.rows()
    assert sorted(final.steps) == sorted(rows), "the run's step rows"
    executed = plan.executed()
    last = len(snapshots)
    by_label: dict[str, list[Line]] = {}
    for line in lines:
        assert line.label in executed, f"{line.label} ran, but it should not run at all"
        by_label.setdefault(line.label, []).append(line)

    for name, (step_plan, block, index) in rows.items():
        stored = final.steps[name]
        if block.each is not None and index is None and plan.runs(name):
            # A block's own row: every instance's output, in item order.
            assert stored.status == "succeeded", f"{name}: {stored.status}"
            instances = [final.steps[f"{name}[{i}]"].output for i in range(len(plan.items(block)))]
            assert json.loads(stored.output or "") == instances, name
            continue
        if name not in executed:
            assert stored.status == "skipped", f"{name}: {stored.status}"
            continue
        assert stored.status == "succeeded", f"{name}: {stored.status}"
        assert stored.tries >= 1
        mine = by_label.get(name, [])
        starts = Counter(line.phase for line in mine if line.event == "start")
        # An executor runs a step once (no retries are configured).
        assert all(n == 1 for p, n in starts.items() if p not in stalled), \
            f"{name} started twice under one executor: {mine}"
        # Once recorded succeeded, a step never runs again and keeps its result: the first
        # kill after which the store had it succeeded is the last phase it ran in.
        done_at = next((p for p, snap in enumerate(snapshots)
                        if name in snap.steps and snap.steps[name].status == "succeeded"), last)
        assert not [line for line in mine if line.phase > done_at], \
            f"{name} ran again after kill {done_at}, when it was recorded succeeded"
        if done_at < last:
            kept = snapshots[done_at].steps[name]
            assert (stored.output, stored.tries) == (kept.output, kept.tries), name
        # The output stored is that of a try that ran to the end, under the executor that
        # recorded it.
        assert starts[done_at] >= 1, f"{name} did not run under the executor that recorded it"
        if not step_plan.out:
            producer = [line for line in mine if line.event == "end" and line.token == stored.output]
            assert [line.phase for line in producer] == [done_at], \
                f"{name}: output {stored.output!r} from no try of phase {done_at} that ended"
        # Ran to the end more than once only when it was running at a kill: every other try
        # that ended began under an executor killed before it recorded the step. (The store
        # may still say ``pending`` then: a step is marked ``running`` a moment after it
        # starts, and one that dies unmarked simply runs again.)
        for line in mine:
            if line.event == "end" and line.phase != done_at:
                assert line.phase < done_at or line.phase in stalled, \
                    f"{name} ran to the end again under phase {line.phase}"
        # Never two tries at once: a try that ended did so before any other try started.
        open_tries: list[str] = []
        for line in mine:
            if line.event == "start":
                open_tries.append(line.token)
            else:
                assert open_tries[-1] == line.token, f"{name} ran twice at once: {mine}"
        # Every try got the output its referenced step has in the end (committed, so final).
        ref = plan.ref_row(name)
        if ref is not None:
            want = final.steps[ref].output
            assert all(line.got == want for line in mine), f"{name} got {mine}, not {want!r}"


# --- the property -----------------------------------------------------------------------------------


def scenario_folder(tmp_path: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=tmp_path, prefix="ex"))


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    server = ForkServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite file with the schema in place, copied for each example: creating the schema
    is the same work every time, and not what is tested here."""
    path = tmp_path_factory.mktemp("crash-template") / "brain.db"
    brain = Path(sys.executable).with_name("brain")
    argv = [str(brain)] if brain.exists() else [sys.executable, "-m", "brain.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "THE_BRAIN_"))}
    subprocess.run([*argv, "db", "upgrade"], env={**env, "BRAIN_DATABASE_URL": f"sqlite:///{path}"},
                   check=True, capture_output=True, timeout=60)
    return path


def run_and_check(folder: Path, url: str, plan: FlowPlan, kills: list[int],
                  resumers: list[str], forks: ForkServer) -> None:
    snapshots: list[RunState] = []
    final = None
    try:
        final, lines = play(folder, url, plan, kills, resumers, forks, snapshots)
        stalled = {int(p.name[5:].split("-")[0]) for p in folder.glob("phase*.out")
                   if "could not be renewed" in p.read_text(errors="replace")}
        check(plan, snapshots, final, lines, stalled)
    except AssertionError as exc:
        log = (folder / "steps.log").read_text() if (folder / "steps.log").exists() else ""
        raise AssertionError(
            f"{exc}\n\nkills after {kills} lines, resumed by {resumers}\n"
            f"snapshots: {snapshots}\nfinal: {final}\n\nlog:\n{log}\n{outputs_of(folder)}\n\n"
            f"flow:\n{(folder / 'flow.py').read_text()}") from None


BRANCHY = FlowPlan("crashy", (
    Block((StepPlan("s1", "func", 0.05, out='["0","1"]'),)),
    Block((StepPlan("s2", "shell", 0.15, ref="s1"), StepPlan("s3", "func", 0.0, out="false")),
          parallel=True),
    Block((StepPlan("s4", "shell", 0.05, ref="s2"), StepPlan("s5", "func", 0.05, ref="s4")),
          each="s1"),
    Block((StepPlan("s6", "shell", 0.05, ref="s5"),), when="s3", negate=True),
    Block((StepPlan("s7", "shell", 0.0),), when="s3"),
))

# A shell step killed with ``brain run`` sleeps on: the resumer must end it first.
LINGERING = FlowPlan("crashy", (
    Block((StepPlan("s1", "shell", 0.0, linger=1.5),)),
    Block((StepPlan("s2", "func", 0.05), StepPlan("s3", "shell", 0.0, ref="s1")), parallel=True),
))

# Under a false condition, and a for_each step reading a skipped step: skipped instances.
SKIPPING = FlowPlan("crashy", (
    Block((StepPlan("s1", "func", 0.0, out="false"),)),
    Block((StepPlan("s2", "func", 0.0),), when="s1"),
    Block((StepPlan("s3", "shell", 0.05), StepPlan("s4", "func", 0.0, ref="s2")),
          each=("0", "1")),
    Block((StepPlan("s5", "shell", 0.0, ref="s3"),), when="s1", negate=True),
    Block((StepPlan("s6", "func", 0.0, ref="s2"),), each=("0",)),  # skipped as a whole
))


@pytest.mark.timeout(600)
@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@example(scenario=(BRANCHY, [5], ["worker"]))  # mid-instance, for_each expanded
@example(scenario=(BRANCHY, [3, 2], ["lease", "worker"]))  # mid-step twice
@example(scenario=(LINGERING, [1], ["worker"]))
@example(scenario=(LINGERING, [1], ["lease"]))
@example(scenario=(SKIPPING, [3], ["worker"]))
@given(scenario=scenarios())
def test_a_killed_run_resumes_and_no_recorded_step_runs_again(
        tmp_path: Path, forks: ForkServer, sqlite_template: Path,
        scenario: tuple[FlowPlan, list[int], list[str]]) -> None:
    plan, kills, resumers = scenario
    folder = scenario_folder(tmp_path)
    shutil.copyfile(sqlite_template, folder / "brain.db")
    run_and_check(folder, f"sqlite+aiosqlite:///{folder / 'brain.db'}", plan, kills, resumers,
                  forks)


@pytest.mark.timeout(300)
@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(scenario=scenarios())
def test_a_killed_run_resumes_on_postgresql(
        tmp_path: Path, brain_cmd: list[str], forks: ForkServer, fresh_pg_url: str,
        scenario: tuple[FlowPlan, list[int], list[str]]) -> None:
    """The same on one PostgreSQL database (each example's workflow has a name of its own)."""
    plan, kills, resumers = scenario
    folder = scenario_folder(tmp_path)
    plan = dataclasses.replace(plan, name=f"crashy_{folder.name[2:]}")
    upgrade_once(fresh_pg_url, brain_cmd)
    run_and_check(folder, fresh_pg_url, plan, kills, resumers, forks)


_upgraded: set[str] = set()


def upgrade_once(url: str, brain_cmd: list[str]) -> None:
    """``brain db upgrade`` on a fresh PostgreSQL database, once."""
    if url not in _upgraded:
        subprocess.run([*brain_cmd, "db", "upgrade"], env={**os.environ, "BRAIN_DATABASE_URL": url},
                       check=True, capture_output=True, timeout=60)
        _upgraded.add(url)
