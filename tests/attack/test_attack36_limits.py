"""Attack 36 (SPEC §26): with ``Limit(requests=N, per=...)`` no window of ``per`` seconds
ever sees more than N requests reach the server — under retries, timeouts, cancels, a
provider that refuses a schema's format, and 429 with ``Retry-After``; a cancelled request
does not hold its limit for ten minutes.

Requests are counted where they arrive: a real OpenAI-compatible server on 127.0.0.1 noting
when each came (``TimedServer``). Windows are 1-2 s; each test uses a limit name of its own
(a process keeps its windows on SQLite). One test runs on PostgreSQL as well, where the
windows are the database's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from runner.test_limits import TimedServer, most_in_any_window

from brain import Limit, WorkflowDefinitionError, limit, llm, parallel, shell, step, workflow

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


@pytest.fixture
def server() -> Iterator[TimedServer]:
    with TimedServer() as s:
        yield s


def _arrived(server: TimedServer, count: int, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while len(server.times) < count and time.monotonic() < deadline:
        time.sleep(0.02)


# --- breaks ------------------------------------------------------------------------------


def test_the_json_object_fallback_request_passes_the_limit_too(server: TimedServer) -> None:
    server.respond(status=400, json={"error": {"message": "response_format: 'json_schema' "
                                               "is not supported, use 'text' or 'json_object'"}})
    server.respond(json={"choices": [{"message": {"role": "assistant", "content": "7"}}]})

    @workflow(limits={"atk36-format": Limit(requests=1, per="2s")})
    def typed() -> None:
        llm("ask", prompt="a number", model="m", provider_url=server.url,
            schema={"type": "integer"}, limit="atk36-format")

    result = typed()
    assert result.succeeded, result.error
    assert len(server.times) == 2
    assert most_in_any_window(server.times, 2.0) <= 1


def _cancel_then_probe(server: TimedServer, name: str, store: str | None) -> float:
    """A limited request cut off by its sibling's failure (the run cancels it); then, once
    its window is over, how long the limit says one more request must wait (0: now)."""
    server.respond(content="late", delay=6.0)
    per = Limit(requests=1, per="1s")

    @workflow(name=f"halted_{name.replace('-', '_')}", limits={name: per})
    def halted() -> None:
        with parallel():
            llm("slow", prompt="slow", model="m", provider_url=server.url, limit=name)
            shell("boom", command="sleep 0.5; exit 1")

    first = halted.run(store=store) if store else halted()
    assert not first.succeeded and first.steps["slow"].status == "cancelled"
    assert len(server.times) == 1
    time.sleep(1.5)  # the cancel was a second ago: its window is over

    async def probe() -> float:
        from brain.runner.limits import PROCESS_LIMITS
        from brain.store import Store

        if store is None:
            _use, wait = await PROCESS_LIMITS.take(name, per, 0, 1.0)
            return wait
        async with Store(store) as opened:
            _use, wait = await opened.limit_take(name, per, 0, 1.0)
            return wait

    return asyncio.run(probe())


def test_a_cancelled_request_does_not_hold_the_limit_for_minutes(
        server: TimedServer) -> None:
    wait = _cancel_then_probe(server, "atk36-cancel", None)
    assert wait == 0.0, f"the next request must wait {wait:.0f} s more"


def test_a_cancelled_request_does_not_hold_the_limit_on_postgres(
        server: TimedServer, schema_pg_url: str) -> None:
    wait = _cancel_then_probe(server, "atk36-cancel-pg", schema_pg_url)
    assert wait == 0.0, f"the next request must wait {wait:.0f} s more"


def test_an_abandoned_step_function_cannot_overshoot_the_limit(server: TimedServer) -> None:
    delays = [8.0, 0.0]  # (the second try's own work must fit its timeout on a busy machine)

    @step(limit="atk36-late", timeout_seconds=3, retries=1, retry_delay_seconds=0)
    def call() -> str:
        time.sleep(delays.pop(0))
        httpx.post(server.url + "/chat/completions",
                   json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        return "sent"

    @workflow(limits={"atk36-late": Limit(requests=1, per="2s")})
    def late() -> None:
        call()

    result = late()
    assert result.succeeded, result.error
    _arrived(server, 2, within=15.0)  # the abandoned first try's request comes after all
    assert len(server.times) == 2
    assert most_in_any_window(server.times, 2.0) <= 1


def test_a_schema_reask_waits_only_for_its_window(server: TimedServer) -> None:
    server.respond(content="not a number")
    server.respond(content="7")

    @workflow(limits={"atk36-reask": Limit(requests=1, per="1s")})
    def typed() -> None:
        llm("ask", prompt="a number", model="m", provider_url=server.url,
            schema={"type": "integer"}, limit="atk36-reask", timeout_seconds=3)

    result = typed()
    assert result.succeeded, result.error
    assert result.steps["ask"].output == "7"
    assert len(server.times) == 2 and most_in_any_window(server.times, 1.0) == 1


# --- what held ---------------------------------------------------------------------------


def test_retries_after_errors_and_timeouts_stay_within_the_limit(server: TimedServer) -> None:
    server.respond(status=500)
    server.respond(content="slow", delay=0.8)
    server.respond(status=503)

    @workflow(limits={"atk36-retry": Limit(requests=2, per="1s")})
    def retried() -> None:
        with parallel():
            for i in range(3):
                llm(f"ask{i}", prompt=f"q{i}", model="m", provider_url=server.url,
                    limit="atk36-retry", retries=3, retry_delay_seconds=0,
                    timeout_seconds=0.4)

    result = retried()
    assert result.succeeded, result.error
    _arrived(server, 6, within=3.0)
    assert len(server.times) == 6
    assert most_in_any_window(server.times, 1.0) <= 2


def test_a_429_pause_holds_for_the_step_that_got_it_and_the_others(server: TimedServer) -> None:
    server.respond(status=429, headers={"Retry-After": "1"})
    server.respond(status=429, headers={"Retry-After": "1"})

    @workflow(limits={"atk36-429": Limit(requests=20, per="1s")})
    def throttled() -> None:
        with parallel():
            for i in range(2):
                llm(f"ask{i}", prompt=f"q{i}", model="m", provider_url=server.url,
                    limit="atk36-429", retries=2, retry_delay_seconds=0)

    result = throttled()
    assert result.succeeded, result.error
    # The two 429s arrived together; nothing more went out within a second of them.
    assert len(server.times) == 4
    assert min(server.times[2:]) - max(server.times[:2]) >= 1.0 - 0.05


def test_a_limit_name_of_a_hostile_form_is_a_definition_error() -> None:
    for bad in ("", "a b", "x" * 201, "ümlaut", "a/b", None, 5):
        with pytest.raises(WorkflowDefinitionError):
            limit(bad, requests=1)  # type: ignore[arg-type]
    for value in ({"requests": True}, {"requests": -1}, {"tokens": "5"},
                  {"requests": 1, "per": -1}, {"requests": 1, "per": float("nan")}):
        with pytest.raises(WorkflowDefinitionError):
            Limit(**value)
