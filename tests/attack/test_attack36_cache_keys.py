"""Attack 36 (SPEC §26): a cached step returns a stored output only when the same step would
do the same thing. Stale hits (a wrong answer) are looked for where the key is made: the
step's fingerprint without some options, its inputs as *shown* (secrets as ``***``) and
the sorted digests of its secrets.

Each step counts where it really runs (a file of marks, or a real OpenAI-compatible server
on 127.0.0.1); every run uses this test's own SQLite file.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import write_source

from brain import Cache, llm, secret, shell, step, workflow
from brain.loader import load_file
from brain.testing import FakeChatServer

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    with FakeChatServer(reply="the answer") as s:
        yield s


# --- breaks ------------------------------------------------------------------------------


def test_swapped_secrets_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    @workflow
    def lengths() -> None:
        shell("sizes", command='echo "${#A} ${#B}"',
              env={"A": secret("ATK36_A"), "B": secret("ATK36_B")}, cache="1h")

    monkeypatch.setenv("ATK36_A", "a" * 10)
    monkeypatch.setenv("ATK36_B", "b" * 12)
    first = lengths()
    assert first.succeeded and first.steps["sizes"].output == "10 12"
    monkeypatch.setenv("ATK36_A", "b" * 12)
    monkeypatch.setenv("ATK36_B", "a" * 10)
    second = lengths()
    assert second.succeeded
    # Running it would print "12 10"; a hit answers "10 12".
    assert second.steps["sizes"].output == "12 10"


def test_swapped_secret_arguments_of_a_step_function_miss(
        monkeypatch: pytest.MonkeyPatch) -> None:
    @step(cache="1h")
    def difference(first: str, second: str) -> int:
        return len(first) - len(second)

    @workflow
    def differ() -> None:
        difference(secret("ATK36_P"), secret("ATK36_Q"))

    monkeypatch.setenv("ATK36_P", "p" * 20)
    monkeypatch.setenv("ATK36_Q", "q" * 10)
    assert differ().steps["difference"].output == "10"
    monkeypatch.setenv("ATK36_P", "q" * 10)
    monkeypatch.setenv("ATK36_Q", "p" * 20)
    assert differ().steps["difference"].output == "-10"


SAME_FLOW = '''
from brain import shell, workflow


@workflow
def where():
    shell("here", command="pwd", cache="1h")
'''


def test_the_same_shell_step_in_another_folder_misses(tmp_path: Path) -> None:
    outputs = []
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        write_source(folder, "flow.py", SAME_FLOW)
        result = load_file(folder / "flow.py")["where"].run()
        assert result.succeeded, result.error
        outputs.append(result.steps["here"].output)
    assert outputs[0] == str((tmp_path / "one").resolve())
    assert outputs[1] == str((tmp_path / "two").resolve())


def test_a_smaller_max_output_bytes_is_not_answered_with_a_larger_output() -> None:
    def make(size: int | None) -> object:
        @workflow(name="sized")
        def sized() -> None:
            shell("print", command="printf '%s' 0123456789abcdefghij", cache="1h",
                  max_output_bytes=size)
        return sized

    roomy = make(None)()
    assert roomy.succeeded and roomy.steps["print"].output == "0123456789abcdefghij"
    tight = make(8)()
    # Running it would fail ("output is larger than max_output_bytes").
    assert not tight.succeeded


# --- what held ---------------------------------------------------------------------------


def test_changed_shell_inputs_miss(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    (tmp_path / "sub").mkdir()

    def run(**options: object) -> str:
        @workflow(name="varied")
        def varied() -> None:
            shell("say", argv=["sh", "-c", f'echo x >> "{marks}"; echo "$V"; cat; pwd',
                               *options.pop("extra", [])], cache="1h", **options)  # type: ignore[arg-type]
        result = varied()
        assert result.succeeded, result.error
        return result.steps["say"].output or ""

    base = {"env": {"V": "one"}, "stdin": "in"}
    outputs = [run(**dict(base))]
    outputs.append(run(**dict(base)))  # a hit
    outputs.append(run(env={"V": "two"}, stdin="in"))
    outputs.append(run(env={"V": "one"}, stdin="other"))
    outputs.append(run(env={"V": "one"}, stdin="in", cwd=str(tmp_path / "sub")))
    outputs.append(run(env={"V": "one"}, stdin="in", extra=["arg"]))
    assert marks.read_text().count("x") == 5
    assert outputs[0] == outputs[1] and len(set(outputs[1:])) == 4


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12),
                       min_size=2, max_size=4, unique=True))
def test_every_distinct_parameter_misses(server: FakeChatServer, values: list[str]) -> None:
    server.requests.clear()
    store = f"sqlite:///{tempfile.mkdtemp()}/brain.db"  # each example its own cache

    @workflow(name="echoed")
    def echoed(text: str) -> None:
        llm("ask", prompt=f"Echo {text}", model="m", provider_url=server.url, cache="1h")

    for value in values:
        echoed.run(params={"text": value}, store=store)
    assert len(server.requests) == len(values)
    for value in values:  # all hits now
        echoed.run(params={"text": value}, store=store)
    assert len(server.requests) == len(values)
    sent = [r.json["messages"][-1]["content"] for r in server.requests]
    assert sent == [f"Echo {v}" for v in values]


def test_changed_model_system_temperature_or_max_tokens_miss(server: FakeChatServer) -> None:
    def run(**options: object) -> None:
        @workflow(name="asked")
        def asked() -> None:
            llm("ask", prompt="hello", provider_url=server.url, cache="1h",
                **{"model": "m", **options})  # type: ignore[arg-type]
        assert asked().succeeded

    run()
    run()
    assert len(server.requests) == 1
    for options in ({"model": "n"}, {"system": "be brief"}, {"temperature": 0.0},
                    {"max_tokens": 5}):
        run(**options)
    assert len(server.requests) == 5


def test_a_model_from_the_environment_misses_when_it_changes(
        server: FakeChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    @workflow
    def from_env() -> None:
        llm("ask", prompt="hello", cache="1h")

    monkeypatch.setenv("LLM_BASE_URL", server.url)
    monkeypatch.setenv("LLM_MODEL", "first")
    assert from_env().succeeded
    monkeypatch.setenv("LLM_MODEL", "second")
    assert from_env().succeeded
    assert [r.json["model"] for r in server.requests] == ["first", "second"]


def test_previous_and_trigger_values_miss(tmp_path: Path) -> None:
    @workflow
    def counter() -> None:
        shell("count", command="echo $(( ${LAST:-0} + 1 ))", env={"LAST": "{previous.count}"},
              cache="1h")
        shell("body", command="echo {trigger.body}", cache="1h")

    outputs = [counter(trigger={"body": f"b{i}"}) for i in range(3)]
    assert [r.steps["count"].output for r in outputs] == ["1", "2", "3"]
    assert [r.steps["body"].output for r in outputs] == ["b0", "b1", "b2"]


def test_an_upstream_output_that_changes_misses(tmp_path: Path) -> None:
    source = tmp_path / "source"

    @workflow
    def chained() -> None:
        text = shell("read", command=f"cat {source}")
        shell("upper", command=f"echo {text} | tr a-z A-Z", cache="1h")

    source.write_text("first")
    assert chained().steps["upper"].output == "FIRST"
    source.write_text("second")
    assert chained().steps["upper"].output == "SECOND"


def test_two_workflows_with_different_requests_never_share(server: FakeChatServer) -> None:
    server.respond(content="one")
    server.respond(content="two")

    @workflow
    def first() -> None:
        llm("ask", prompt="question one", model="m", provider_url=server.url, cache="1h")

    @workflow
    def second() -> None:
        llm("ask", prompt="question two", model="m", provider_url=server.url, cache="1h")

    assert first().steps["ask"].output == "one"
    assert second().steps["ask"].output == "two"
    assert first().steps["ask"].output == "one"
    assert second().steps["ask"].output == "two"


def test_a_key_of_its_own_with_a_changed_key_value_misses(server: FakeChatServer) -> None:
    @workflow
    def keyed(doc: str, version: str) -> None:
        llm("ask", prompt=f"Review {doc}", model="m", provider_url=server.url,
            cache=Cache(expire="1h", key=[version, "{trigger.body}"]))

    keyed.run(params={"doc": "d", "version": "v1"}, trigger={"body": "x"})
    keyed.run(params={"doc": "d", "version": "v1"}, trigger={"body": "y"})
    keyed.run(params={"doc": "d", "version": "v2"}, trigger={"body": "y"})
    assert len(server.requests) == 3


def test_a_timed_out_or_schema_invalid_step_is_never_cached(server: FakeChatServer) -> None:
    server.respond(content="slow", delay=1.0)

    @workflow
    def slow() -> None:
        llm("ask", prompt="hello", model="m", provider_url=server.url, cache="1h",
            timeout_seconds=0.2)

    assert not slow().succeeded
    server.respond(content="fast")
    assert slow().steps["ask"].output == "fast"

    server.respond(content="not json")
    server.respond(content="still not json")

    @workflow
    def typed() -> None:
        llm("ask", prompt="a number", model="m", provider_url=server.url, cache="1h",
            schema={"type": "integer"})

    assert not typed().succeeded
    server.respond(content="7")
    assert typed().steps["ask"].output == "7"
