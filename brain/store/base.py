"""The plain records the store takes and returns, and (from :mod:`brain.store.interfaces`)
the interfaces its consumers type it with.

One implementation: :class:`brain.store.Store` (SQLite, a file or in memory, or
PostgreSQL, behind the backends of :mod:`brain.store.backend`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from brain._secrets import scrub
from brain.results import TriggerData
from brain.store.interfaces import (
    ClaimStore,
    CostStore,
    HousekeepingStore,
    OpenableStore,
    ReadStore,
    RecordStore,
    RunStore,
    WaitStore,
)

__all__ = ["ClaimStore", "CostStore", "HousekeepingStore", "OpenableStore", "QueuedRun", "ReadStore",
           "RecordStore", "RunRecord", "RunStore", "StepProcess", "WaitStore", "stored_trigger"]


@dataclass(frozen=True)
class RunRecord:
    """A run's own row: what executing or resuming it needs."""

    id: str
    workflow: str
    definition_hash: str
    status: str
    trigger: TriggerData
    error: str | None
    previous_run_id: str | None
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    cancel_requested: bool
    lease_owner: str | None
    lease_expires_at: datetime | None
    #: The run this one retries, if any.
    retry_of: str | None = None
    #: Its concurrency key (SPEC §19), if its workflow has one.
    concurrency_key: str | None = None
    #: Its validated parameters (SPEC §21): what resumes and retries reuse.
    params: dict[str, Any] = field(default_factory=dict)
    #: The run whose step queued it, when it is a child run (SPEC §22).
    parent_run_id: str | None = None
    #: ...and the step of it that did.
    parent_step: str | None = None
    #: The fingerprints of the definition it runs on (JSON text, SPEC §24; ``None`` for a
    #: run recorded before they were kept).
    step_prints: str | None = None
    #: The version of its workflow's file it started on, and those it continued on.
    version: str | None = None
    continued_on: tuple[str, ...] = ()
    #: Its trace context (SPEC §25), stored when it was created, if any.
    trace_context: str | None = None


@dataclass(frozen=True)
class StepProcess:
    """The process group a step's try started, as recorded: its id, when its leader
    started (clock ticks since boot), and the machine it runs on (``brain._owners.
    this_machine``). A resume on that machine ends the group if its leader still runs."""

    step: str
    pgid: int
    started: int
    machine: str


@dataclass(frozen=True)
class QueuedRun:
    """A run to queue together with another write (a failure handler's, SPEC §14)."""

    run_id: str
    workflow: str
    definition_hash: str
    trigger: TriggerData
    step_rows: Sequence[tuple[str, str]]
    #: Its concurrency key, resolved from the trigger (SPEC §19).
    concurrency_key: str | None = None
    #: Its validated parameters (SPEC §21).
    params: dict[str, Any] = field(default_factory=dict)
    #: What its steps do and its file's version, as loaded when it was queued (SPEC §24).
    step_prints: str | None = None
    version: str | None = None
    #: Its trace context (SPEC §25), as ``brain.runner.tracing`` makes it, if any.
    trace_context: str | None = None


def stored_trigger(trigger: TriggerData) -> TriggerData:
    """The trigger as every store records it: any secret value the process knows scrubbed
    from its body, path and header values."""
    return trigger.model_copy(update={
        "body": scrub(trigger.body) or "", "path": scrub(trigger.path),
        "headers": {k: scrub(v) or "" for k, v in trigger.headers.items()}})
