"""The store contract, reading runs: resolve_id, get_run, list_runs, run_row and
latest_succeeded_run.

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

from typing import Any

import pytest
from store import contract_support as contract
from store.contract_support import ended_run, make_run, new_id, tick

from brain._clock import utcnow
from brain._errors import RunNotFound
from brain.results import RunStatus, TriggerData

store = contract.store
contract_database = contract.contract_database


# --- resolve_id and get_run -----------------------------------------------------------------


async def test_resolve_id_takes_a_full_id_or_a_unique_prefix(store: Any) -> None:
    base = new_id()[:20]
    first = await make_run(store, run_id=base + "a" + "0" * 11)
    second = await make_run(store, run_id=base + "b" + "0" * 11)
    assert await store.resolve_id(first) == first
    assert await store.resolve_id(base + "a") == first
    assert await store.resolve_id((base + "B").upper()) == second  # case does not matter
    assert (await store.get_run(base + "b")).run_id == second


async def test_resolve_id_refuses_what_names_no_single_run(store: Any) -> None:
    base = new_id()[:20]
    await make_run(store, run_id=base + "a" + "0" * 11)
    await make_run(store, run_id=base + "b" + "0" * 11)
    cases = {"ambiguous prefix": (base, "ambiguous"), "unknown id": (new_id(), "no run"),
             "unknown prefix": (base + "c", "no run"), "not hexadecimal": ("not-hex", "hexadecimal"),
             "empty": ("", "hexadecimal"), "too long": (base + "a" + "0" * 12, "no run")}
    for case, (given, says) in cases.items():
        for read in (store.resolve_id, store.get_run, store.request_cancel):
            with pytest.raises(RunNotFound, match=says):
                await read(given)
                pytest.fail(f"{read.__name__} accepted the {case}")


async def test_get_run_with_or_without_steps(store: Any) -> None:
    run_id = await make_run(store, steps=("b", "a", "c"))
    assert list((await store.get_run(run_id)).steps) == ["b", "a", "c"]  # call order, not names
    bare = await store.get_run(run_id, with_steps=False)
    assert bare.steps == {} and bare.run_id == run_id
    assert bare.model_dump(exclude={"steps"}) == (await store.get_run(run_id)).model_dump(
        exclude={"steps"})


async def test_run_row_of_an_unknown_or_prefixed_id_is_none(store: Any) -> None:
    run_id = await make_run(store)
    assert await store.run_row(new_id()) is None
    assert await store.run_row(run_id[:8]) is None  # the runner's read: full ids only
    assert (await store.run_row(run_id)).id == run_id


# --- list_runs -----------------------------------------------------------------------------------


async def test_list_runs_newest_first_without_steps(store: Any) -> None:
    assert await store.list_runs() == []
    made = []
    for _ in range(4):
        made.append(await make_run(store))
        await tick()
    found = await store.list_runs()
    assert [r.run_id for r in found] == made[::-1]
    assert all(r.steps == {} for r in found)
    assert found[0] == await store.get_run(made[-1], with_steps=False)
    # pages
    assert [r.run_id for r in await store.list_runs(limit=2)] == made[:1:-1]
    assert [r.run_id for r in await store.list_runs(limit=2, offset=2)] == made[1::-1]
    assert await store.list_runs(offset=4) == []
    assert await store.list_runs(limit=0) == []


async def test_list_runs_filters_by_workflow_status_and_trigger_kind(store: Any) -> None:
    queued = await make_run(store, "a", trigger=TriggerData(event="webhook"))
    await tick()
    running = await make_run(store, "a", owner="o:1:x", trigger=TriggerData(event="schedule"))
    await tick()
    done = await ended_run(store, RunStatus.SUCCEEDED, "a")
    await tick()
    elsewhere = await make_run(store, "b", trigger=TriggerData(event="webhook"))

    def ids(found: list[Any]) -> list[str]:
        return [r.run_id for r in found]

    assert ids(await store.list_runs(workflow="a")) == [done, running, queued]
    assert ids(await store.list_runs(workflow="b")) == [elsewhere]
    assert ids(await store.list_runs(workflow="nope")) == []
    assert ids(await store.list_runs(status="queued")) == [elsewhere, queued]
    assert ids(await store.list_runs(workflow="a", status="running")) == [running]
    assert ids(await store.list_runs(workflow="a", status="succeeded")) == [done]
    assert ids(await store.list_runs(status="cancelled")) == []
    assert ids(await store.list_runs(event="webhook")) == [elsewhere, queued]
    assert ids(await store.list_runs(event="schedule", status="running")) == [running]
    assert ids(await store.list_runs(workflow="a", event="manual")) == [done]
    # an empty filter is no filter
    assert ids(await store.list_runs(workflow="", status="", event="")) == [
        elsewhere, done, running, queued]


# --- latest_succeeded_run ({previous.X}, SPEC §3) ---------------------------------------------


async def test_latest_succeeded_run_is_the_last_to_end_by_the_given_time(store: Any) -> None:
    assert await store.latest_succeeded_run("wf", utcnow()) is None
    first = await ended_run(store, RunStatus.SUCCEEDED)
    await tick()
    between = utcnow()
    await tick()
    second = await ended_run(store, RunStatus.SUCCEEDED)
    await tick()
    await ended_run(store, RunStatus.FAILED)  # later, but failed
    await ended_run(store, RunStatus.CANCELLED)
    await ended_run(store, RunStatus.SUCCEEDED, "other")  # another workflow
    await make_run(store, owner="o:1:a")  # running: has not ended
    await make_run(store)

    assert await store.latest_succeeded_run("wf", utcnow()) == second
    assert await store.latest_succeeded_run("wf", between) == first
    assert await store.latest_succeeded_run("nope", utcnow()) is None
    # "by": a run that ended exactly then counts
    ended_at = (await store.get_run(first)).ended_at
    assert await store.latest_succeeded_run("wf", ended_at) == first


async def test_latest_succeeded_run_orders_by_end_not_by_creation(store: Any) -> None:
    early = await make_run(store, owner="o:1:a")
    await tick()
    late = await make_run(store, owner="o:1:b")
    await store.finish_run(late, RunStatus.SUCCEEDED)
    await tick()
    await store.finish_run(early, RunStatus.SUCCEEDED)
    assert await store.latest_succeeded_run("wf", utcnow()) == early
