"""The store contract for LLM cost (SPEC §26): cached steps' entries (found by key until
they expire, replaced, cleared by workflow and step) and named rate limits' windows (a take
fits or says how long to wait, a settle moves a use's end, a pause holds every take, and
concurrent takes never overfill a window). A step answered from the cache keeps its mark.

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from store import contract_support as contract
from store.contract_support import make_run

from brain import Limit
from brain._clock import utcnow
from brain.results import StepStatus

store = contract.store
contract_database = contract.contract_database
OWNER = "me:1:a"


async def _put(store: Any, key: str, *, workflow: str = "wf", step: str = "ask",
               output: str = "answer", expire: float = 60.0) -> None:
    await store.cache_put(key, workflow=workflow, step=step, kind="llm", output=output,
                          stderr=None, usage={"prompt_tokens": 3, "completion_tokens": 4},
                          run_id="r" * 32, expire_seconds=expire)


async def test_an_entry_is_found_by_its_key_until_it_expires(store: Any) -> None:
    await _put(store, "k" * 64)
    await _put(store, "x" * 64, expire=0.05)
    found = await store.cache_get("k" * 64)
    assert found is not None and found.output == "answer"
    assert found.usage == {"prompt_tokens": 3, "completion_tokens": 4}
    assert found.run_id == "r" * 32 and found.created_at is not None
    await asyncio.sleep(0.1)
    assert await store.cache_get("x" * 64) is None
    assert await store.cache_get("n" * 64) is None


async def test_an_entry_put_again_replaces_the_older(store: Any) -> None:
    await _put(store, "k" * 64, output="old")
    await _put(store, "k" * 64, output="new")
    found = await store.cache_get("k" * 64)
    assert found is not None and found.output == "new"


async def test_clear_by_workflow_and_step(store: Any) -> None:
    await _put(store, "a" * 64, workflow="one", step="ask")
    await _put(store, "b" * 64, workflow="one", step="other")
    await _put(store, "c" * 64, workflow="two", step="ask")
    assert await store.cache_clear("one", "ask") == 1
    assert await store.cache_get("a" * 64) is None
    assert await store.cache_get("b" * 64) is not None
    assert await store.cache_clear("one") == 1
    assert await store.cache_clear() == 1
    assert await store.cache_get("c" * 64) is None


async def test_a_cached_step_keeps_its_mark(store: Any) -> None:
    run_id = await make_run(store, owner=OWNER, steps=("ask", "plain"), kind="llm")
    await store.step_finished(run_id, "ask", status=StepStatus.SUCCEEDED, tries=1,
                              ended_at=utcnow(), output="{}", owner=OWNER,
                              cached={"usage": {"prompt_tokens": 5, "completion_tokens": 1}})
    await store.step_finished(run_id, "plain", status=StepStatus.SUCCEEDED, tries=1,
                              ended_at=utcnow(), output="x", owner=OWNER)
    run = await store.get_run(run_id)
    assert run.steps["ask"].cached
    assert run.steps["ask"].saved_usage == {"prompt_tokens": 5, "completion_tokens": 1}
    assert run.steps["ask"].usage is None
    assert not run.steps["plain"].cached and run.steps["plain"].saved_usage is None


async def test_takes_fill_a_window_then_say_how_long_to_wait(store: Any) -> None:
    limit = Limit(requests=2, tokens=100, per="1s")
    first, _ = await store.limit_take("llm", limit, 10, 5.0)
    second, _ = await store.limit_take("llm", limit, 10, 5.0)
    assert first and second and first != second
    none, wait = await store.limit_take("llm", limit, 10, 5.0)
    assert none is None and wait > 1.0  # unsettled uses count until their hold ends
    await store.limit_settle([first, second], 0.2, [5, None])
    none, wait = await store.limit_take("llm", limit, 10, 5.0)
    assert none is None and 0 < wait <= 0.2
    await asyncio.sleep(wait + 0.02)
    taken, _ = await store.limit_take("llm", limit, 10, 5.0)
    assert taken is not None
    other, _ = await store.limit_take("other", limit, 10, 5.0)  # another limit: its own window
    assert other is not None


async def test_tokens_count_in_the_window(store: Any) -> None:
    limit = Limit(tokens=100, per="1s")
    first, _ = await store.limit_take("t", limit, 60, 5.0)
    assert first is not None
    none, wait = await store.limit_take("t", limit, 60, 5.0)
    assert none is None and wait > 0
    await store.limit_settle([first], 0.1, [30])  # it spent less than it reserved
    await asyncio.sleep(0.0)
    taken, _ = await store.limit_take("t", limit, 60, 5.0)
    assert taken is not None


async def test_a_pause_holds_every_take(store: Any) -> None:
    limit = Limit(requests=100, per="1s")
    await store.limit_pause("p", 0.3)
    await store.limit_pause("p", 0.1)  # a shorter pause does not shorten it
    none, wait = await store.limit_take("p", limit, 0, 5.0)
    assert none is None and 0.15 < wait <= 0.3
    await asyncio.sleep(wait + 0.02)
    taken, _ = await store.limit_take("p", limit, 0, 5.0)
    assert taken is not None


async def test_concurrent_takes_never_overfill_a_window(store: Any) -> None:
    limit = Limit(requests=5, per="10s")
    taken = await asyncio.gather(*(store.limit_take("busy", limit, 0, 5.0) for _ in range(20)))
    assert sum(1 for use, _ in taken if use is not None) == 5
