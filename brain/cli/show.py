"""``brain show``: one run in detail — its steps, why some were skipped, what a failed step
printed, tokens, progress, waits and decisions."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from rich.text import Text

from brain.cli.render import (
    STYLE,
    data,
    line,
    lines_ended,
    new_table,
    out,
    output_text,
    preview,
    print_table,
    when,
)
from brain.cli.terminal import json_text, shown
from brain.results import RunResult, StepResult


def run_detail(r: RunResult) -> None:
    """``brain show``."""
    out.print(line(f"[bold]run {r.run_id}[/]  ", data(r.workflow),
                   f"  [{STYLE.get(str(r.status), '')}]{r.status}[/]"))
    if r.retry_of:
        out.print(line("retry of run ", data(r.retry_of)))
    if r.version:
        continued = (("  continued on: ", data(", ".join(r.continued_on)))
                     if r.continued_on else ())
        out.print(line("version: ", data(r.version), *continued))
    if r.parent:
        out.print(line("child of run ", data(r.parent.get("run_id")), " (step ",
                       data(r.parent.get("step")), ")"))
    body = ("  body: ", preview(r.trigger.body)) if r.trigger.body else ()
    path = ("  path: ", data(r.trigger.path)) if r.trigger.path else ()
    out.print(line("trigger: ", data(r.trigger.event), *body, *path))
    if r.params:
        out.print(line("params: ", data(json_text(r.params, separators=(", ", ": ")))))
    if r.output is not None:
        out.print(line("output: ", data(output_text(r.output))))
    if r.concurrency_key is not None:
        out.print(line("concurrency key: ", data(repr(r.concurrency_key))))
    since = waiting_since(r)
    end = f"waiting since {when(since)}" if since else f"ended {when(r.ended_at)}"
    out.print(f"created {when(r.created_at)}  started {when(r.started_at)}  {end}")
    if r.error:
        out.print(line("[red]error:[/] ", data(r.error)))
    table = new_table()
    for col in ("step", "kind", "status", "tries", "took", "output / error"):
        table.add_column(col)
    for s in r.steps.values():
        took = (f"{(s.ended_at - s.started_at).total_seconds():.2f}s"
                if s.started_at and s.ended_at else "")
        skipped = skip_reason(r, s)
        detail = (data(skipped, "dim") if skipped else data(s.error, "red") if s.error
                  else preview(s.output))
        cached = " [cyan](cached)[/]" if s.cached else ""
        table.add_row(data(s.name), data(s.kind),
                      f"[{STYLE.get(str(s.status), '')}]{s.status}[/]{cached}", str(s.tries), took,
                      detail)
    print_table(table)
    for s in r.steps.values():
        if s.status in ("failed", "cancelled") and (s.output or s.stderr):
            _what_it_printed(s.name, s.output, s.stderr)
    usage_and_progress(r)
    waits_and_decisions(r)
    child_runs(r)


def waiting_since(r: RunResult) -> datetime | None:
    """Since when a waiting run has had nothing to do but wait: the latest of its waiting
    steps' starts and its other steps' ends (``None`` for a run that is not waiting)."""
    if r.status != "waiting":
        return None
    times = [s.started_at if s.status == "waiting" else s.ended_at for s in r.steps.values()]
    return max((t for t in times if t is not None), default=None)


def skip_reason(r: RunResult, s: StepResult) -> str | None:
    """Why a step that never started was skipped when its run failed, ``skipped: step 'x'
    failed`` (``None`` for any other step: a step skipped by its condition has its reason as
    its error). The reason is read from the run: the step its error names, else the first
    that failed."""
    if s.status != "skipped" or s.error or r.status != "failed":
        return None
    failed = [x.name for x in r.steps.values() if x.status == "failed"]
    named = [n for n in failed if (r.error or "").startswith(f"step {n!r} failed")]
    culprits = named or failed
    return f"skipped: step {culprits[0]!r} failed" if culprits else "skipped: the run failed"


def usage_text(usage: Mapping[str, int]) -> str:
    """Tokens spent, as ``brain show`` words them.

    >>> usage_text({"prompt_tokens": 1200, "completion_tokens": 7})
    '1,200 prompt + 7 completion'
    """
    return (f"{usage.get('prompt_tokens', 0):,} prompt + "
            f"{usage.get('completion_tokens', 0):,} completion")


def usage_and_progress(r: RunResult) -> None:
    """Each step's tokens (an LLM step, SPEC §18), what a cached step saved (SPEC §26) and
    its latest progress (an MCP step, SPEC §17), and the tokens the whole run spent (when
    any step spent some)."""
    from brain.executors.steplog import progress_text

    for s in r.steps.values():
        if s.usage:
            out.print(line(data(s.name, "bold"), f": tokens {usage_text(s.usage)}"))
        if s.cached:
            saved = f": saved {usage_text(s.saved_usage)}" if s.saved_usage else ""
            out.print(line(data(s.name, "bold"), f": answered from the cache{saved}"))
        if s.progress:
            out.print(line(data(s.name, "bold"), ": ", data(progress_text(s.progress))))
    total = r.usage_total()
    if total is not None:
        out.print(f"tokens in all: {usage_text(total)}")


def waits_and_decisions(r: RunResult) -> None:
    """What the run's waiting steps wait for (and how to end the wait), and how the steps
    that waited were decided (SPEC §16)."""
    from brain.runner.now import waiting_text

    for s in r.steps.values():
        if s.status == "waiting" and s.waiting_for:
            out.print(line("[magenta]waiting:[/] ", data(waiting_text(r.run_id, s))))
        if s.decision:
            out.print(line(data(s.name, "bold"), ": ", data(decision_text(s.decision))))


def decision_text(decision: dict[str, object]) -> str:
    """``approved by cli at 2026-…: looks good`` / ``signal ci-finished (key abc) …``."""
    by, at = decision.get("by"), decision.get("at")
    if "approved" in decision:
        verdict = "approved" if decision["approved"] else "rejected"
        comment = f": {decision['comment']}" if decision.get("comment") else ""
        return f"{verdict} by {by} at {at}{comment}"
    if by == "timeout":
        return f"timed out at {at}"
    key = f" (key {decision['key']})" if decision.get("key") is not None else ""
    return f"signal {decision.get('signal')}{key} sent by {by} at {at}"


#: How many of the last lines of a failed step's output and stderr ``brain show`` prints.
SHOWN_LINES = 20


def _what_it_printed(name: str, output: str | None, stderr: str | None) -> None:
    """A failed or cancelled step's output and stderr, beside its error (their last lines;
    ``brain logs`` has the whole log)."""
    for label, text in (("output", output), ("stderr", stderr)):
        printed = shown(lines_ended(text or "")).rstrip("\n")
        if not printed:
            continue
        lines = printed.split("\n")
        more = len(lines) - SHOWN_LINES
        out.print(line(f"{label} of ", data(name, "bold"),
                       f" [dim](last {SHOWN_LINES} of {len(lines)} lines)[/]" if more > 0 else "",
                       ":"))
        for each in lines[-SHOWN_LINES:]:
            out.print(Text(f"  {each}"))  # escaped above


def child_runs(r: RunResult) -> None:
    """The child run each ``workflow`` step queued (its latest try's): ``brain runs
    --parent RUN_ID`` lists every one."""
    for s in r.steps.values():
        child = (s.waiting_for or {}).get("run_id") if s.kind == "workflow" else None
        if child:
            out.print(line("step ", data(s.name), " runs child run ", data(child), " of ",
                           data((s.waiting_for or {}).get("workflow")), f" ({s.status})"))
