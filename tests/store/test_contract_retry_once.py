"""The store contract, a run is retried once: ``retry_run`` of a run another run retries
already is refused (``AlreadyRetried``, a ``RunConflict`` naming that run) and queues
nothing, also when two retries of one run arrive at once.

On SQLite and PostgreSQL (see ``contract_support``); the memory store, on its way out, is
left out of this rule.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from store import contract_support as contract
from store.contract_support import HASH, ended_run, make_run

from brain._errors import RunConflict
from brain.results import RunStatus
from brain.store import Store
from brain.store.runs import AlreadyRetried

contract_database = contract.contract_database
store = contract.store

ON_DATABASES = pytest.mark.parametrize("store", ["sqlite", "postgres"], indirect=True)


async def queued_retries(store: Any, original: str) -> list[str]:
    """The ids of the queued runs that retry ``original``."""
    return [r.run_id for r in await store.list_runs(status="queued", limit=100)
            if r.retry_of == original]


@ON_DATABASES
async def test_a_second_retry_of_a_run_is_refused_and_names_the_first(store: Any) -> None:
    original = await ended_run(store, RunStatus.FAILED)
    first = await store.retry_run(original, definition_hash=HASH)
    with pytest.raises(AlreadyRetried) as refused:
        await store.retry_run(original[:10])
    assert isinstance(refused.value, RunConflict)
    assert (refused.value.run_id, refused.value.retried_by, refused.value.status) == (
        original, first, "queued")
    assert str(refused.value) == (f"run {original[:12]} was already retried by run {first[:12]} "
                                  f"(queued): once it has ended, retry that one if need be")
    assert await queued_retries(store, original) == [first]


@ON_DATABASES
async def test_the_retry_of_a_retry_is_allowed_and_the_original_still_refused(store: Any) -> None:
    original = await ended_run(store, RunStatus.CANCELLED)
    first = await store.retry_run(original)
    await store.request_cancel(first)  # queued: cancelled at once
    second = await store.retry_run(first)
    assert (await store.get_run(second)).retry_of == first
    with pytest.raises(AlreadyRetried, match=f"retried by run {first[:12]} \\(cancelled\\): "
                                             f"retry that one instead"):
        await store.retry_run(original)
    with pytest.raises(AlreadyRetried, match=f"retried by run {second[:12]}"):
        await store.retry_run(first)
    assert await queued_retries(store, original) == []
    assert await queued_retries(store, first) == [second]


@ON_DATABASES
async def test_of_concurrent_retries_of_one_run_exactly_one_is_queued(store: Any) -> None:
    """Eight retries at once, through two stores on the database (two pools on
    PostgreSQL, two writer threads' turns on SQLite): one queues, seven are refused. Three
    runs in turn, each retried so."""
    other = Store(store.url)
    await other.open()
    try:
        for _ in range(3):
            original = await ended_run(store, RunStatus.FAILED, steps=("one", "two"))
            answers = await asyncio.gather(
                *(s.retry_run(original) for s in (store, other) * 4), return_exceptions=True)
            queued = [a for a in answers if isinstance(a, str)]
            refused = [a for a in answers if isinstance(a, AlreadyRetried)]
            assert len(queued) == 1 and len(refused) == 7, answers
            assert {r.retried_by for r in refused} == set(queued)
            assert await queued_retries(store, original) == queued
            assert list((await store.get_run(queued[0])).steps) == ["one", "two"]
    finally:
        await other.close()


@ON_DATABASES
async def test_a_refused_retry_changes_nothing(store: Any) -> None:
    original = await ended_run(store, RunStatus.FAILED)
    await store.retry_run(original)
    before = await store.list_runs(limit=100)
    with pytest.raises(AlreadyRetried):
        await store.retry_run(original)
    assert await store.list_runs(limit=100) == before
    assert (await store.get_run(original)).status == RunStatus.FAILED
    # a run of its own is still retried as before
    another = await make_run(store)
    await store.request_cancel(another)
    assert (await store.get_run(await store.retry_run(another))).retry_of == another
