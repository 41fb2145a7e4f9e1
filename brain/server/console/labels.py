"""What the console writes for people: triggers as they are written in a workflow
(``every 10 s``, ``cron 0 9 * * * (Europe/Bucharest)``), a webhook run's event and
delivery, and the link between a failed run and its ``on_failure`` handler runs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from brain.results import RunResult
from brain.runner import queueing

#: Where senders put the event's name and the delivery's id (lower-case, as stored).
EVENT_HEADERS = ("x-github-event", "x-gitlab-event", "x-gitea-event", "x-event-key")
DELIVERY_HEADERS = ("x-brain-delivery", "x-github-delivery", "x-gitlab-event-uuid")


def period(seconds: float) -> str:
    """``10 s``, ``90 s``, ``5 min``, ``2 h``: a schedule's period."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def trigger_label(trigger: Mapping[str, Any]) -> str:
    """A trigger (the API's ``TriggerSummary`` as a dict) as people write it."""
    kind = trigger["type"]
    if kind == "every":
        return f"every {period(trigger['seconds'])}"
    if kind == "cron":
        return f"cron {trigger['expr']} ({trigger.get('timezone') or 'UTC'})"
    if kind == "webhook":
        return f"webhook {trigger.get('url_path') or ''}".strip()
    if kind == "watch":
        patterns = [p for p in trigger.get("patterns") or () if p != "*"]
        return " ".join(["watch", str(trigger.get("path") or ""), *patterns])
    return str(trigger.get("key") or kind)


def webhook_facts(headers: Mapping[str, str]) -> dict[str, str]:
    """The event and the delivery id a webhook run's stored headers name (either may be absent)."""
    facts = {}
    event = next((headers[h] for h in EVENT_HEADERS if headers.get(h)), None)
    delivery = next((headers[h] for h in DELIVERY_HEADERS if headers.get(h)), None)
    if event:
        facts["event"] = event
    if delivery:
        facts["delivery"] = delivery
    return facts


@dataclass(frozen=True)
class FailedRun:
    """The run whose failure queued a handler run (from the handler's trigger body)."""

    run_id: str
    workflow: str
    step: str | None


def failure_of(run: RunResult) -> FailedRun | None:
    """For a handler run (``trigger.event == "failure"``), the run that failed (as
    :func:`brain.runner.queueing.failure_of` reads it from the handler's trigger body)."""
    body = queueing.failure_of(run)
    if body is None:
        return None
    step = body.get("failed_step")
    return FailedRun(run_id=body["run_id"], workflow=str(body.get("workflow") or "?"),
                     step=step if isinstance(step, str) else None)


def handler_runs(run_id: str, candidates: Iterable[RunResult]) -> list[RunResult]:
    """The runs among ``candidates`` that handle the failure of ``run_id``."""
    found = []
    for candidate in candidates:
        failed = failure_of(candidate)
        if failed is not None and failed.run_id == run_id:
            found.append(candidate)
    return found
