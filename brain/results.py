"""What a run gives back: ``RunResult`` and ``StepResult`` (plain data)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str | None) -> str | None:
    """``text`` with lone UTF-16 surrogates (which no database or JSON encoder can
    store) replaced by U+FFFD; other text unchanged."""
    if not text or text.isascii():
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


class RunStatus(StrEnum):
    """``queued → running → succeeded | failed | cancelled``; ``waiting`` between running
    and its end while a step waits (SPEC §16)."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class StepStatus(StrEnum):
    """``pending → running → succeeded | failed | skipped | cancelled``; a ``sleep``,
    ``approval`` or ``wait_for`` step is ``waiting`` before its end (SPEC §16)."""

    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


#: A step in one of these has ended: nothing more happens to it (its log included).
FINISHED_STEP = frozenset({StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.SKIPPED,
                           StepStatus.CANCELLED})


FINISHED_RUN = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class TriggerData(BaseModel):
    """The input of a run: ``{trigger.event}``, ``{trigger.body}``, ``{trigger.path}``, headers."""

    model_config = ConfigDict(frozen=True)

    event: str = "manual"
    body: str = ""
    path: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("body", "path", mode="after")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        return clean_text(value)

    @field_validator("headers", mode="after")
    @classmethod
    def _storable_headers(cls, value: dict[str, str]) -> dict[str, str]:
        return {clean_text(k) or "": clean_text(v) or "" for k, v in value.items()}

    @classmethod
    def from_input(cls, value: object, *, event: str = "manual") -> TriggerData:
        """Accept ``None``, a body string, a ``TriggerData`` or a dict of its fields.

        A non-string body is stored as compact JSON; header names are lower-cased.
        """
        if value is None:
            return cls(event=event)
        if isinstance(value, TriggerData):
            return value
        if isinstance(value, str):
            return cls(event=event, body=value)
        if not isinstance(value, Mapping):
            raise TypeError("trigger= takes a body string or a dict with body/event/path/headers")
        unknown = set(value) - {"event", "body", "path", "headers"}
        if unknown:
            raise TypeError(f"unknown trigger fields {sorted(unknown)}; use body, event, path, headers")
        body = value.get("body")
        if body is None:
            body = ""
        elif not isinstance(body, str):
            body = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        headers = {str(k).lower(): str(v) for k, v in (value.get("headers") or {}).items()}
        return cls(event=value.get("event") or event, body=body, path=value.get("path"),
                   headers=headers)


class StepResult(BaseModel):
    """One step of a run, as recorded."""

    name: str
    kind: str
    status: StepStatus
    inputs: dict[str, Any] = Field(default_factory=dict)
    output: str | None = None
    error: str | None = None
    tries: int = 0
    stderr: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    #: What a waiting step waits for (SPEC §16): ``kind`` (``sleep``, ``approval``,
    #: ``signal``), and ``until``, ``prompt``, ``signal``, ``key``, ``timeout_at`` as they apply.
    waiting_for: dict[str, Any] | None = None
    #: How an approval or a ``wait_for`` step was decided: ``approved`` (approvals),
    #: ``comment``, ``by`` (``console``, ``cli``, ``api``, ``signal``, ``timeout``), ``at``.
    decision: dict[str, Any] | None = None
    #: Tokens an LLM step spent, every try and re-ask counted (SPEC §18):
    #: ``prompt_tokens``, ``completion_tokens``.
    usage: dict[str, int] | None = None
    #: The latest progress an MCP server reported for the step (SPEC §17): ``progress``,
    #: ``total`` and ``message`` as it sent them.
    progress: dict[str, Any] | None = None
    #: Answered from the cache (SPEC §26): its output is an earlier run's, and it spent
    #: nothing; ``saved_usage``: the tokens that run spent for it (an LLM step).
    cached: bool = False
    saved_usage: dict[str, int] | None = None


#: A step as a watcher of changes compares it: kind, status, tries and its latest progress
#: (as stored, JSON text).
StepState = tuple[str, str, int, "str | None"]


class RunResult(BaseModel):
    """A run, as recorded: its status, error, trigger and each step by name (call order)."""

    run_id: str
    workflow: str
    status: RunStatus
    error: str | None = None
    trigger: TriggerData = Field(default_factory=TriggerData)
    created_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    previous_run_id: str | None = None
    #: The run this one retries (``brain retry``), if any.
    retry_of: str | None = None
    #: Its concurrency key (SPEC §19): the text its workflow's ``concurrency_key`` resolved
    #: to when it was queued; the workflow's limit counts the runs with the same key.
    concurrency_key: str | None = None
    #: Its parameters as validated when it was queued, defaults applied (SPEC §21).
    params: dict[str, Any] = Field(default_factory=dict)
    #: What its workflow returned, resolved at the end of a succeeded run: the JSON value
    #: (``None`` when it returns nothing, or until it succeeds).
    output: Any = None
    #: The run and step that queued it, when it is a child run (SPEC §22):
    #: ``{"run_id": ..., "step": ...}``.
    parent: dict[str, str] | None = None
    #: The version of its workflow's file it started on (SPEC §24: the file's digest, and
    #: ``@`` the git commit when in a repository), and those it continued on after changes.
    version: str | None = None
    continued_on: list[str] = Field(default_factory=list)
    steps: dict[str, StepResult] = Field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        """Whether the run ended ``succeeded``."""
        return self.status == RunStatus.SUCCEEDED

    @computed_field  # type: ignore[prop-decorator]
    @property
    def usage(self) -> dict[str, int] | None:
        """The tokens the run's LLM steps spent in all (SPEC §18), or ``None`` when no step
        has usage (or the steps were not read)."""
        return self.usage_total()

    def usage_total(self) -> dict[str, int] | None:
        """The tokens the run's LLM steps spent in all (SPEC §18), or ``None`` when no step
        has usage."""
        found = [s.usage for s in self.steps.values() if s.usage]
        if not found:
            return None
        return {key: sum(int(u.get(key, 0)) for u in found)
                for key in ("prompt_tokens", "completion_tokens")}

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON shape of ``brain show --json`` and the API: steps as a list in call order,
        and ``usage``, the tokens of all its steps."""
        data = self.model_dump(mode="json", exclude={"steps"})
        usage = data.pop("usage")
        data["steps"] = [s.model_dump(mode="json") for s in self.steps.values()]
        data["usage"] = usage  # after the steps it adds up
        return data


def base_name(name: str) -> str:
    """``review`` for ``review[3]`` (an instance of a ``for_each`` block); else ``name``."""
    return name.split("[", 1)[0]


def step_order(name: str, position: int) -> tuple[int, int]:
    """Where a step row sorts: by the step's place in the workflow, then a ``for_each``
    block's instances (``review[2]``) after the step's own row, in item order."""
    _, bracket, rest = name.partition("[")
    return position, int(rest.rstrip("]")) if bracket and rest[:-1].isdigit() else -1


#: The streams of a step's log: a program's or a function's standard output and error,
#: ``logging`` records of a ``@step`` function, and The Brain's own notes (a new try, lines
#: dropped).
LOG_STREAMS = ("stdout", "stderr", "log", "brain")


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of a step's log: its place (``seq`` grows with every line of the step; a
    gap is where lines were dropped), its stream (one of :data:`LOG_STREAMS`), when it was
    written (seconds since the step started) and its text (secrets scrubbed)."""

    seq: int
    stream: str
    t: float
    text: str

    def as_json(self) -> dict[str, Any]:
        """The line as the API gives it."""
        return {"seq": self.seq, "stream": self.stream, "t": round(self.t, 3), "text": self.text}


@dataclass(frozen=True, slots=True)
class LogBatch:
    """What one write adds to a step's stored log: new ``lines``; the stored lines to
    drop (``drop``: the first and last ``seq``, both included), now that the log's tail
    has moved past them; and the line saying what was dropped so far (``note``, written in
    place of its earlier version)."""

    lines: tuple[LogLine, ...] = ()
    drop: tuple[int, int] | None = None
    note: LogLine | None = None
    #: The step's latest progress, when it changed since the last write (SPEC §17).
    progress: dict[str, Any] | None = None

    def __bool__(self) -> bool:
        return (bool(self.lines) or self.drop is not None or self.note is not None
                or self.progress is not None)


@dataclass(frozen=True)
class WaitEnd:
    """How a waiting step ends: ``succeeded`` with ``text`` as its output, or ``failed``
    with ``text`` as its error; ``decision`` is stored with it (``None``: none)."""

    status: str
    text: str
    decision: dict[str, Any] | None = None

    def to_json(self) -> str:
        """As a timer row keeps it."""
        return json.dumps({"status": self.status, "text": self.text, "decision": self.decision})

    @classmethod
    def from_json(cls, text: str) -> WaitEnd:
        """Read back from a timer row."""
        data = json.loads(text)
        return cls(data["status"], data["text"], data.get("decision"))


@dataclass(frozen=True)
class WaitTimer:
    """When a waiting step's timer falls due, and how the step ends then."""

    due: datetime
    end: WaitEnd
