"""The store contract, a run's parameters and output (typed parameters and results): what
create_run, enqueue_run and enqueue_runs are given is read back as it was, a run's end keeps
its output, a retry keeps the original's parameters, and a run written without them (NULL,
as every run before the migration) reads as ``{}``.

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

from typing import Any

from store import contract_support as contract
from store.contract_support import HASH, new_id
from support import remembered

from brain.results import RunStatus, TriggerData
from brain.store.base import QueuedRun

store = contract.store
contract_database = contract.contract_database

PARAMS = {"service": "api", "n": 3, "ratio": 0.5, "dry_run": True, "nothing": None,
          "tags": ["a", "é", "\u2603"], "target": {"host": "h", "port": 22}}


async def test_create_run_keeps_params_and_reads_them_back(store: Any) -> None:
    run_id = new_id()
    await store.create_run(run_id=run_id, workflow="wf", definition_hash=HASH,
                           trigger=TriggerData(), step_rows=[("a", "shell")], owner="me:1:a",
                           params=PARAMS)
    assert (await store.get_run(run_id)).params == PARAMS
    assert (await store.run_row(run_id)).params == PARAMS
    listed = await store.list_runs(workflow="wf")
    assert [r.params for r in listed] == [PARAMS]


async def test_enqueue_run_and_enqueue_runs_keep_params(store: Any) -> None:
    one = new_id()
    await store.enqueue_run(run_id=one, workflow="wf", definition_hash=HASH,
                            trigger=TriggerData(), step_rows=[("a", "shell")],
                            params={"service": "one"})
    batch = [QueuedRun(run_id=new_id(), workflow="wf", definition_hash=HASH,
                       trigger=TriggerData(), step_rows=[("a", "shell")],
                       params={"service": f"s{i}"}) for i in range(3)]
    await store.enqueue_runs(batch)
    assert (await store.get_run(one)).params == {"service": "one"}
    for i, run in enumerate(batch):
        assert (await store.run_row(run.run_id)).params == {"service": f"s{i}"}


async def test_a_run_without_params_reads_as_empty(store: Any) -> None:
    run_id = await contract.make_run(store)
    got = await store.get_run(run_id)
    assert (got.params, got.output) == ({}, None)
    assert await store.db.read("SELECT params FROM brain_runs WHERE id = :r",
                               {"r": run_id}) == [{"params": None}]


async def test_finish_run_keeps_the_output(store: Any) -> None:
    run_id = await contract.make_run(store, owner="me:1:a")
    await store.finish_run(run_id, RunStatus.SUCCEEDED, owner="me:1:a",
                           output='{"risky":false,"summary":"ok \u2603"}')
    got = await store.get_run(run_id)
    assert got.output == {"risky": False, "summary": "ok \u2603"}
    assert got.to_json_dict()["output"] == got.output
    assert got.to_json_dict()["params"] == {}


async def test_a_retry_keeps_the_original_params(store: Any) -> None:
    run_id = new_id()
    await store.create_run(run_id=run_id, workflow="wf", definition_hash=HASH,
                           trigger=TriggerData(), step_rows=[("a", "shell")], owner="me:1:a",
                           params=PARAMS)
    await store.finish_run(run_id, RunStatus.FAILED, "boom", owner="me:1:a")
    retry = await store.retry_run(run_id, definition_hash=HASH)
    assert (await store.get_run(retry)).params == PARAMS


async def test_known_secrets_are_scrubbed_from_stored_params(store: Any) -> None:
    secret = "paramsecret-0123456789"
    run_id = new_id()
    with remembered(secret, alone=True):
        await store.create_run(run_id=run_id, workflow="wf", definition_hash=HASH,
                               trigger=TriggerData(), step_rows=[("a", "shell")],
                               params={"token": f"x {secret} y", "list": [secret]})
    assert (await store.get_run(run_id)).params == {"token": "x *** y", "list": ["***"]}
