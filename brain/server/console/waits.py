"""What the console says of steps that wait (SPEC §16), pure: a waiting step's view (an
approval's prompt, a sleep's wake time, a signal's name and key with the commands that
send it) and a decided step's decision (approved or rejected, comment, by whom, when).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brain.results import StepResult, StepStatus
from brain.server.console.rendering import utc_text

#: How much of a prompt the workflows page's list of waiting decisions shows.
PREVIEW_CHARS = 120


@dataclass(frozen=True)
class WaitView:
    """What a waiting step waits for, and how to end the wait.

    ``kind`` is ``sleep``, ``approval``, ``signal`` or ``run`` (a child run); the times are UTC text;
    ``commands`` are the command lines that end the wait (``brain approve ...``,
    ``brain signal ...``, then the ``curl`` form).
    """

    kind: str
    prompt: str | None
    until: str | None
    timeout_at: str | None
    signal: str | None
    key: str | None
    commands: list[str]
    #: A child step's (kind ``run``, SPEC §22): the child run it waits for.
    child: str | None = None


@dataclass(frozen=True)
class DecisionView:
    """How a step that waited was decided: ``verdict`` is ``approved``, ``rejected``,
    ``signal`` or ``timed out``; ``at`` is UTC text."""

    verdict: str
    comment: str | None
    by: str
    at: str
    signal: str | None
    key: str | None


def _signal_commands(signal: str, key: str | None, base_url: str, token: bool) -> list[str]:
    """``brain signal NAME --key K --body TEXT`` and its ``curl`` form."""
    cli = ["brain", "signal", signal] + ([] if key is None else ["--key", key]) + ["--body"]
    body: dict[str, Any] = {} if key is None else {"key": key}
    body["body"] = "TEXT"
    auth = ' -H "Authorization: Bearer $BRAIN_API_TOKEN"' if token else ""
    curl = (f"curl -X POST {shlex.quote(base_url.rstrip('/') + '/api/signals/' + signal)}"
            f" -H 'Content-Type: application/json'{auth}"
            f" -d {shlex.quote(json.dumps(body, ensure_ascii=False))}")
    return [shlex.join(cli) + " TEXT", curl]


def wait_view(run_id: str, step: StepResult, *, base_url: str, token: bool) -> WaitView | None:
    """What ``step`` waits for (``None`` unless it waits). ``base_url`` is this server's
    address as the page was asked for; ``token``: whether commands need the API token."""
    what = step.waiting_for
    if step.status != StepStatus.WAITING or not what:
        return None
    kind = str(what.get("kind") or "")
    commands: list[str] = []
    key = what.get("key")
    if kind == "approval":
        commands = [shlex.join(["brain", "approve", run_id, step.name])
                    + " [--reject] [--comment TEXT]"]
    elif kind == "signal" and what.get("signal"):
        commands = _signal_commands(str(what["signal"]), None if key is None else str(key),
                                    base_url, token)
    return WaitView(kind=kind, prompt=what.get("prompt") if kind == "approval" else None,
                    until=utc_text(what.get("until")) or None,
                    timeout_at=utc_text(what.get("timeout_at")) or None,
                    signal=what.get("signal"), key=None if key is None else str(key),
                    commands=commands,
                    child=str(what["run_id"]) if kind == "run" and what.get("run_id") else None)


def decision_view(step: StepResult) -> DecisionView | None:
    """How ``step`` was decided (``None`` when it was not)."""
    decision = step.decision
    if not decision:
        return None
    by = str(decision.get("by") or "")
    if "approved" in decision:
        verdict = "approved" if decision["approved"] else "rejected"
    elif by == "timeout":
        verdict = "timed out"
    else:
        verdict = "signal"
    key = decision.get("key")
    return DecisionView(verdict=verdict, comment=decision.get("comment") or None, by=by,
                        at=utc_text(decision.get("at")), signal=decision.get("signal"),
                        key=None if key is None else str(key))


def preview(prompt: str | None, limit: int = PREVIEW_CHARS) -> str:
    """A prompt on one line, cut to ``limit`` characters (``…`` where it was cut)."""
    text = " ".join((prompt or "").split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def waiting_decisions(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``decisions_waiting`` as the workflows page lists them: the prompt
    previewed, the times as UTC text."""
    return [{"run_id": r["run_id"], "workflow": r["workflow"], "step": r["step"],
             "prompt": preview(r.get("prompt")), "since": utc_text(r.get("since")),
             "timeout_at": utc_text(r.get("timeout_at"))} for r in rows]
