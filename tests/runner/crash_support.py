"""The machinery of ``test_crash_property.py``: a plan of a random workflow, its source, the
processes that execute it and are killed, and the log its steps write.

Every step appends a ``start`` line when it begins and an ``end`` line when its work is done
(``LABEL start|end PHASE PID TOKEN GOT``: the step or instance name, the executor it ran
under, that executor's pid, a token unique to this try, and the output of the step it
references, or ``-``). A try's token is its output, so a stored output names the try that
produced it. Lines are single ``O_APPEND`` writes (``printf`` in ``dash``, ``os.write`` in
Python), so they are never torn. The executor a line belongs to comes from ``CRASH_PHASE`` in
the environment (a shell step inherits it from the executor that started it), not from a pid,
so a step left running by a killed executor still counts as that executor's.

Executors are forked from :class:`ForkServer`, a process that has imported The Brain once:
``brain run FILE`` and ``brain worker FOLDER`` (the console script's ``main``), or the resume
script below. ``python crash_support.py resume FLOW RUN_ID`` calls ``resume_run`` until the
run's lease has expired and it is taken, as a process that finds the run abandoned would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

FINISHED = ("succeeded", "failed", "cancelled")


# --- the plan of a workflow ---------------------------------------------------------------------


@dataclass(frozen=True)
class StepPlan:
    """One step: a shell step or a call of the ``work`` ``@step`` function."""

    name: str
    kind: Literal["shell", "func"]
    pause: float  # seconds it sleeps between its start and end lines
    ref: str | None = None  # an earlier step whose output it takes (a data edge)
    out: str = ""  # a fixed output ("true", "false", a JSON list); "" → the try's token
    #: More seconds a shell step sleeps under ``brain run`` only: killed then, it outlives
    #: its executor, and whoever resumes the run must end it before running the step again.
    linger: float = 0.0


@dataclass(frozen=True)
class Block:
    """Steps called one after the other, or side by side (``parallel``), or once per item
    (``each``: literal items, or the name of a step whose output is their JSON list); the
    whole block under ``when`` (a step's name; ``negate``: ``when(~step)``) if set."""

    steps: tuple[StepPlan, ...]
    parallel: bool = False
    each: tuple[str, ...] | str | None = None
    when: str | None = None
    negate: bool = False


@dataclass(frozen=True)
class FlowPlan:
    """A workflow named ``name``: its blocks in call order, steps named ``s1``, ``s2``, ...;
    what its run should hold (rows, what runs and what is skipped) follows from it."""

    name: str
    blocks: tuple[Block, ...]

    def steps(self) -> Iterator[tuple[Block, StepPlan]]:
        for block in self.blocks:
            for plan in block.steps:
                yield block, plan

    def plan(self, name: str) -> tuple[Block, StepPlan]:
        return next((b, s) for b, s in self.steps() if s.name == name)

    def items(self, block: Block) -> list[str]:
        """What ``block.each`` runs over (the items a step's fixed output lists)."""
        if isinstance(block.each, str):
            return list(json.loads(self.plan(block.each)[1].out))
        return list(block.each or ())

    def block_runs(self, block: Block) -> bool:
        """Whether the block's condition holds and its items exist."""
        if block.when is not None:
            _, cond = self.plan(block.when)
            if not self.runs(cond.name) or (cond.out == "true") == block.negate:
                return False
        return not isinstance(block.each, str) or self.runs(block.each)

    def runs(self, name: str) -> bool:
        """Whether the step (every instance of it) runs, rather than ends ``skipped``: its
        block runs and every step it takes data from runs."""
        block, plan = self.plan(name)
        return self.block_runs(block) and (plan.ref is None or self.runs(plan.ref))

    def rows(self) -> dict[str, tuple[StepPlan, Block, int | None]]:
        """Every step row the finished run holds: a block's instances after its own row."""
        rows: dict[str, tuple[StepPlan, Block, int | None]] = {}
        for block, plan in self.steps():
            rows[plan.name] = (plan, block, None)
            # A block whose every step is skipped is skipped as a whole: no instance rows.
            if block.each is not None and any(self.runs(s.name) for s in block.steps):
                for index in range(len(self.items(block))):
                    rows[f"{plan.name}[{index}]"] = (plan, block, index)
        return rows

    def executed(self) -> list[str]:
        """The rows whose work runs (and writes lines): steps outside ``for_each`` blocks,
        and instances."""
        return [name for name, (plan, block, index) in self.rows().items()
                if self.runs(plan.name) and (block.each is None or index is not None)]

    def ref_row(self, name: str) -> str | None:
        """The row whose output the executed row ``name`` takes: the same instance of a step
        of its own ``for_each`` block, else the step's own row."""
        plan, block, index = self.rows()[name]
        if plan.ref is None:
            return None
        if index is not None and any(s.name == plan.ref for s in block.steps):
            return f"{plan.ref}[{index}]"
        return plan.ref

    def source(self, log: Path) -> str:
        """The workflow file."""
        body: list[str] = []
        for number, block in enumerate(self.blocks):
            indent = "    "
            if block.when is not None:
                body.append(f"{indent}with when({'~' if block.negate else ''}{block.when}):")
                indent += "    "
            if block.parallel:
                body.append(f"{indent}with parallel():")
                indent += "    "
            item = None
            if block.each is not None:
                item = f"item{number}"
                items = block.each if isinstance(block.each, str) else repr(list(block.each))
                body.append(f"{indent}with for_each({items}) as {item}:")
                indent += "    "
            for plan in block.steps:
                label = f'f"{plan.name}[{{{item}}}]"' if item else repr(plan.name)
                got = f'f"{{{plan.ref}}}"' if plan.ref else '""'
                if plan.kind == "shell":
                    call = (f'shell({plan.name!r}, argv=["sh", "-c", SCRIPT, "sh", {label}, '
                            f'{got}, {plan.out!r}, "{plan.pause}", "{plan.linger}"])')
                else:
                    call = (f'work.with_options(name={plan.name!r})({label}, {plan.pause}, '
                            f'{got}, {plan.out!r})')
                body.append(f"{indent}{plan.name} = {call}")
        script = SHELL_SCRIPT.format(log=_sh_quote(str(log)))
        return FLOW_TEMPLATE.format(log=str(log), script=script, name=self.name,
                                    body="\n".join(body))


# The step in a shell: $1 label, $2 the referenced output, $3 a fixed output, $4 the pause,
# $5 the linger.
SHELL_SCRIPT = (
    "printf '%s start %s %s s%s %s\\n' \"$1\" \"$CRASH_PHASE\" \"$PPID\" \"$$\" \"${{2:--}}\" >> {log}\n"
    "[ \"$4\" = 0.0 ] || sleep \"$4\"\n"
    "[ \"$5\" = 0.0 ] || [ \"$CRASH_PHASE\" != 0 ] || sleep \"$5\"\n"
    "printf '%s end %s %s s%s %s\\n' \"$1\" \"$CRASH_PHASE\" \"$PPID\" \"$$\" \"${{2:--}}\" >> {log}\n"
    "if [ -n \"$3\" ]; then printf '%s\\n' \"$3\"; else echo \"s$$\"; fi\n"
)

FLOW_TEMPLATE = '''\
import os
import time
import uuid

from brain import for_each, parallel, shell, step, when, workflow

LOG = {log!r}
SCRIPT = {script!r}


def line(*words: str) -> None:
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (" ".join(words) + "\\n").encode())
    finally:
        os.close(fd)


@step
def work(label: str, pause: float, got: str, out: str) -> str:
    token = "f" + uuid.uuid4().hex[:12]
    phase, pid = os.environ["CRASH_PHASE"], str(os.getpid())
    line(label, "start", phase, pid, token, got or "-")
    time.sleep(pause)
    line(label, "end", phase, pid, token, got or "-")
    return out or token


@workflow(name={name!r})
def flow():
{body}
'''


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# --- the log ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    label: str
    event: Literal["start", "end"]
    phase: int
    pid: int
    token: str
    got: str


def read_log(log: Path) -> list[Line]:
    if not log.exists():
        return []
    lines = []
    for text in log.read_text().splitlines():
        label, event, phase, pid, token, got = text.split(" ")
        assert event in ("start", "end"), text
        lines.append(Line(label, event, int(phase), int(pid), token, got))  # type: ignore[arg-type]
    return lines


# --- processes ----------------------------------------------------------------------------------------


@dataclass
class Executor:
    """A process executing (or resuming) the run, in a session of its own (its pid is its
    process group's id). The fork server's child, not ours: the kernel reaps it, and its pid
    may soon be another process's, so it is known by its pid and its start time."""

    phase: int
    pid: int
    started: int  # the start time in /proc/PID/stat, in clock ticks
    output: Path
    kind: str

    def alive(self) -> bool:
        return start_ticks(self.pid) == self.started

    def kill(self) -> None:
        """SIGKILL its whole process group (its step processes are in groups of their own)."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            poll(lambda: not self.alive(), 10, f"executor {self.pid} to die", step=0.001)

    def stop(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                poll(lambda: not self.alive(), 15, f"executor {self.pid} to stop", step=0.01)
            except AssertionError:
                self.kill()


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot); ``None`` once it has ended
    (a zombie included)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


class ForkServer:
    """``python crash_support.py forkserver``: a process that has imported The Brain once and
    forks every executor from there, so that an executor starts in milliseconds rather than
    in the few hundred of a fresh interpreter (with two shared cores, that is most of the
    test's time). Each child is a process of its own, in a session of its own, running the
    ``brain`` console script's own ``main`` (or the resume script below) with the
    environment, folder and output it is given: what ``brain run FILE`` would run, minus the
    imports."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "forkserver"], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        assert ready == "ready\n", f"the fork server did not start: {ready!r}"

    def start(self, argv: list[str], env: dict[str, str], folder: Path, phase: int,
              kind: str) -> Executor:
        """Start ``argv`` (``["brain", ...]`` or ``["resume", FLOW, RUN_ID]``) as executor
        ``phase`` (its lines say ``CRASH_PHASE``), its output in ``folder``."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        output = folder / f"phase{phase}-{kind}.out"
        request = {"argv": argv, "env": {**env, "CRASH_PHASE": str(phase)},
                   "cwd": str(folder), "output": str(output)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        pid, started = map(int, self.proc.stdout.readline().split())
        return Executor(phase, pid, started, output, kind)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


PRELOADED = ("aiosqlite", "asyncpg", "sqlalchemy.dialects.sqlite.aiosqlite",
             "sqlalchemy.dialects.postgresql.asyncpg", "brain", "brain.cli", "brain.cli.commands",
             "brain.cli.serve", "brain.loader", "brain.runner", "brain.service", "brain.store")


def _serve_forks() -> None:
    import importlib
    import threading

    # What ``brain run``, ``brain worker`` and the resume script import, on either database.
    for module in PRELOADED:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        assert threading.active_count() == 1, "forking a process with threads"
        pid = os.fork()
        if pid == 0:
            _child(request)
        # Answer once the child leads a session of its own: killing its group then kills it.
        with contextlib.suppress(ProcessLookupError):
            while os.getpgid(pid) != pid:
                time.sleep(0.0002)
        print(pid, start_ticks(pid) or 0, flush=True)


def _child(request: dict[str, Any]) -> None:
    """Become the executor the request describes; never returns."""
    import atexit
    import ctypes
    import traceback

    code: int = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # asyncio waits for the step processes
        os.setsid()
        # Should the test process die, the fork server's stdin closes and it ends: its
        # executors end with it (PR_SET_PDEATHSIG) rather than serve on unseen.
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
        out = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdin = open(os.devnull)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = request["argv"]
        sys.argv = argv
        if argv[0] == "brain":
            from brain.cli import main

            main(argv[1:])
        else:
            _, flow, run_id = argv
            code = asyncio.run(_resume(flow, run_id))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def processes_mentioning(marker: str) -> list[int]:
    """Live processes (zombies aside) whose command line holds ``marker``: the step shells,
    whose script names the log."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and stat[stat.rfind(b")") + 2:][:1] != b"Z":
            found.append(int(entry))
    return found


def poll(predicate: Callable[[], Any], seconds: float, what: str, step: float = 0.005) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


# --- the store ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepRow:
    status: str
    tries: int
    output: str | None


@dataclass(frozen=True)
class RunState:
    run_id: str
    status: str
    ended: bool
    error: str | None
    steps: dict[str, StepRow] = field(default_factory=dict)


def read_runs(url: str, workflow: str) -> list[RunState]:
    """Every run of ``workflow`` in the database, with its steps."""

    async def go() -> list[RunState]:
        from brain.store import Store

        async with Store(url) as store:
            found = await store.list_runs(workflow=workflow, limit=100)
            states = []
            for run in found:
                full = await store.get_run(run.run_id)
                states.append(RunState(
                    full.run_id, full.status.value, full.ended_at is not None, full.error,
                    {n: StepRow(s.status.value, s.tries, s.output) for n, s in full.steps.items()}))
            return states

    return asyncio.run(go())


def wait_finished(url: str, workflow: str, seconds: float,
                  alive: Callable[[], bool]) -> None:
    """Poll until every run of ``workflow`` has ended (bounded; stops early when the
    executing process is gone)."""

    async def go() -> None:
        from brain.store import Store

        deadline = time.monotonic() + seconds
        async with Store(url) as store:
            while time.monotonic() < deadline:
                found = await store.list_runs(workflow=workflow, limit=100)
                if found and all(r.status.value in FINISHED for r in found):
                    return
                if not alive():
                    return
                await asyncio.sleep(0.02)

    asyncio.run(go())


# --- resuming by lease expiry ---------------------------------------------------------------------------


async def _resume(flow: str, run_id: str) -> int:
    from brain.loader import load_file
    from brain.runner import resume_run
    from brain.store import Store

    workflows = load_file(Path(flow))
    (wf,) = workflows.values()
    deadline = time.monotonic() + 60
    async with Store() as store:
        while time.monotonic() < deadline:
            result = await resume_run(wf, store, run_id)
            if result is not None:  # still running if its lease ran out meanwhile (a stall)
                print(f"resumed: {result.status.value} {result.error}", flush=True)
            run = await store.get_run(run_id, with_steps=False)
            if run.status.value in FINISHED:
                return 0
            await asyncio.sleep(0.05)
    print("never resumed", flush=True)
    return 1


if __name__ == "__main__":
    if sys.argv[1:] == ["forkserver"]:
        _serve_forks()
    else:
        command, flow_path, run = sys.argv[1:]
        assert command == "resume"
        sys.exit(asyncio.run(_resume(flow_path, run)))
