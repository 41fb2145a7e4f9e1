"""The shapes of the HTTP API's request and response bodies (msgspec Structs).

Handlers take and return these, so Litestar validates input and writes the OpenAPI
document (``/schema/openapi.json``) from them. Field names, order and values are those of
the JSON the API has always answered: a run is :meth:`RunResult.to_json_dict` (times as
its ISO 8601 text), a trigger is its model's fields plus ``next_fire``/``url_path`` and
``key``. The builders at the end turn The Brain's objects into these shapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from brain.dsl.triggers import CronTrigger, EveryTrigger, TriggerSpec, WebhookTrigger
from brain.results import LogLine, RunResult, RunStatus, StepStatus

if TYPE_CHECKING:
    from brain.workflow import Workflow

#: A time as the API writes it: ISO 8601 text, with its offset.
Time = Annotated[str, Meta(description="ISO 8601 time with offset",
                           extra_json_schema={"extra": {"format": "date-time"}})]


# --- requests --------------------------------------------------------------------------------------


class RunRequest(Struct):
    """Body of ``POST /api/workflows/{name}/runs``; an empty body is ``{}``."""

    params: Annotated[dict[str, Any] | None, Meta(
        description="the workflow's parameters by name (see its params_schema); validated, "
                    "defaults applied, before anything is queued: 422 when they do not "
                    "validate")] = None
    body: Annotated[Any, Meta(description="the run's trigger.body: text as is, other JSON "
                                          "stored as compact JSON text")] = None
    wait: Annotated[bool, Meta(description="answer when the run ends (200), or 202 after "
                                           "30 s")] = False


class RetryRequest(Struct, forbid_unknown_fields=True):
    """Body of ``POST /api/runs/{run_id}/retry``; an empty body is ``{}``."""

    from_step: Annotated[str, Meta(
        description="retry from this step (SPEC §24): it and every step downstream of it run "
                    "again on the current definition, the others keep their outputs (they "
                    "must be unchanged since: else 409); an ended run of any status may be "
                    "retried so. 400 for a step the workflow does not have",
        max_length=1000)] | None = msgspec.field(default=None, name="from")


# --- small answers ---------------------------------------------------------------------------------


class Health(Struct):
    """``GET /health``: the process answers."""

    status: str


class RunAccepted(Struct):
    """A queued run (202)."""

    run_id: str


class RunEnded(Struct):
    """A run that ended while the caller waited (200)."""

    run_id: str
    status: RunStatus
    error: str | None
    output: Annotated[Any, Meta(description="what the workflow returned (null without a "
                                            "return, or when the run did not succeed)")] = None


class CancelRequested(Struct):
    """``POST /api/runs/{run_id}/cancel``: the run will stop within a second."""

    run_id: str
    status: RunStatus
    cancel_requested: bool


class RetryQueued(Struct):
    """``POST /api/runs/{run_id}/retry``: the new run, and the run it retries."""

    run_id: str
    retry_of: str


class DecisionRequest(Struct, forbid_unknown_fields=True):
    """Body of ``POST /api/runs/{run_id}/steps/{step}/decision``."""

    approve: Annotated[bool, Meta(description="true approves, false rejects")]
    comment: Annotated[str, Meta(description="why, shown with the decision",
                                 max_length=4000)] | None = None


class DecisionTaken(Struct):
    """The decision, as stored with the step (SPEC §16)."""

    run_id: str
    step: str
    approved: bool
    comment: str | None
    by: str
    at: str


class SignalRequest(Struct, forbid_unknown_fields=True):
    """Body of ``POST /api/signals/{signal}``; an empty body is ``{}``."""

    key: Annotated[str, Meta(description="only steps waiting with this key continue (none: "
                                         "those waiting without a key)",
                             max_length=1000)] | None = None
    body: Annotated[Any, Meta(description="the output of the steps that continue: text as "
                                          "is, other JSON as compact JSON text")] = None


class ResumedStep(Struct):
    """A step a signal continued."""

    run_id: str
    step: str


class SignalSent(Struct):
    """``POST /api/signals/{signal}``: the steps it continued (none: an empty list)."""

    resumed: list[ResumedStep]


class FieldError(Struct):
    """One invalid parameter (as pydantic words it): where, what, and its kind."""

    loc: Annotated[list[str | int], Meta(description="the parameter's name, then the path "
                                                     "inside its value")]
    msg: str
    type: Annotated[str, Meta(description="pydantic's error type, e.g. missing, int_parsing")]


class ApiError(Struct, omit_defaults=True):
    """Every error answer: ``{"status_code", "detail"}`` (never a stack trace); input that
    fails Litestar's own validation also carries ``extra``, a list of what was wrong;
    parameters that do not validate (422) carry ``errors``, one per field."""

    status_code: int
    detail: str
    extra: list[dict[str, Any]] | dict[str, Any] | None = None
    errors: list[FieldError] | None = None


class ChangeEvent(Struct):
    """One message of ``GET /api/events`` (server-sent events)."""

    event: Annotated[str, Meta(description="run, step or log")]
    data: Annotated[str, Meta(description='JSON; run: {"run_id", "workflow", "status", "error", '
                                          '"retry_of"}; step: {"run_id", "workflow", "name", '
                                          '"kind", "status", "tries"}; log: {"run_id", '
                                          '"workflow", "step", "lines": [{"seq", "stream", "t", '
                                          '"text"}]}')]


# --- runs ------------------------------------------------------------------------------------------


class TriggerInput(Struct):
    """What started a run: ``{trigger.event}``, ``{trigger.body}``, path and headers."""

    event: str
    body: str
    path: str | None
    headers: dict[str, str]


class StepDetail(Struct):
    """One step of a run, as recorded."""

    name: str
    kind: str
    status: StepStatus
    inputs: dict[str, Any]
    output: str | None
    error: str | None
    tries: int
    stderr: str | None
    started_at: Time | None
    ended_at: Time | None
    waiting_for: Annotated[dict[str, Any] | None, Meta(
        description="what a waiting step waits for (SPEC §16): kind (sleep, approval, signal) "
                    "and until, prompt, signal, key, timeout_at as they apply")] = None
    decision: Annotated[dict[str, Any] | None, Meta(
        description="how an approval or a wait_for step was decided: approved, comment, by "
                    "(console, cli, api, timeout), at; for a signal: signal, key")] = None
    usage: Annotated[dict[str, int] | None, Meta(
        description="the tokens an llm step spent, every try and re-ask counted (SPEC §18): "
                    "prompt_tokens, completion_tokens")] = None
    progress: Annotated[dict[str, Any] | None, Meta(
        description="the latest progress an MCP server reported for the step (SPEC §17): "
                    "progress, total, message")] = None
    cached: Annotated[bool, Meta(description="answered from its cache (SPEC §26)")] = False
    saved_usage: Annotated[dict[str, int] | None, Meta(
        description="the tokens a cached llm step did not spend")] = None


class RunDetail(Struct):
    """A run: status, error, trigger and its steps in call order (none in lists of runs)."""

    run_id: str
    workflow: str
    status: RunStatus
    error: str | None
    trigger: TriggerInput
    created_at: Time | None
    started_at: Time | None
    ended_at: Time | None
    previous_run_id: str | None
    retry_of: str | None
    concurrency_key: Annotated[str | None, Meta(
        description="the text the workflow's concurrency_key resolved to when the run was "
                    "queued (SPEC §19); its limit counts the runs with the same key")] = None
    params: Annotated[dict[str, Any], Meta(
        description="the validated parameters the run was started with (defaults applied)")] = {}
    output: Annotated[Any, Meta(description="what the workflow returned, once the run "
                                            "succeeded (null without a return)")] = None
    parent: Annotated[dict[str, str] | None, Meta(
        description="a child run's parent: {run_id, step} (null for a run started otherwise)"
    )] = None
    version: Annotated[str | None, Meta(
        description="the version of its workflow's file it started on (SPEC §24): the file's "
                    "digest, with @ and the git commit when in a repository")] = None
    continued_on: Annotated[list[str], Meta(
        description="the versions it continued on after its workflow changed")] = []
    steps: list[StepDetail] = []
    usage: Annotated[dict[str, int] | None, Meta(
        description="the tokens all its llm steps spent (SPEC §18)")] = None


# --- step logs -------------------------------------------------------------------------------------


class LogLineBody(Struct):
    """One line of a step's log."""

    seq: Annotated[int, Meta(description="grows with every line of the step; a gap is where "
                                         "lines were dropped")]
    stream: Annotated[str, Meta(description="stdout, stderr, log (a @step's logging) or brain")]
    t: Annotated[float, Meta(description="seconds since the step started")]
    text: str


class StepLogBody(Struct):
    """A step's stored log lines (those after ``after``), and where to go on from."""

    run_id: str
    step: str
    status: StepStatus
    lines: list[LogLineBody]
    next: Annotated[int, Meta(description="pass as ?after= to get only the lines after these")]


def step_log_body(run_id: str, step: str, status: StepStatus, lines: Iterable[LogLine],
                  after: int) -> StepLogBody:
    """The API's shape of a step's log lines."""
    shown = [LogLineBody(ln.seq, ln.stream, round(ln.t, 3), ln.text) for ln in lines]
    return StepLogBody(run_id, step, status, shown, shown[-1].seq if shown else after)


# --- workers ---------------------------------------------------------------------------------------


class WorkerState(Struct):
    """An executor process sharing the database; ``lost`` once silent for longer than a lease."""

    id: str
    host: str
    pid: int
    kind: Annotated[str, Meta(description="serve or worker")]
    started_at: Time
    heartbeat_at: Time
    executing: int
    silent_seconds: float
    lost: bool


# --- workflows -------------------------------------------------------------------------------------


class TriggerSummary(Struct, kw_only=True):
    """A trigger of a workflow: the fields of its ``type`` (the others are left out), its
    next fire time (cron, every) or the path it listens on (webhook), and its ``key``.

    One shape for the four types, so each keeps the JSON it always had, field for field.
    """

    name: str | None
    type: Literal["cron", "every", "webhook", "watch"]
    expr: Annotated[str | UnsetType, Meta(description="cron: 5-field expression")] = UNSET
    timezone: Annotated[str | UnsetType, Meta(description="cron: IANA time zone")] = UNSET
    catchup: Annotated[str | UnsetType, Meta(description="cron: none, latest or all")] = UNSET
    seconds: Annotated[float | UnsetType, Meta(description="every: the period")] = UNSET
    overlap: Annotated[str | UnsetType, Meta(description="cron, every: skip or queue")] = UNSET
    params: Annotated[dict[str, Any] | UnsetType, Meta(
        description="cron, every: the parameters its runs get (left out: the defaults)")] = UNSET
    path: Annotated[str | UnsetType | None, Meta(description="webhook: its path; watch: the "
                                                             "folder watched")] = UNSET
    wait_seconds: Annotated[float | UnsetType, Meta(description="webhook")] = UNSET
    require_timestamp: Annotated[bool | UnsetType, Meta(description="webhook")] = UNSET
    patterns: Annotated[list[str] | UnsetType, Meta(description="watch")] = UNSET
    events: Annotated[list[str] | UnsetType, Meta(description="watch")] = UNSET
    recursive: Annotated[bool | UnsetType, Meta(description="watch")] = UNSET
    debounce_seconds: Annotated[float | UnsetType, Meta(description="watch")] = UNSET
    next_fire: Annotated[Time | UnsetType | None, Meta(description="cron, every")] = UNSET
    url_path: Annotated[str | UnsetType, Meta(description="webhook: where it listens")] = UNSET
    key: str


class WorkflowSummary(Struct):
    """A loaded workflow with its triggers."""

    name: str
    description: str | None
    steps_count: int
    max_concurrent_runs: int | None
    triggers: list[TriggerSummary]


class StepOutline(Struct):
    """A step of a workflow: what it waits for, its conditions, its ``for_each`` block."""

    name: str
    kind: str
    upstream: list[str]
    when: list[str]
    for_each: Annotated[int | None, Meta(description="index of its for_each block")]


class ForEachBlock(Struct):
    """A ``for_each`` block of a workflow."""

    index: int
    label: str
    steps: list[str]
    max_parallel: int


class WorkflowDetail(WorkflowSummary):
    """One workflow: its summary, steps, edges, ``for_each`` blocks, and the JSON Schemas
    of its parameters and of its output."""

    steps: list[StepOutline]
    edges: list[tuple[str, str]]
    for_each: list[ForEachBlock]
    params_schema: Annotated[dict[str, Any], Meta(
        description="JSON Schema of the parameters object a run takes")]
    output_schema: Annotated[dict[str, Any] | None, Meta(
        description="JSON Schema of the output, from the return annotation (null without "
                    "one)")]


# --- builders --------------------------------------------------------------------------------------


def run_detail(run: RunResult) -> RunDetail:
    """The API's shape of a run: its JSON (:meth:`RunResult.to_json_dict`), typed."""
    return msgspec.convert(run.to_json_dict(), RunDetail)


def worker_states(rows: Iterable[Mapping[str, Any]]) -> list[WorkerState]:
    """Rows of :func:`brain.workers.describe_workers`, typed."""
    return [msgspec.convert(row, WorkerState) for row in rows]


def trigger_summary(trig: TriggerSpec, workflow: str, now: datetime) -> TriggerSummary:
    """A trigger's fields (no secret's variable), its next fire time or webhook path, its key."""
    from brain.triggers.schedule import next_fire, trigger_key

    # Built from the model's own dump, not converted: a value keeps its JSON (30 stays 30).
    item = trig.model_dump(mode="json", exclude={"secret_env"})
    item.pop("params", None)  # the spec leaves them out of its dumps; shown when given
    if isinstance(trig, CronTrigger | EveryTrigger) and trig.params:
        item["params"] = trig.params
    if isinstance(trig, CronTrigger | EveryTrigger):
        upcoming = next_fire(trig, now)
        item["next_fire"] = upcoming.isoformat() if upcoming else None
    if isinstance(trig, WebhookTrigger):
        item["url_path"] = f"/hooks/{(trig.path or workflow).strip('/')}"
    item["key"] = trigger_key(trig)
    return TriggerSummary(**item)


def workflow_summary(wf: Workflow, now: datetime) -> WorkflowSummary:
    """A workflow's name, description, size, concurrency limit and triggers."""
    return WorkflowSummary(**_summary_fields(wf, now))


def _summary_fields(wf: Workflow, now: datetime) -> dict[str, Any]:
    return {"name": wf.name, "description": wf.description, "steps_count": len(wf.spec.steps),
            "max_concurrent_runs": wf.spec.max_concurrent_runs,
            "triggers": [trigger_summary(t, wf.name, now) for t in wf.triggers]}


def workflow_detail(wf: Workflow, now: datetime) -> WorkflowDetail:
    """A workflow's summary with its steps, edges and ``for_each`` blocks."""
    graph = wf.graph
    steps = [StepOutline(name=s.name, kind=s.kind, upstream=list(s.upstream),
                         when=list(graph.conditions.get(s.name, ())), for_each=s.group)
             for s in wf.spec.steps]
    blocks = [ForEachBlock(index=i, label=g.label, steps=list(g.steps), max_parallel=g.max_parallel)
              for i, g in enumerate(graph.groups)]
    return WorkflowDetail(**_summary_fields(wf, now), steps=steps,
                          edges=[(a, b) for a, b in graph.edges], for_each=blocks,
                          params_schema=wf.params_schema, output_schema=wf.output_schema)
