"""Queued runs: the one way a run is built for the queue, and the one way it is queued.

Every enqueue — a webhook, a schedule fire, a file event, the API,
``Workflow.enqueue`` and a failed run's handlers — builds its run with
:func:`new_run` and commits it through :func:`enqueue` under the same queue limit.
A process serving workflows (``brain serve``, ``brain worker``, a host app)
adds its queue to its context's local queues (``RunContext.queues``, by default
:data:`brain.runner.context.PROCESS_QUEUES`), so that ``Workflow.enqueue`` in that
process reaches its executors at once; nothing below points back up to it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from brain.results import RunResult, TriggerData
from brain.runner.context import PROCESS_QUEUES, LocalQueue, LocalQueues, env_int
from brain.runner.workflows import RunnableWorkflow
from brain.store.base import QueuedRun
from brain.store.interfaces import ClaimStore


def queue_limit() -> int:
    """How many runs may wait in the queue (``BRAIN_MAX_QUEUED_RUNS``, default 1000)."""
    return env_int("BRAIN_MAX_QUEUED_RUNS", 1000)


def new_run(wf: RunnableWorkflow, trigger: TriggerData,
            params: Mapping[str, Any] | None = None, *,
            trace_context: str | None = None) -> QueuedRun:
    """A new run of ``wf`` as it is queued: a fresh id, the definition, a row per step, its
    parameters validated (defaults applied; :class:`~brain.WorkflowInputError` before
    anything is queued) and its concurrency key resolved from ``trigger`` and them;
    ``trace_context``: its trace's (SPEC §25, ``RunTracer.new_trace``), stored with it."""
    valid = wf.spec.params.validate(params)
    return QueuedRun(run_id=uuid.uuid4().hex, workflow=wf.name,
                     definition_hash=wf.definition_hash, trigger=trigger,
                     step_rows=[(s.name, s.kind) for s in wf.spec.steps],
                     concurrency_key=concurrency_key_of(wf.spec.concurrency_key, trigger, valid),
                     params=valid, step_prints=wf.fingerprint.text, version=wf.version,
                     trace_context=trace_context)


#: A key longer than this is kept as its start and a digest of the whole.
KEY_CHARS = 200


def concurrency_key_of(template: str | None, trigger: TriggerData,
                       params: Mapping[str, Any] | None = None) -> str | None:
    """A workflow's ``concurrency_key`` filled in from a run's trigger and parameters (SPEC
    §19, §21): a trigger
    field the run does not have (a header not sent) counts as empty text, so such runs
    share one key rather than being refused; secrets the process knows are scrubbed; a
    long key is cut, with a digest of the whole so keys that differ stay apart."""
    if template is None:
        return None
    import hashlib

    from brain import placeholders
    from brain._errors import PlaceholderError
    from brain._secrets import scrub
    from brain.runner.values import Values

    values = Values(trigger, {}, None, params)

    def lookup(ref: placeholders.Ref) -> str:
        try:
            return values.lookup(ref).replace("\x00", "")
        except PlaceholderError:
            return ""

    key = scrub(placeholders.render(template, lookup)) or ""
    if len(key) > KEY_CHARS:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        key = f"{key[:KEY_CHARS - 18]}…{digest}"
    return key


async def enqueue(store: ClaimStore, run: QueuedRun, *, trigger_key: str | None,
                  max_queued: int, delivery_id: str | None = None,
                  fire_time: datetime | None = None) -> tuple[str | None, bool]:
    """Commit ``run`` to the queue; ``(run_id, created)`` (see ``Store.enqueue_run``)."""
    return await store.enqueue_run(
        run_id=run.run_id, workflow=run.workflow, definition_hash=run.definition_hash,
        trigger=run.trigger, step_rows=run.step_rows, trigger_key=trigger_key,
        delivery_id=delivery_id, fire_time=fire_time, max_queued=max_queued,
        concurrency_key=run.concurrency_key, params=run.params, step_prints=run.step_prints,
        version=run.version,
        trace_context=run.trace_context)


def failure_runs(wf: RunnableWorkflow, trigger: TriggerData, run_id: str, error: str,
                 step: str | None, step_error: str | None, *,
                 loaded: Mapping[str, RunnableWorkflow] | None = None) -> list[QueuedRun]:
    """The runs of ``wf``'s failure handlers (``@workflow(on_failure=[...])``) to queue with
    its failure: each gets the failed run as a JSON body and ``trigger.event ==
    "failure"``. A run that itself handles a failure triggers nothing further.

    Each handler is taken as ``loaded`` has it (the workflows a serving process has
    loaded now: a handler's file may have been reloaded since the failing workflow
    imported it, and a run queued under its old definition would fail as changed)."""
    if trigger.event == "failure":
        return []
    body = json.dumps({"run_id": run_id, "workflow": wf.name, "error": error,
                       "failed_step": step, "failed_step_error": step_error},
                      ensure_ascii=False)
    handlers: Iterable[RunnableWorkflow] = wf.failure_handlers
    current = loaded or {}
    return [new_run(current.get(h.name, h), TriggerData(event="failure", body=body))
            for h in handlers]


def failure_of(run: RunResult) -> dict[str, Any] | None:
    """For a failure handler's run, the failed run as :func:`failure_runs` gave it in the
    trigger body (``{"run_id", "workflow", "error", "failed_step", "failed_step_error"}``);
    ``None`` for any other run."""
    if run.trigger.event != "failure":
        return None
    try:
        body = json.loads(run.trigger.body)
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("run_id"), str):
        return None
    return body


async def enqueue_here_or_there(wf: RunnableWorkflow, trigger: TriggerData, *,
                                trigger_key: str, queues: LocalQueues | None = None,
                                params: Mapping[str, Any] | None = None) -> str:
    """Queue a run of ``wf`` from this process (``Workflow.enqueue``): to the queue of a
    service in this process serving it, else into ``BRAIN_DATABASE_URL`` (through the
    store this process keeps for a PostgreSQL URL) for a serving process to take, under
    the same queue limit either way. ``params`` are validated before anything is queued."""
    return (await enqueue_many_here_or_there(wf, [trigger], trigger_key=trigger_key,
                                             queues=queues, params=[params]))[0]


async def enqueue_many_here_or_there(wf: RunnableWorkflow, triggers: Sequence[TriggerData], *,
                                     trigger_key: str, queues: LocalQueues | None = None,
                                     params: Sequence[Mapping[str, Any] | None] | None = None
                                     ) -> list[str]:
    """Queue a run of ``wf`` per trigger (``Workflow.enqueue_many``), with the parameters at
    the same place of ``params``; their ids, in order. Every run's parameters are validated
    before any is queued (:class:`~brain.WorkflowInputError` names the bad one).

    Into ``BRAIN_DATABASE_URL`` they go in one transaction, all or none (the queue limit
    counts them all); a service in this process serving ``wf`` (found in ``queues``, by
    default the process's) takes them one by one."""
    from brain.runner.workflows import remember_known_secrets

    remember_known_secrets(wf)  # a script that never ran a workflow scrubs them too
    given = list(params) if params is not None else [None] * len(triggers)
    runs = [_new_run_at(wf, t, p, i if len(triggers) > 1 else None)
            for i, (t, p) in enumerate(zip(triggers, given, strict=True))]
    queue = (queues or PROCESS_QUEUES).serving(wf)
    if queue is not None:
        ids = []
        for run in runs:
            run_id, _ = await queue.enqueue(wf, run.trigger, trigger_key=trigger_key,
                                            params=run.params)
            ids.append(str(run_id))
        return ids
    from brain.store.kept import store_for_url

    async with store_for_url() as store:
        return await store.enqueue_runs(runs, trigger_key=trigger_key, max_queued=queue_limit())


def _new_run_at(wf: RunnableWorkflow, trigger: TriggerData, params: Mapping[str, Any] | None,
                index: int | None) -> QueuedRun:
    """:func:`new_run`; a batch's invalid item is named by its place (``loc`` starts with
    it)."""
    from brain._errors import WorkflowInputError

    try:
        return new_run(wf, trigger, params)
    except WorkflowInputError as exc:
        if index is None:
            raise
        raise WorkflowInputError([{**e, "loc": [index, *list(e["loc"])]}  # type: ignore[call-overload]
                                  for e in exc.errors], exc.workflow) from None


__all__ = ["LocalQueue", "concurrency_key_of", "enqueue", "enqueue_here_or_there",
           "enqueue_many_here_or_there", "env_int", "failure_of", "failure_runs", "new_run",
           "queue_limit"]
