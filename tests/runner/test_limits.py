"""Rate limits (SPEC §26): a step with ``limit=NAME`` waits for room before its request,
saying so in its log, so that no window of ``per`` seconds sees more requests or tokens
reach the provider than the limit allows; a provider's 429 with ``Retry-After`` pauses the
limit for every step that shares it.

Requests are counted where they arrive: a real OpenAI-compatible server on 127.0.0.1
(``brain.testing.FakeChatServer``) noting when each came. Windows are short (2 s) to keep
the tests quick: the promise is the same for any length. Across processes on PostgreSQL:
``tests/server/test_limits_postgres.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from brain import Limit, WorkflowDefinitionError, limit, llm, parallel, shell, step, workflow
from brain.testing import FakeChatServer, completion


class TimedServer(FakeChatServer):
    """A FakeChatServer noting when each request arrived (monotonic clock) and, with
    ``usage``, reporting that many prompt and completion tokens in each answer."""

    def __init__(self, usage: tuple[int, int] | None = None) -> None:
        super().__init__(reply="ok")
        self.times: list[float] = []
        self.usage = usage

    def _next(self) -> Any:
        self.times.append(time.monotonic())
        answer = super()._next()
        if self.usage is not None and answer.status == 200 and answer.json is None:
            answer.json = {**completion("ok"), "usage": {"prompt_tokens": self.usage[0],
                                                         "completion_tokens": self.usage[1]}}
        return answer


@pytest.fixture
def server() -> Iterator[TimedServer]:
    with TimedServer() as s:
        yield s


def most_in_any_window(times: list[float], per: float, weights: list[int] | None = None) -> int:
    """The most requests (or the most weight) that arrived within any ``per`` seconds."""
    weights = weights or [1] * len(times)
    order = sorted(range(len(times)), key=lambda i: times[i])
    best = 0
    for a in order:
        best = max(best, sum(weights[b] for b in order if times[a] <= times[b] < times[a] + per))
    return best


def test_no_window_sees_more_requests_than_the_limit(server: TimedServer) -> None:
    @workflow(limits={"model": Limit(requests=5, per="2s")})
    def burst() -> None:
        with parallel():
            for i in range(12):
                llm(f"ask{i}", prompt=f"question {i}", model="m", provider_url=server.url,
                    limit="model")

    result = burst()
    assert result.succeeded, result.error
    assert len(server.times) == 12
    assert most_in_any_window(server.times, 2.0) == 5
    # The whole burst took at least two more windows than one: 5 + 5 + 2.
    assert max(server.times) - min(server.times) >= 4.0 - 0.05
    logs = [line.text for name in result.steps for line in _log(result.run_id, name)]
    assert sum("waiting for limit model" in text for text in logs) >= 7


def _log(run_id: str, step: str) -> list[Any]:
    import asyncio

    from brain.store import Store

    async def read() -> list[Any]:
        async with Store() as store:
            return list((await store.run_logs(run_id)).get(step, []))

    return asyncio.run(read())


def test_tokens_per_window_stay_within_the_limit() -> None:
    # Each request reserves max_tokens (40) + its prompt's estimate (40 characters: 10),
    # and its answer reports as much: 50 tokens; 160 a window lets three through.
    with TimedServer(usage=(10, 40)) as server:
        @workflow(limits={"tokens": Limit(tokens=160, per="2s")})
        def wordy() -> None:
            with parallel():
                for i in range(7):
                    llm(f"ask{i}", prompt=f"{i:02d}" + "x" * 38, model="m", max_tokens=40,
                        provider_url=server.url, limit="tokens")

        result = wordy()
        assert result.succeeded, result.error
        assert most_in_any_window(server.times, 2.0, [50] * 7) <= 160
        assert len(server.times) == 7


def test_a_shared_module_level_limit_counts_every_workflow(server: TimedServer) -> None:
    limit("shared-test", requests=2, per="2s")

    @step(limit="shared-test")
    def ping(n: int) -> str:
        return str(n)

    @workflow
    def one() -> None:
        with parallel():
            for i in range(2):
                llm(f"a{i}", prompt="a", model="m", provider_url=server.url, limit="shared-test")

    @workflow
    def two() -> None:
        llm("b", prompt="b", model="m", provider_url=server.url, limit="shared-test")
        ping(1)

    assert one().succeeded
    assert two().succeeded
    # one's two requests filled the window: two's waited for its end.
    assert server.times[2] - server.times[0] >= 2.0 - 0.05


def test_a_429_with_retry_after_pauses_the_limit_for_every_step(server: TimedServer) -> None:
    server.respond(status=429, headers={"Retry-After": "1"})

    @workflow(limits={"model": Limit(requests=50, per="1s")})
    def throttled() -> None:
        with parallel():
            llm("first", prompt="first", model="m", provider_url=server.url, limit="model",
                retries=1, retry_delay_seconds=0)
            later = shell("later", command="sleep 0.3")
            llm("second", prompt=f"second {later}", model="m", provider_url=server.url,
                limit="model")

    result = throttled()
    assert result.succeeded, result.error
    assert result.steps["first"].tries == 2
    # The 429 came first; nothing went out again until its Retry-After had passed.
    assert len(server.times) == 3
    assert min(server.times[1:]) - server.times[0] >= 1.0 - 0.05
    logs = [line.text for line in _log(result.run_id, "first")]
    assert any("limit model paused for 1.0 s" in text for text in logs)


def test_an_undeclared_limit_is_a_definition_error() -> None:
    with pytest.raises(WorkflowDefinitionError, match="limit 'nowhere' is not declared"):
        @workflow
        def lost() -> None:
            shell("a", command="true", limit="nowhere")


@pytest.mark.parametrize(("given", "says"), [
    ({"requests": 0}, "requests must be a whole number >= 1"),
    ({"tokens": 1.5}, "tokens must be a whole number >= 1"),
    ({}, "give requests=, tokens= or both"),
    ({"requests": 1, "per": "soon"}, "bad duration"),
    ({"requests": 1, "per": 0}, "per must be longer than zero"),
])
def test_a_bad_limit_says_what_is_wrong(given: dict[str, Any], says: str) -> None:
    with pytest.raises(WorkflowDefinitionError, match=says):
        Limit(**given)


def test_a_bad_limit_name_or_value_is_a_definition_error() -> None:
    with pytest.raises(WorkflowDefinitionError, match="a limit's name is"):
        limit("no spaces", requests=1)
    with pytest.raises(WorkflowDefinitionError, match="must be a Limit"):
        @workflow(limits={"x": 5})  # type: ignore[dict-item]
        def wrong() -> None:
            shell("a", command="true", limit="x")
    with pytest.raises(WorkflowDefinitionError, match="limit= takes the name of a limit"):
        @workflow
        def inline() -> None:
            shell("a", command="true", limit=Limit(requests=1))  # type: ignore[arg-type]


def test_a_mocked_step_waits_for_no_limit() -> None:
    from brain.testing import run_workflow

    @workflow(limits={"model": Limit(requests=1, per="1h")})
    def mocked() -> None:
        with parallel():
            for i in range(3):
                llm(f"ask{i}", prompt="hi", model="m", limit="model")

    result = run_workflow(mocked, mocks={"llm": "fine"})
    assert result.succeeded and [s.output for s in result.steps.values()] == ["fine"] * 3
