"""Terminal output for the CLI (rich): progress on stderr, tables and details."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from brain.cli import silence

if TYPE_CHECKING:
    from rich.table import Table

    from brain.results import RunResult
    from brain.runner.events import StepEvent
    from brain.workflow import Workflow


class _Console(Console):
    """A console that goes quiet when its reader closes the pipe.

    rich's own handling exits the process with status 1, from wherever the
    print happened (even inside a run's progress callback); here the command
    goes on and ends with its normal exit code.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        silence(self.file)


# soft_wrap: never re-wrap text at the terminal width; emoji=False: never turn a :name: in
# an output or a message into an emoji (outputs and messages stay intact).
err = _Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
out = _Console(highlight=False, soft_wrap=True, emoji=False)


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout as is (data, not markup) and flush it; a reader that has
    gone away (``| head``, ``| true``) ends the output quietly."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        silence(sys.stdout)


_MARK = {"succeeded": "[green]✓[/]", "failed": "[red]✗[/]", "skipped": "[dim]-[/]",
         "cancelled": "[yellow]■[/]", "running": "[cyan]▶[/]", "retrying": "[yellow]↻[/]",
         "queued": "[dim]…[/]", "pending": "[dim]·[/]"}
_STYLE = {"succeeded": "green", "failed": "red", "cancelled": "yellow", "running": "cyan",
          "queued": "dim", "skipped": "dim", "pending": "dim"}


def error(message: str) -> None:
    """An error line on stderr (no traceback)."""
    err.print(f"[red]error:[/] {escape(message)}")


def warning(message: str) -> None:
    """A warning line on stderr."""
    err.print(f"[yellow]warning:[/] {escape(message)}")


def ok(message: str) -> None:
    """A plain confirmation on stderr."""
    err.print(escape(message))


def _preview(text: str | None, width: int = 60) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    more = "…" if len(line) > width or "\n" in text.strip() else ""
    return escape(line[:width]) + more


_FINAL_STEP = frozenset({"succeeded", "failed", "skipped", "cancelled"})


class Progress:
    """Prints one line per step event as a run goes (the live view of ``brain run``).

    The header comes with the first event, so a run that cannot even start (an
    unusable database) shows only its error. Each step shows its final status
    once: a later final event for the same step (a step that failed just as the
    run was cancelled) is not shown.
    """

    def __init__(self, wf: Workflow) -> None:
        self.wf = wf
        self.started = time.perf_counter()
        self._header_shown = False
        self._ended: set[str] = set()

    def _header(self) -> None:
        self._header_shown = True
        count = len(self.wf.spec.steps)
        err.print(f"[bold]{escape(self.wf.name)}[/] · {count} step{'s' if count != 1 else ''}")

    def __call__(self, event: StepEvent) -> None:
        if event.step in self._ended:
            return
        if event.status in _FINAL_STEP:
            self._ended.add(event.step)
        if not self._header_shown:
            self._header()
        mark = _MARK.get(event.status, event.status)
        name = escape(event.step)
        took = f" [dim]{event.seconds:.2f}s[/]" if event.seconds is not None else ""
        if event.status == "running":
            err.print(f"  {mark} {name} [dim]({event.kind})[/]")
        elif event.status in ("failed", "retrying"):
            tries = f" [dim](try {event.tries})[/]" if event.tries > 1 or event.status == "retrying" else ""
            err.print(f"  {mark} {name}{took}{tries}: [red]{escape(event.error or '')}[/]")
        else:
            err.print(f"  {mark} {name} {event.status}{took}")


def run_summary(result: RunResult) -> None:
    """The closing lines of ``brain run``: the status and the last output."""
    style = _STYLE.get(str(result.status), "")
    took = ""
    if result.started_at and result.ended_at:
        took = f" in {(result.ended_at - result.started_at).total_seconds():.2f}s"
    last = [s for s in result.steps.values() if s.status == "succeeded"]
    if result.succeeded and last and last[-1].output:
        write_stdout(last[-1].output + "\n")  # data, written as is
    err.print(f"run [bold]{result.run_id[:12]}[/] [{style}]{result.status}[/]{took}"
              + (f": {escape(result.error)}" if result.error else "")
              + f"  [dim](brain show {result.run_id[:12]})[/]")


def _table() -> Table:
    from rich.table import Table  # only the commands that print tables need it

    return Table(box=None, pad_edge=False)


def _when(t: datetime | None) -> str:
    return t.astimezone().strftime("%Y-%m-%d %H:%M:%S") if t else ""


def runs_table(results: list[RunResult]) -> None:
    """``brain runs``."""
    if not results:
        err.print("no runs")
        return
    table = _table()
    for col in ("run", "workflow", "status", "event", "started", "took", "error"):
        table.add_column(col)
    for r in results:
        took = (f"{(r.ended_at - r.started_at).total_seconds():.2f}s"
                if r.started_at and r.ended_at else "")
        table.add_row(r.run_id[:12], escape(r.workflow),
                      f"[{_STYLE.get(str(r.status), '')}]{r.status}[/]", r.trigger.event,
                      _when(r.started_at or r.created_at), took, escape((r.error or "")[:60]))
    out.print(table)


def run_detail(r: RunResult) -> None:
    """``brain show``."""
    out.print(f"[bold]run {r.run_id}[/]  {escape(r.workflow)}  "
              f"[{_STYLE.get(str(r.status), '')}]{r.status}[/]")
    body = f"  body: {_preview(r.trigger.body)}" if r.trigger.body else ""
    path = f"  path: {escape(r.trigger.path)}" if r.trigger.path else ""
    out.print(f"trigger: {r.trigger.event}{body}{path}")
    out.print(f"created {_when(r.created_at)}  started {_when(r.started_at)}  ended {_when(r.ended_at)}")
    if r.error:
        out.print(f"[red]error:[/] {escape(r.error)}")
    table = _table()
    for col in ("step", "kind", "status", "tries", "took", "output / error"):
        table.add_column(col)
    for s in r.steps.values():
        took = (f"{(s.ended_at - s.started_at).total_seconds():.2f}s"
                if s.started_at and s.ended_at else "")
        detail = f"[red]{escape(s.error)}[/]" if s.error else _preview(s.output)
        table.add_row(escape(s.name), s.kind, f"[{_STYLE.get(str(s.status), '')}]{s.status}[/]",
                      str(s.tries), took, detail)
    out.print(table)


def graph(wf: Workflow) -> None:
    """``brain graph`` as text: each step and what it waits for."""
    out.print(f"[bold]{escape(wf.name)}[/]")
    waits: dict[str, list[str]] = {n: [] for n in wf.graph.nodes}
    for up, down in wf.graph.edges:
        waits[down].append(up)
    blocks = {name: group for group in wf.graph.groups for name in group.steps}
    for name in wf.graph.nodes:
        group = blocks.get(name)
        if group is not None and group.steps[0] == name:
            out.print(f"  [cyan]{escape(group.label)}[/] [dim]({group.max_parallel} at a time)[/]")
        indent = "    " if group is not None else "  "
        after = f"  [dim]← {', '.join(waits[name])}[/]" if waits[name] else ""
        conditions = wf.graph.conditions.get(name)
        when = f"  [yellow]when {escape(' and '.join(conditions))}[/]" if conditions else ""
        out.print(f"{indent}{escape(name)}{when}{after}")


def tools(listing: list[dict[str, Any]]) -> None:
    """``brain mcp tools``: each tool, its description and its input schema."""
    import json

    if not listing:
        err.print("the server offers no tools")
        return
    for tool in listing:
        out.print(f"[bold]{escape(tool['name'])}[/]")
        if tool.get("description"):
            for line in str(tool["description"]).strip().splitlines():
                out.print(f"  {escape(line)}")
        schema = json.dumps(tool.get("inputSchema") or {}, indent=2, ensure_ascii=False)
        out.print("  input schema:")
        for line in schema.splitlines():
            out.print(f"    {escape(line)}")
        out.print("")
