"""A run as an MCP tool result (SPEC §23): its output when it succeeded, its error when it
failed, and its state — with what it waits for and where a person can act — while it goes on.

Everything shown comes from the run as stored: its error and its steps' prompts are
scrubbed of secrets there already, and the text is scrubbed once more on its way out.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_types import CallToolResult, TextContent

from brain._secrets import scrub
from brain.results import FINISHED_STEP, RunResult, RunStatus, StepStatus

#: The ``_meta`` key naming the run an answer is about (for the client application).
RUN_META = "brain/run_id"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def output_text(output: Any) -> str:
    """A run's output as text: text as is, any other JSON value as compact JSON."""
    return output if isinstance(output, str) else _json(output)


def waiting_for(run: RunResult) -> list[dict[str, Any]]:
    """What a run waits for: one entry per waiting step (``step`` and its ``waiting_for``:
    ``kind``, and ``prompt``, ``until``, ``signal``, ``key``, ``timeout_at`` as they apply)."""
    return [{"step": s.name, **(s.waiting_for or {"kind": "unknown"})}
            for s in run.steps.values() if s.status == StepStatus.WAITING]


def steps_ended(run: RunResult) -> int:
    """How many of the run's steps have ended."""
    return sum(1 for s in run.steps.values() if s.status in FINISHED_STEP)


def _answer(run: RunResult, text: str, structured: dict[str, Any] | None, *,
            error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=scrub(text) or "")],
                          structured_content=structured, is_error=error,
                          _meta={RUN_META: run.run_id})


def ended(run: RunResult, *, typed: bool) -> CallToolResult:
    """The answer for a run that ended: its output (text, and ``structuredContent`` when
    ``typed``), or ``isError`` with its error (failed or cancelled)."""
    if run.status == RunStatus.SUCCEEDED:
        text = (output_text(run.output) if run.output is not None
                else f"run {run.run_id} of {run.workflow} succeeded")
        structured = ({"run_id": run.run_id, "status": run.status.value, "result": run.output}
                      if typed else None)
        return _answer(run, text, structured)
    error = run.error or run.status.value
    return _answer(run, f"run {run.run_id} of {run.workflow} {run.status.value}: {error}", None,
                   error=True)


def going_on(run: RunResult, *, console: str | None,
             note: str | None = None) -> CallToolResult:
    """The answer for a run still going when the call stops waiting: its id, status, what
    it waits for, how a person decides a waiting approval, and how to ask again
    (``brain_run``), as text and as ``structuredContent`` (which fits a typed tool's
    ``outputSchema``: no ``result`` yet). Not an error."""
    waits = waiting_for(run)
    lines = [f"run {run.run_id} of {run.workflow} is {run.status.value}"
             f"{' (' + note + ')' if note else ''}."]
    for wait in waits:
        lines.append(_describe(run, wait))
    if console:
        lines.append(f"Console: {console}")
    lines.append(f'Ask for its result with the tool brain_run (run_id "{run.run_id}", '
                 f"wait_seconds up to 60).")
    structured: dict[str, Any] = {"run_id": run.run_id, "status": run.status.value,
                                  "waiting_for": waits}
    if console:
        structured["console"] = console
    return _answer(run, "\n".join(lines), structured)


def _describe(run: RunResult, wait: dict[str, Any]) -> str:
    step, kind = wait["step"], wait.get("kind")
    if kind == "approval":
        return (f"Step {step!r} waits for a person's approval: {wait.get('prompt', '')!s}\n"
                f"A person decides it in the console or with "
                f"`brain approve {run.run_id} {step}` (add --reject to reject); "
                f"an agent cannot.")
    if kind == "sleep":
        return f"Step {step!r} sleeps until {wait.get('until')}."
    if kind == "signal":
        key = wait.get("key")
        return (f"Step {step!r} waits for the signal {wait.get('signal')!r}"
                f"{f' with key {key!r}' if key is not None else ''}.")
    if kind == "run":
        return f"Step {step!r} waits for a child run of {wait.get('workflow', '?')}."
    return f"Step {step!r} waits ({kind})."
