"""The store contract, definitions (SPEC §24): a run keeps its steps' fingerprints and the
version it started on, written with the run itself; a run that goes on after a change takes
the new definition (fingerprints, hash, the version appended, its steps not started yet
written again, the pending steps no longer defined skipped) in one transaction, under its
lease.

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

from typing import Any

import pytest
from store import contract_support as contract
from store.contract_support import HASH, OTHER_HASH, finish_step, new_id

from brain._errors import LeaseLost
from brain.dsl.fingerprint import REMOVED
from brain.results import RunStatus, StepStatus, TriggerData
from brain.store.base import QueuedRun

store = contract.store
contract_database = contract.contract_database

OWNER = "me:1:a"
PRINTS = '{"one":["shell",{"command":"aaaaaaaaaaaa"},[]]}'
NEW_PRINTS = '{"one":["shell",{"command":"aaaaaaaaaaaa"},[]],"two":["llm",{},["one"]]}'


async def _run(store: Any, *, owner: str | None = OWNER, steps: tuple[str, ...] = ("one", "two"),
               version: str | None = "5e1f0a9c33b2@1a2b3c4d5e6f") -> str:
    run_id = new_id()
    await store.create_run(run_id=run_id, workflow="wf", definition_hash=HASH,
                           trigger=TriggerData(), step_rows=[(s, "shell") for s in steps],
                           owner=owner, lease_seconds=contract.LONG, step_prints=PRINTS,
                           version=version)
    return run_id


async def test_a_run_keeps_the_fingerprints_and_version_it_was_created_with(store: Any) -> None:
    run_id = await _run(store)
    queued, _ = await store.enqueue_run(run_id=new_id(), workflow="wf", definition_hash=HASH,
                                        trigger=TriggerData(), step_rows=[("one", "shell")],
                                        step_prints=PRINTS, version="abc")
    [handler] = await store.enqueue_runs([QueuedRun(new_id(), "wf", HASH, TriggerData(),
                                                    [("one", "shell")], step_prints=PRINTS,
                                                    version="def")])
    for rid, version in ((run_id, "5e1f0a9c33b2@1a2b3c4d5e6f"), (queued, "abc"),
                         (handler, "def")):
        row = await store.run_row(rid)
        assert (row.step_prints, row.version, row.continued_on) == (PRINTS, version, ())
        got = await store.get_run(rid)
        assert (got.version, got.continued_on) == (version, [])
        assert got.to_json_dict()["version"] == version


async def test_a_run_without_them_reads_none(store: Any) -> None:
    run_id = await contract.make_run(store)
    row = await store.run_row(run_id)
    assert (row.step_prints, row.version, row.continued_on) == (None, None, ())


async def test_continue_on_takes_the_new_definition_in_one_transaction(store: Any) -> None:
    run_id = await _run(store, steps=("one", "gone", "later"))
    await finish_step(store, run_id, "one", "out", owner=OWNER)
    await store.continue_on(run_id, owner=OWNER, definition_hash=OTHER_HASH,
                            step_prints=NEW_PRINTS, continued_on=["v2"],
                            fresh=[("two", "llm", 1), ("later", "step", 2)],
                            removed=["gone"])
    row = await store.run_row(run_id)
    assert (row.definition_hash, row.step_prints, row.continued_on) == (
        OTHER_HASH, NEW_PRINTS, ("v2",))
    assert row.version == "5e1f0a9c33b2@1a2b3c4d5e6f"  # the one it started on
    steps = (await store.get_run(run_id)).steps
    assert (steps["one"].status, steps["one"].output) == (StepStatus.SUCCEEDED, "out")
    assert (steps["gone"].status, steps["gone"].error) == (StepStatus.SKIPPED, REMOVED)
    assert (steps["two"].kind, steps["two"].status) == ("llm", StepStatus.PENDING)
    assert (steps["later"].kind, steps["later"].status) == ("step", StepStatus.PENDING)
    # and once more: the versions grow, a step written again keeps its (new) row
    await store.continue_on(run_id, owner=OWNER, definition_hash=HASH, step_prints=PRINTS,
                            continued_on=["v2", "v3"], fresh=[("two", "llm", 1)], removed=[])
    assert (await store.get_run(run_id)).continued_on == ["v2", "v3"]


async def test_continue_on_never_rewrites_a_started_step(store: Any) -> None:
    run_id = await _run(store)
    await finish_step(store, run_id, "one", "kept", owner=OWNER)
    await store.continue_on(run_id, owner=OWNER, definition_hash=OTHER_HASH,
                            step_prints=NEW_PRINTS, continued_on=["v2"],
                            fresh=[("one", "llm", 0)], removed=["one"])
    step = (await store.get_run(run_id)).steps["one"]
    assert (step.kind, step.status, step.output) == ("shell", StepStatus.SUCCEEDED, "kept")


async def test_continue_on_under_a_lost_lease_changes_nothing(store: Any) -> None:
    run_id = await _run(store)
    await contract.taken_over(store, run_id)
    before = await store.get_run(run_id)
    with pytest.raises(LeaseLost):
        await store.continue_on(run_id, owner=OWNER, definition_hash=OTHER_HASH,
                                step_prints=NEW_PRINTS, continued_on=["v2"],
                                fresh=[("three", "shell", 2)], removed=["two"])
    assert await store.get_run(run_id) == before
    assert (await store.run_row(run_id)).definition_hash == HASH


async def test_restamp_gives_the_fingerprints_and_version_too(store: Any) -> None:
    run_id = await _run(store, owner=None)
    assert await store.claim_run(run_id, OWNER, contract.LONG)
    assert await store.restamp_run(run_id, OTHER_HASH, [("one", "shell"), ("two", "llm")],
                                   owner=OWNER, step_prints=NEW_PRINTS, version="v9")
    row = await store.run_row(run_id)
    assert (row.step_prints, row.version, row.continued_on) == (NEW_PRINTS, "v9", ())


async def test_a_retry_starts_on_the_definition_its_original_ended_on(store: Any) -> None:
    run_id = await _run(store)
    await finish_step(store, run_id, "one", "kept", owner=OWNER)
    await store.continue_on(run_id, owner=OWNER, definition_hash=OTHER_HASH,
                            step_prints=NEW_PRINTS, continued_on=["v2"], fresh=[], removed=[])
    await store.finish_run(run_id, RunStatus.FAILED, "boom", owner=OWNER)
    retry = await store.run_row(await store.retry_run(run_id))
    assert (retry.definition_hash, retry.step_prints, retry.version, retry.continued_on) == (
        OTHER_HASH, NEW_PRINTS, "v2", ())
