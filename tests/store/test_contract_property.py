"""The store contract as a property: any sequence of operations gives the same observable
records on SQLite and PostgreSQL.

- The runner's record: creating and claiming runs, heartbeats, every step write,
  finishing (with runs queued with it), cancelling, resetting steps for a resume; the
  records compared after every operation.
- The queue's methods too: enqueue with delivery ids and fire times, claim_next,
  retry_run, fail_queued, counts and fire claims.

Both stores must answer every operation the same (a value, or the same error) and hold the
same records, compared without ids (each run has a label) and without the times the stores
take themselves (only whether each is set). PostgreSQL's one known difference, NUL in
text (pinned in ``test_contract_text``), is left out of the texts it is given. The
examples of a test share one PostgreSQL database (a database each would cost more than
the example): each sees only the runs it made.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store.contract_support import EXPIRED, HASH, LONG, OTHER_HASH

from brain.results import RunResult, RunStatus, StepStatus, TriggerData
from brain.store import Store
from brain.store.base import QueuedRun, StepProcess

SETTINGS = settings(max_examples=30, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
T0 = datetime(2030, 1, 1, tzinfo=UTC)
STEPS = ("s0", "s1", "s2")
OWNERS = ("A", "B")
ENDED = (StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.SKIPPED, StepStatus.CANCELLED)
FINISHED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
MAX_RUNS = 6

runs = st.integers(0, 7)  # which run: taken modulo the runs there are
owners = st.sampled_from(OWNERS)
maybe_owner = st.sampled_from((None, *OWNERS))
leases = st.sampled_from((LONG, EXPIRED))
steps = st.sampled_from(STEPS)
# Any text, lone surrogates too (stored as U+FFFD, SPEC §4), but NUL: PostgreSQL stores it
# as U+FFFD (pinned by test_contract_text).
texts = st.text(st.characters(exclude_categories=(), exclude_characters="\x00"), max_size=12)
maybe_text = st.none() | texts


@dataclass
class World:
    """One example's runs as one store sees them: the ids new runs take (the same list for
    both stores, taken in the same order), the runs there are, and a label for each."""

    fresh: list[str]
    taken: int = 0
    ids: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)

    def take(self) -> str:
        self.taken += 1
        return self.fresh[self.taken - 1]

    def add(self, run_id: str, prefix: str = "R") -> None:
        self.ids.append(run_id)
        self.labels[run_id] = f"{prefix}{len(self.ids) - 1}"

    def pick(self, index: int) -> str:
        return self.ids[index % len(self.ids)]

    def label(self, run_id: str | None) -> str | None:
        return None if run_id is None else self.labels.get(run_id, "unknown")


def observed_run(run: RunResult, world: World) -> dict[str, Any]:
    """What a reader sees of a run, its ids as labels and the stores' own times as set/unset."""
    data = run.model_dump(mode="json", exclude={"run_id", "previous_run_id", "retry_of",
                                                "created_at", "started_at", "ended_at", "steps"})
    data.update(run=world.label(run.run_id), previous=world.label(run.previous_run_id),
                retry_of=world.label(run.retry_of), started=run.started_at is not None,
                ended=run.ended_at is not None)
    data["steps"] = [s.model_dump(mode="json", exclude={"ended_at"}) | {"ended": s.ended_at is not None}
                     for s in run.steps.values()]
    return data


async def snapshot(store: Any, world: World) -> dict[str, Any]:
    """Everything the contract's reads show of the example's runs."""
    seen: dict[str, Any] = {}
    for run_id in world.ids:
        row = await store.run_row(run_id)
        if row is None:
            seen[world.labels[run_id]] = None
            continue
        seen[world.labels[run_id]] = dict(
            run=observed_run(await store.get_run(run_id), world),
            lease=(row.lease_owner, row.lease_expires_at is not None), hash=row.definition_hash,
            cancel_requested=row.cancel_requested, states=await store.step_states(run_id),
            outputs=await store.step_outputs(run_id),
            processes=sorted(await store.step_processes(run_id), key=lambda p: p.step))
    # Runs of other examples (on the shared database) are "unknown": left out.
    seen["expired"] = sorted(label for i in await store.expired_runs()
                             if (label := str(world.label(i))) != "unknown")
    for status in RunStatus:
        seen[status.value] = sorted(label for r in await store.list_runs(status=status,
                                                                          limit=1000)
                                    if (label := str(world.label(r.run_id))) != "unknown")
    return seen


def differences(first: dict[str, Any], second: dict[str, Any]) -> str:
    """The entries of two snapshots that differ, for the failure message."""
    return "; ".join(f"{key}: {first.get(key)!r} != {second.get(key)!r}"
                     for key in sorted(set(first) | set(second))
                     if first.get(key) != second.get(key))


async def outcome(call: Any) -> Any:
    """What an operation answered: its value (ids as labels by the caller), or its error's
    type."""
    try:
        return await call
    except Exception as exc:
        return f"raised {type(exc).__name__}"


# --- the runner's record ------------------------------------------------------------------------


operations = st.one_of(
    st.tuples(st.just("create"), maybe_owner, leases, maybe_text),
    st.tuples(st.just("claim"), runs, owners, leases),
    st.tuples(st.just("heartbeat"), runs, owners, st.sampled_from((None, LONG, EXPIRED))),
    st.tuples(st.just("step_running"), runs, steps, st.integers(1, 3), maybe_owner),
    st.tuples(st.just("step_finished"), runs, steps, st.sampled_from(ENDED), maybe_text, maybe_text,
              maybe_owner, st.booleans()),
    st.tuples(st.just("steps_ended"), runs, st.lists(steps, max_size=3), st.sampled_from(ENDED),
              maybe_text, maybe_owner),
    st.tuples(st.just("step_process"), runs, steps, st.integers(1, 2**40), maybe_owner),
    st.tuples(st.just("add_steps"), runs, st.lists(st.tuples(steps, st.integers(0, 11)), max_size=2),
              maybe_owner),
    st.tuples(st.just("end_unfinished"), runs, st.sampled_from(ENDED), maybe_text, maybe_owner),
    st.tuples(st.just("reset"), runs, st.lists(steps, max_size=3), maybe_owner),
    st.tuples(st.just("set_previous"), runs, st.none() | runs, maybe_owner),
    st.tuples(st.just("finish"), runs, st.sampled_from(FINISHED), maybe_text, maybe_owner,
              st.booleans()),
    st.tuples(st.just("cancel"), runs),
)


async def apply(store: Any, op: tuple[Any, ...], world: World) -> Any:
    """Apply one operation to ``store``; the runs it creates are added to ``world``."""
    kind, *args = op
    if kind == "create":
        owner, lease, body = args
        if len(world.ids) >= MAX_RUNS:
            return "skipped"
        run_id = world.take()
        answer = await outcome(store.create_run(
            run_id=run_id, workflow="wf", definition_hash=HASH,
            trigger=TriggerData(body=body or ""), step_rows=[(s, "shell") for s in STEPS],
            owner=owner, lease_seconds=lease))
        if isinstance(answer, str):
            return answer
        world.add(run_id)
        return "created"
    run_id = world.pick(args[0])
    match kind:
        case "claim":
            return await outcome(store.claim_run(run_id, args[1], args[2]))
        case "heartbeat":
            return await outcome(store.heartbeat(run_id, args[1], args[2]))
        case "step_running":
            _, name, tries, owner = args
            return await outcome(store.step_running(
                run_id, name, inputs={"try": tries}, tries=tries,
                started_at=T0 + timedelta(seconds=tries), owner=owner))
        case "step_finished":
            _, name, status, output, error, owner, quick = args
            extra: dict[str, Any] = dict(inputs={"quick": True}, started_at=T0) if quick else {}
            return await outcome(store.step_finished(
                run_id, name, status=status, tries=1, ended_at=T0 + timedelta(minutes=1),
                output=output, error=error, stderr=error, owner=owner, **extra))
        case "steps_ended":
            _, names, status, error, owner = args
            return await outcome(store.steps_ended(run_id, names, status, error, owner=owner))
        case "step_process":
            _, name, started, owner = args
            return await outcome(store.step_process(
                run_id, StepProcess(name, 100 + started % 1000, started, "host+1234"), owner=owner))
        case "add_steps":
            _, instances, owner = args
            return await outcome(store.add_steps(
                run_id, [(f"{name}[{i}]", "llm", STEPS.index(name)) for name, i in instances],
                owner=owner))
        case "end_unfinished":
            _, pending, error, owner = args
            return await outcome(store.end_unfinished_steps(run_id, pending=pending, error=error,
                                                            owner=owner))
        case "reset":
            _, names, owner = args
            return await outcome(store.reset_steps(run_id, names, owner=owner))
        case "set_previous":
            _, previous, owner = args
            return await outcome(store.set_previous_run(
                run_id, None if previous is None else world.pick(previous), owner=owner))
        case "finish":
            _, status, error, owner, queue_one = args
            queued = [QueuedRun(run_id=world.take(), workflow="handler",
                                definition_hash=OTHER_HASH,
                                trigger=TriggerData(event="failure", body=error or ""),
                                step_rows=[(s, "llm") for s in STEPS])] if queue_one else []
            answer = await outcome(store.finish_run(run_id, status, error, owner=owner,
                                                    then_queue=queued))
            if isinstance(answer, str):
                return answer
            for handler in queued:
                world.add(handler.run_id, prefix="H")
            return "finished"
        case "cancel":
            answer = await outcome(store.request_cancel(run_id))
            if isinstance(answer, str):
                return answer
            result, active = answer
            return observed_run(result, world), active
    raise AssertionError(kind)


async def both_agree(ops: list[tuple[Any, ...]], urls: dict[str, str]) -> None:
    fresh = [uuid.uuid4().hex for _ in range(len(ops) + 1)]
    stores = {name: Store(url) for name, url in urls.items()}
    worlds = {name: World(fresh) for name in stores}
    for store in stores.values():
        await store.open()
    try:
        for n, op in enumerate([("create", None, LONG, "first"), *ops]):
            answers = {name: await apply(store, op, worlds[name]) for name, store in stores.items()}
            assert answers["sqlite"] == answers["postgres"], f"operation {n}: {op}"
            seen = {name: await snapshot(store, worlds[name]) for name, store in stores.items()}
            assert seen["sqlite"] == seen["postgres"], (
                f"after operation {n}: {op}: {differences(seen['sqlite'], seen['postgres'])}")
    finally:
        for store in stores.values():
            await store.close()


@SETTINGS
@given(ops=st.lists(operations, min_size=1, max_size=20))
def test_sqlite_and_postgres_agree_on_every_sequence_of_the_runners_writes(
        request: pytest.FixtureRequest, tmp_path: Path, ops: list[tuple[Any, ...]]) -> None:
    asyncio.run(both_agree(ops, {"sqlite": f"sqlite:///{tmp_path / uuid.uuid4().hex}.db",
                                 "postgres": postgres_url(request)}))


# --- the queue too: enqueue, claim_next, retry_run, fail_queued ------------------------------

FIRES = (datetime(2030, 1, 1, 9, tzinfo=UTC), datetime(2030, 1, 2, 9, tzinfo=UTC))
WORKFLOWS = ("a", "b")

queue_operations = st.one_of(
    st.tuples(st.just("enqueue"), st.sampled_from(WORKFLOWS), st.sampled_from((None, "d1", "d2")),
              st.sampled_from((None, "k1", "k2")), st.none() | st.sampled_from(FIRES), texts),
    st.tuples(st.just("claim_next"), st.sampled_from(((), ("a",), ("b",), ("b", "a"))), owners,
              leases),
    st.tuples(st.just("claim"), runs, owners, leases),
    st.tuples(st.just("heartbeat"), runs, owners, st.sampled_from((None, LONG, EXPIRED))),
    st.tuples(st.just("step_finished"), runs, steps, st.sampled_from(ENDED), maybe_text,
              maybe_text, maybe_owner, st.just(True)),
    st.tuples(st.just("finish"), runs, st.sampled_from(FINISHED), maybe_text, maybe_owner,
              st.booleans()),
    st.tuples(st.just("cancel"), runs),
    st.tuples(st.just("retry"), runs, st.sampled_from((None, HASH, OTHER_HASH))),
    st.tuples(st.just("fail_queued"), st.sampled_from(WORKFLOWS), texts, st.booleans()),
    st.tuples(st.just("count"), st.sampled_from(WORKFLOWS),
              st.sampled_from((None, "queued", "running", "failed")),
              st.sampled_from((None, "k1", "k2"))),
    st.tuples(st.just("claim_fire"), st.sampled_from(WORKFLOWS), st.sampled_from(("k1", "k2")),
              st.sampled_from(FIRES)),
    st.tuples(st.just("last_fire"), st.sampled_from(WORKFLOWS), st.sampled_from(("k1", "k2"))),
)


async def apply_queue(store: Any, op: tuple[Any, ...], world: World, prefix: str) -> Any:
    """Apply one queue operation; the example's workflows are named ``prefix-a`` and
    ``prefix-b`` (on a database other examples share, they see only their own runs)."""
    kind, *args = op
    if kind == "enqueue":
        workflow, delivery, key, fire, body = args
        run_id = world.take()
        answer = await outcome(store.enqueue_run(
            run_id=run_id, workflow=f"{prefix}-{workflow}", definition_hash=HASH,
            trigger=TriggerData(event="webhook", body=body), step_rows=[(s, "shell") for s in STEPS],
            trigger_key=key, delivery_id=delivery, fire_time=fire))
        if isinstance(answer, str):
            return answer
        found, created = answer
        if created:
            world.add(run_id)
        return world.label(found), created
    if kind in ("claim_next", "fail_queued", "count", "claim_fire", "last_fire"):
        match kind:
            case "claim_next":
                names, owner, lease = args
                found = await outcome(store.claim_next([f"{prefix}-{n}" for n in names], owner,
                                                       lease))
                return found if found is None or found.startswith("raised") else world.label(found)
            case "fail_queued":
                workflow, error, handle = args

                def handlers(run_id: str, event: str) -> list[QueuedRun]:
                    return [QueuedRun(run_id=uuid.uuid5(uuid.NAMESPACE_OID, run_id).hex,
                                      workflow=f"{prefix}-handler", definition_hash=HASH,
                                      trigger=TriggerData(event="failure", body=event),
                                      step_rows=[(s, "shell") for s in STEPS])] if handle else []

                failed = await outcome(store.fail_queued(f"{prefix}-{workflow}", error, handlers))
                if isinstance(failed, str):
                    return failed
                labelled = sorted((str(world.label(i)), i) for i in failed)
                for _, run_id in labelled:
                    if handle:
                        world.add(uuid.uuid5(uuid.NAMESPACE_OID, run_id).hex, prefix="H")
                return [label for label, _ in labelled]
            case "count":
                workflow, status, key = args
                return await outcome(store.count_active(workflow=f"{prefix}-{workflow}",
                                                        status=status, trigger_key=key))
            case "claim_fire":
                workflow, key, fire = args
                return await outcome(store.claim_fire(f"{prefix}-{workflow}", key, fire))
            case "last_fire":
                workflow, key = args
                return await outcome(store.last_fire(f"{prefix}-{workflow}", key))
    if kind == "retry":
        run_id, definition_hash = world.pick(args[0]), args[1]
        new = await outcome(store.retry_run(run_id, definition_hash=definition_hash))
        if new.startswith("raised"):
            return new
        world.add(new, prefix="X")
        return world.label(new)
    return await apply(store, op, world)


async def queue_snapshot(store: Any, world: World, prefix: str) -> dict[str, Any]:
    seen = await snapshot(store, world)
    for status in RunStatus:  # list_runs by workflow: a shared database holds other examples'
        found = []
        for workflow in (*WORKFLOWS, "handler"):
            found += await store.list_runs(workflow=f"{prefix}-{workflow}", status=status,
                                           limit=1000)
        seen[status.value] = sorted(str(world.label(r.run_id)) for r in found)
    seen["expired"] = [label for label in seen["expired"] if label != "unknown"]
    return seen


async def queues_agree(ops: list[tuple[Any, ...]], urls: dict[str, str]) -> None:
    fresh = [uuid.uuid4().hex for _ in range(2 * len(ops) + 2)]
    prefix = uuid.uuid4().hex[:8]
    stores = {name: Store(url) for name, url in urls.items()}
    worlds = {name: World(fresh) for name in stores}
    first, second = stores
    for store in stores.values():
        await store.open()
    try:
        for n, op in enumerate([("enqueue", "a", None, None, None, "first"), *ops]):
            answers = {name: await apply_queue(store, op, worlds[name], prefix)
                       for name, store in stores.items()}
            assert answers[first] == answers[second], f"operation {n}: {op}"
        seen = {name: await queue_snapshot(store, worlds[name], prefix)
                for name, store in stores.items()}
        assert seen[first] == seen[second], differences(seen[first], seen[second])
    finally:
        for store in stores.values():
            await store.close()


@SETTINGS
@given(ops=st.lists(queue_operations, min_size=1, max_size=20))
def test_sqlite_and_postgres_agree_on_every_sequence_of_queue_operations(
        request: pytest.FixtureRequest, tmp_path: Path, ops: list[tuple[Any, ...]]) -> None:
    asyncio.run(queues_agree(ops, {"sqlite": f"sqlite:///{tmp_path / uuid.uuid4().hex}.db",
                                   "postgres": postgres_url(request)}))


def postgres_url(request: pytest.FixtureRequest) -> str:
    """One fresh database for all the examples of the test (each example has workflows of
    its own): a database per example would cost more than the example."""
    url: str | None = getattr(request.node, "_contract_pg_url", None)
    if url is None:
        from support import upgraded_schema

        url = request.getfixturevalue("fresh_pg_url")
        asyncio.run(upgraded_schema(url))
        request.node._contract_pg_url = url
    return url
