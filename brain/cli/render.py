"""Terminal output for the CLI (rich): progress on stderr, tables and details.

Markup (colours, bold) is written here only; text that comes from a run, a workflow or a
server goes in as :func:`data` (a ``rich.text.Text``: never read as markup, its control
characters shown as codes by :func:`brain.cli.terminal.shown`)."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from brain.cli import silence
from brain.cli.terminal import shown
from brain.results import FINISHED_STEP

if TYPE_CHECKING:
    from rich.table import Table

    from brain.dsl.model import WorkflowGraph
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


#: The width of a console whose stream is not a terminal (a pipe, a file) and that
#: ``COLUMNS`` does not size: wide enough that no table is cut or wrapped (rich would
#: otherwise assume 80 columns).
PIPE_WIDTH = 100_000


def _width(stream: object) -> int | None:
    """The width to give a console on ``stream``: the terminal's own (``None``), the one
    ``COLUMNS`` says, or :data:`PIPE_WIDTH` when nothing can be cut."""
    isatty = getattr(stream, "isatty", None)
    try:
        terminal = bool(isatty()) if isatty is not None else False
    except (OSError, ValueError):  # a closed stream
        terminal = False
    if terminal or os.environ.get("COLUMNS", "").isdigit():
        return None
    return PIPE_WIDTH


# soft_wrap: never re-wrap text at the terminal width; emoji=False: never turn a :name: in
# an output or a message into an emoji (outputs and messages stay intact).
err = _Console(stderr=True, highlight=False, soft_wrap=True, emoji=False,
               width=_width(sys.stderr))
out = _Console(highlight=False, soft_wrap=True, emoji=False, width=_width(sys.stdout))


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 step``, ``2 steps``, ``0 steps``; ``many`` for an irregular plural.

    >>> plural(1, "run"), plural(3, "run"), plural(2, "memory", "memories")
    ('1 run', '3 runs', '2 memories')
    """
    return f"{count} {word if count == 1 else (many or word + 's')}"


def data(text: object, style: str = "") -> Text:
    """Text from a run, a workflow, a server or the user, ready to print: its control
    characters shown as codes (``\\x1b``), its brackets never read as markup."""
    return Text(shown(str(text)), style=style)


def line(*parts: str | Text) -> Text:
    """One printed line of ``parts``: markup written in this module (``str``) and
    :func:`data` (``Text``), side by side."""
    return Text.assemble(*(p if isinstance(p, Text) else Text.from_markup(p, emoji=False)
                           for p in parts))


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
         "queued": "[dim]…[/]", "pending": "[dim]·[/]", "waiting": "[magenta]⏸[/]"}
STYLE = {"succeeded": "green", "failed": "red", "cancelled": "yellow", "running": "cyan",
          "queued": "dim", "skipped": "dim", "pending": "dim", "waiting": "magenta"}


def write_data(text: str) -> None:
    """Write a run's output to stdout: as is into a pipe or a file (it is data), with its
    control characters shown as codes on a terminal (a person reads it there)."""
    try:
        terminal = sys.stdout.isatty()
    except (OSError, ValueError):  # a closed stream
        terminal = False
    write_stdout(shown(text) if terminal else text)


def error(message: str) -> None:
    """An error line on stderr (no traceback)."""
    err.print(line("[red]error:[/] ", data(message)))


def warning(message: str) -> None:
    """A warning line on stderr."""
    err.print(line("[yellow]warning:[/] ", data(message)))


def ok(message: str) -> None:
    """A plain confirmation on stderr."""
    err.print(data(message))


def result(message: str, *, dim: bool = False) -> None:
    """A line of a command's result on stdout (``brain check``'s verdicts)."""
    out.print(data(message, "dim" if dim else ""))


def note(message: str) -> None:
    """A line of information on stderr, set off from the run's own lines."""
    err.print(line("[cyan]note:[/] ", data(message)))


#: The largest output ``brain show`` reads as JSON for its preview (a longer one shows its
#: first line).
PREVIEW_JSON_CHARS = 1_000_000


def preview(text: str | None, width: int = 60) -> Text:
    """An output in at most ``width`` characters (and ``…``): a JSON object or array on one
    line, compacted; any other text's first line."""
    stripped = (text or "").strip()
    if not stripped:
        return Text("")
    compact = _compact_json(stripped)
    if compact is not None:
        first, more = shown(compact), False
    else:  # escaped first: a vertical tab or a form feed is shown, not taken for a line end
        lines = shown(lines_ended(stripped)).strip().split("\n")
        first, more = lines[0], len(lines) > 1
    if len(first) > width:
        first, more = first[:width], True
    return Text(first + ("…" if more else ""))


def lines_ended(text: str) -> str:
    """``text`` with its lines ended by ``\\n`` alone (``\\r\\n`` is one line end, not a
    control character to show)."""
    return text.replace("\r\n", "\n")


def _compact_json(text: str) -> str | None:
    """``text`` as one line of JSON when it is a JSON object or array (else ``None``)."""
    if text[0] not in "{[" or len(text) > PREVIEW_JSON_CHARS:
        return None
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(", ", ": "))
    except (ValueError, RecursionError):  # not JSON after all, or nested too deep to read
        return None


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
        err.print(line(data(self.wf.name, "bold"), f" · {plural(len(self.wf.spec.steps), 'step')}"))

    def __call__(self, event: StepEvent) -> None:
        if event.step in self._ended:
            return
        if event.status in FINISHED_STEP:
            self._ended.add(event.step)
        if not self._header_shown:
            self._header()
        mark = line(_MARK[event.status]) if event.status in _MARK else data(event.status)
        name = data(event.step)
        took = f" [dim]{event.seconds:.2f}s[/]" if event.seconds is not None else ""
        if event.status == "running":
            err.print(line("  ", mark, " ", name, " ", data(f"({event.kind})", "dim")))
        elif event.status in ("failed", "retrying"):
            tries = f" [dim](try {event.tries})[/]" if event.tries > 1 or event.status == "retrying" else ""
            err.print(line("  ", mark, " ", name, f"{took}{tries}: ", data(event.error or "", "red")))
        else:
            err.print(line("  ", mark, " ", name, f" {event.status}{took}"))


def run_summary(result: RunResult) -> None:
    """The closing lines of ``brain run``: the status and the last output."""
    style = STYLE.get(str(result.status), "")
    took = ""
    if result.started_at and result.ended_at:
        took = f" in {(result.ended_at - result.started_at).total_seconds():.2f}s"
    last = [s for s in result.steps.values() if s.status == "succeeded"]
    if result.succeeded and result.output is not None:  # what the workflow returned
        write_data(output_text(result.output) + "\n")
    elif result.succeeded and last and last[-1].output:  # no return: the last step's output
        write_data(last[-1].output + "\n")
    err.print(line(f"run [bold]{result.run_id[:12]}[/] [{style}]{result.status}[/]{took}",
                   *((": ", data(result.error)) if result.error else ()),
                   f"  [dim](brain show {result.run_id[:12]})[/]"))


def output_text(value: Any) -> str:
    """A run's ``output`` as ``brain run`` prints it: text as it is, any other value as
    indented JSON.

    >>> output_text({"risky": False})
    '{\\n  "risky": false\\n}'
    """
    if isinstance(value, str):
        return value
    from brain.cli.terminal import json_text

    return json_text(value, indent=2)


def new_table() -> Table:
    from rich.table import Table  # only the commands that print tables need it

    return Table(box=None, pad_edge=False)


def print_table(table: Table) -> None:
    """Print ``table`` on stdout; into a pipe or a file, with no trailing blanks on its
    lines (rich pads every cell to its column's width)."""
    if out.is_terminal:
        out.print(table)
        return
    with out.capture() as captured:
        out.print(table)
    write_stdout("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def when(t: datetime | None) -> str:
    return t.astimezone().strftime("%Y-%m-%d %H:%M:%S") if t else ""


def runs_table(results: list[RunResult]) -> None:
    """``brain runs``."""
    if not results:
        err.print("no runs")
        return
    table = new_table()
    for col in ("run", "workflow", "status", "event", "started", "took", "error"):
        table.add_column(col)
    for r in results:
        took = (f"{(r.ended_at - r.started_at).total_seconds():.2f}s"
                if r.started_at and r.ended_at else "")
        workflow = data(r.workflow)
        if r.concurrency_key is not None:
            workflow = line(workflow, " ", data(f"key {r.concurrency_key}", "dim"))
        table.add_row(r.run_id[:12], workflow,
                      f"[{STYLE.get(str(r.status), '')}]{r.status}[/]", data(r.trigger.event),
                      when(r.started_at or r.created_at), took,
                      Text(shown(r.error or "")[:60]))
    print_table(table)


def stale_table(found: list[tuple[RunResult, str]]) -> None:
    """``brain runs --stale``: each waiting run a change would fail, and why."""
    table = new_table()
    for col in ("run", "workflow", "waiting since", "would fail with"):
        table.add_column(col)
    for r, why in found:
        table.add_row(r.run_id[:12], data(r.workflow), when(r.started_at or r.created_at),
                      Text(shown(why)))
    print_table(table)


def graph(wf: Workflow) -> None:
    """``brain graph`` as text: each step and what it waits for."""
    out.print(data(wf.name, "bold"))
    waits: dict[str, list[str]] = {n: [] for n in wf.graph.nodes}
    for up, down in wf.graph.edges:
        waits[down].append(up)
    blocks = {name: group for group in wf.graph.groups for name in group.steps}
    for name in wf.graph.nodes:
        group = blocks.get(name)
        if group is not None and group.steps[0] == name:
            out.print(line("  ", data(group.label, "cyan"),
                           f" [dim]({group.max_parallel} at a time)[/]"))
        indent = "    " if group is not None else "  "
        after = data(f"  ← {', '.join(waits[name])}", "dim") if waits[name] else Text("")
        conditions = wf.graph.conditions.get(name)
        when = data(f"  when {' and '.join(conditions)}", "yellow") if conditions else Text("")
        out.print(line(indent, data(name), when, after))


def mermaid(graph: WorkflowGraph) -> str:
    """A Mermaid flowchart of ``graph``: a conditioned step shows its conditions, a
    ``for_each`` block is a subgraph, an edge from a condition is labelled ``when``."""
    in_group = {name for group in graph.groups for name in group.steps}
    lines = ["flowchart TD"]

    def node(name: str) -> str:
        label = name
        if name in graph.conditions:
            label += "<br/>when " + " and ".join(graph.conditions[name])
        return f"{_mermaid_id(name)}[\"{label.replace(chr(34), '#quot;')}\"]"

    lines += [f"    {node(name)}" for name in graph.nodes if name not in in_group]
    for i, group in enumerate(graph.groups):
        title = f"{group.label}, {group.max_parallel} at a time".replace('"', "#quot;")
        lines.append(f"    subgraph g{i}[\"{title}\"]")
        lines += [f"        {node(name)}" for name in group.steps]
        lines.append("    end")
    for up, down in graph.edges:
        conditions = graph.conditions.get(down, ())
        when = any(c.strip("{}").removeprefix("not {") == up for c in conditions)
        arrow = "-. when .->" if when else "-->"
        lines.append(f"    {_mermaid_id(up)} {arrow} {_mermaid_id(down)}")
    return "\n".join(lines) + "\n"


def _mermaid_id(name: str) -> str:
    return "s_" + name.replace("-", "__")


def workers(rows: list[dict[str, Any]]) -> None:
    """``brain workers``: one line per executor process."""
    if not rows:
        ok("no executor process has written a heartbeat (none is running)")
        return
    for w in rows:
        state = "LOST" if w["lost"] else "alive"
        write_stdout(shown(f"{w['kind']:<6} {w['host']}:{w['pid']:<8} {state:<5} "
                           f"executing {w['executing']:<3} last heartbeat "
                           f"{w['silent_seconds']:.0f}s ago  started {w['started_at'][:19]}")
                     + "\n")


def tools(listing: list[dict[str, Any]]) -> None:
    """``brain mcp tools``: each tool, its description and its input schema."""
    if not listing:
        err.print("the server offers no tools")
        return
    for tool in listing:
        out.print(data(tool.get("name", ""), "bold"))
        if tool.get("description"):
            for described in str(tool["description"]).strip().splitlines():
                out.print(data(f"  {described}"))
        schema = json.dumps(tool.get("inputSchema") or {}, indent=2, ensure_ascii=False)
        out.print("  input schema:")
        for part in schema.splitlines():
            out.print(data(f"    {part}"))
        out.print("")
