"""Steps' logs on the terminal: ``brain logs RUN_ID [STEP] [--follow]``, and the lines
``brain run`` prints as its steps write them.

Each line is printed as ``STEP | TEXT`` (the names padded to one width), the way
``docker compose logs`` prints its services' lines; a line the step wrote to its standard
error as ``STEP ! TEXT``. Control characters a step wrote (a terminal's escape sequences
among them) are shown, not obeyed (:func:`brain.cli.terminal.shown`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable, Sequence
from typing import IO, TYPE_CHECKING

from brain.cli.terminal import shown
from brain.results import FINISHED_RUN, FINISHED_STEP, LogLine, RunResult

if TYPE_CHECKING:
    from brain.runner.events import LogEvent
    from brain.service.api import BrainApi

#: How often ``--follow`` looks for new lines.
FOLLOW_SECONDS = 0.5

#: What sets a line's text off from its step's name: ``!`` for what the step wrote to its
#: standard error (readable without colours), ``|`` for the rest.
SEPARATORS = {"stderr": "!"}


class LinePrinter:
    """Prints steps' log lines, ``STEP | TEXT``, to ``stream`` (standard error for
    ``brain run``, whose standard output may be its JSON)."""

    def __init__(self, names: Iterable[str] = (), stream: IO[str] | None = None) -> None:
        self.width = max((len(n) for n in names), default=0)
        self.stream = stream

    def print_lines(self, step: str, lines: Iterable[LogLine]) -> None:
        """Print ``lines`` of ``step``."""
        self.width = max(self.width, len(step))
        name = shown(f"{step:<{self.width}}")
        out = self.stream or sys.stdout
        try:
            out.write("".join(f"{name} {SEPARATORS.get(ln.stream, '|')} {shown(ln.text)}\n"
                              for ln in lines))
            out.flush()
        except BrokenPipeError:  # `| head` closed: the CLI ends quietly (see brain.cli)
            raise
        except (OSError, ValueError):
            pass

    def __call__(self, event: LogEvent) -> None:
        """As ``on_log`` of a run: print the new lines as they come."""
        self.print_lines(event.step, event.lines)


def cmd_logs(args: argparse.Namespace) -> int:
    """``brain logs RUN_ID [STEP] [--follow]``: a run's steps' logs (or one step's)."""
    from brain.cli.commands import with_api

    return with_api(lambda api: show_logs(api, args.run_id, args.step, args.follow))


async def show_logs(api: BrainApi, run_id: str, step: str | None, follow: bool) -> int:
    """Print the stored lines of ``step`` (every step, in step order, when ``None``);
    with ``follow``, go on printing new lines until the step (or the run) has ended."""
    run = await api.run(run_id)  # RunNotFound: a clear message from the CLI
    if step is not None and step not in run.steps:
        from brain.cli import render

        render.error(f"run {run.run_id} has no step {step!r} "
                     f"(its steps: {', '.join(run.steps) or 'none'})")
        return 2
    names = [step] if step is not None else list(run.steps)
    printer = LinePrinter(names)
    after = dict.fromkeys(names, 0)
    while True:
        # The status first: a step's last lines are stored before its end.
        ended = _has_ended(run, step)
        for name in names:
            lines = await api.log_lines(run.run_id, name, after=after[name])
            while lines:
                printer.print_lines(name, lines)
                after[name] = lines[-1].seq
                lines = await api.log_lines(run.run_id, name, after=after[name])
        if not follow or ended:
            if not any(after.values()):
                _say_no_lines(run, step, follow)
            return 0
        await asyncio.sleep(FOLLOW_SECONDS)
        run = await api.run(run.run_id)
        names += [n for n in run.steps if step is None and n not in after]  # new instances
        after.update({n: 0 for n in names if n not in after})


def _say_no_lines(run: RunResult, step: str | None, follow: bool) -> None:
    """Say on stderr that there was nothing to print (stdout stays empty, as data)."""
    from brain.cli import render

    whose = f"step {step!r} of run {run.run_id}" if step is not None else f"run {run.run_id}"
    render.note(f"no log lines for {whose}" + ("" if follow or _has_ended(run, step)
                                              else " yet (--follow waits for them)"))


def _has_ended(run: RunResult, step: str | None) -> bool:
    if run.status in FINISHED_RUN:
        return True
    return step is not None and run.steps[step].status in FINISHED_STEP


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """The ``logs`` command's arguments."""
    p = sub.add_parser("logs", parents=list(parents),
                       help="print a run's step logs (one step's with STEP)",
                       description="Print the log lines a run's steps wrote (the first 8 KiB "
                                   "and the last 64 KiB of each), as STEP | TEXT.")
    p.add_argument("run_id", metavar="RUN_ID", help="a run id (a unique prefix will do)")
    p.add_argument("step", metavar="STEP", nargs="?", help="only this step's log")
    p.add_argument("-f", "--follow", action="store_true",
                   help="go on printing new lines until the step (or the run) has ended")
