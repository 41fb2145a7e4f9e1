"""``@step`` (SPEC §1): a plain function outside a workflow, a recorded step inside one."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from support import definition_error

import brain
from brain import parallel, shell, step, trigger, workflow


def headline_impl(text: str, limit: int = 80) -> str:
    """The first line of ``text``, cut to ``limit`` characters."""
    return text.splitlines()[0][:limit]


headline = step(headline_impl)


@step
async def shout(text: str) -> str:
    """Upper-case ``text``."""
    await asyncio.sleep(0)
    return text.upper()


@step
def combine(a: str, b: str) -> str:
    return f"{a}+{b}"


# --- a plain function outside a workflow -------------------------------------------------


def test_keeps_name_docstring_and_wrapped_function() -> None:
    assert headline.__name__ == "headline_impl"
    assert headline.__doc__ == headline_impl.__doc__
    assert headline.__wrapped__ is headline_impl
    assert shout.__name__ == "shout"
    assert shout.__doc__ == "Upper-case ``text``."


def test_keeps_the_signature() -> None:
    sig = inspect.signature(headline)
    assert list(sig.parameters) == ["text", "limit"]
    assert sig.parameters["limit"].default == 80
    assert sig == inspect.signature(headline_impl)


def test_sync_step_outside_a_workflow_is_the_plain_function() -> None:
    assert headline("first line\nsecond line") == "first line"
    assert headline("abcdef", limit=3) == "abc"


def test_sync_step_outside_a_workflow_raises_like_the_plain_function() -> None:
    with pytest.raises(IndexError):
        headline("")


def test_async_step_outside_a_workflow_returns_a_coroutine() -> None:
    coro = shout("hey")
    assert inspect.iscoroutine(coro)
    assert asyncio.run(coro) == "HEY"


def test_decorator_with_options_outside_a_workflow_is_the_plain_function() -> None:
    @step(name="custom", retries=2, timeout_seconds=5)
    def double(x: int) -> int:
        """Twice ``x``."""
        return 2 * x

    assert double(21) == 42
    assert double.__name__ == "double"
    assert double.__doc__ == "Twice ``x``."
    assert double.with_options(retries=5)(4) == 8


# --- a step inside a workflow ------------------------------------------------------------


def test_inside_a_workflow_a_call_records_a_step_and_returns_a_node() -> None:
    seen = {}

    @workflow
    def digest():
        text = shell("fetch", command="echo hello")
        seen["node"] = headline(text, limit=10)

    assert isinstance(seen["node"], brain.StepNode)
    assert str(seen["node"]) == "{headline_impl}"
    spec = digest.spec.steps[1]
    assert spec.name == "headline_impl"
    assert spec.kind == "step"
    assert spec.arguments == {"text": "{fetch}", "limit": 10}
    assert digest.graph.edges == (("fetch", "headline_impl"),)


def test_the_function_does_not_run_while_tracing() -> None:
    calls = []

    @step
    def record(x: str) -> str:
        calls.append(x)
        return x

    @workflow
    def traced():
        record("a")

    assert calls == []
    assert traced.graph.nodes == ("record",)


def test_arguments_keep_nodes_at_any_depth_as_placeholders() -> None:
    @step
    def summarise(data: dict, tags: list) -> str:
        return ""

    @workflow
    def deep():
        a = shell("a", command="true")
        b = shell("b", command="true")
        summarise({"items": [a, "literal {b}", 3], "nested": {"event": trigger.event}},
                  tags=(b.previous, True, None, 1.5))

    spec = deep.spec.steps[2]
    assert spec.arguments == {
        "data": {"items": ["{a}", "literal {b}", 3], "nested": {"event": "{trigger.event}"}},
        "tags": ["{previous.b}", True, None, 1.5],
    }
    assert set(deep.graph.edges) == {("a", "b"), ("b", "summarise"), ("a", "summarise")}


def test_trigger_fields_as_arguments() -> None:
    @workflow
    def from_trigger():
        combine(trigger.body, trigger.headers["X-GitHub-Event"])

    assert from_trigger.spec.steps[0].arguments == {
        "a": "{trigger.body}", "b": "{trigger.headers.x-github-event}"}


def test_async_steps_are_recorded_too() -> None:
    @workflow
    def async_inside():
        shout(trigger.body)

    spec = async_inside.spec.steps[0]
    assert spec.name == "shout"
    assert spec.arguments == {"text": "{trigger.body}"}


def test_repeated_calls_get_numbered_names() -> None:
    @workflow
    def repeated():
        first = headline("a")
        second = headline(first)
        headline(second)

    assert repeated.graph.nodes == ("headline_impl", "headline_impl-2", "headline_impl-3")
    assert set(repeated.graph.edges) == {("headline_impl", "headline_impl-2"),
                                         ("headline_impl-2", "headline_impl-3")}


def test_numbered_names_skip_names_already_taken() -> None:
    @workflow
    def skipping():
        combine("a", "b")
        shell("combine-2", command="true")
        combine("c", "d")
        combine("e", "f")

    assert skipping.graph.nodes == ("combine", "combine-2", "combine-3", "combine-4")


def test_repeated_calls_in_a_parallel_block() -> None:
    @workflow
    def fan():
        src = shell("src", command="echo x")
        with parallel():
            combine(src, "1")
            combine(src, "2")

    assert fan.graph.nodes == ("src", "combine", "combine-2")
    assert set(fan.graph.edges) == {("src", "combine"), ("src", "combine-2")}


def test_decorator_options_set_the_spec() -> None:
    @step(name="careful", retries=3, timeout_seconds=7.5, retry_delay_seconds=0.25)
    def slow(x: str) -> str:
        return x

    @workflow
    def with_options():
        slow("x")

    spec = with_options.spec.steps[0]
    assert (spec.name, spec.retries, spec.timeout_seconds, spec.retry_delay_seconds) == (
        "careful", 3, 7.5, 0.25)


def test_default_options() -> None:
    @workflow
    def defaults():
        combine("a", "b")

    spec = defaults.spec.steps[0]
    assert spec.retries == 0
    assert spec.retry_delay_seconds == 1


def test_with_options_sets_name_and_retries_for_one_call() -> None:
    @workflow
    def per_call():
        text = shell("fetch", command="echo hi")
        headline.with_options(name="title", retries=2)(text)
        headline(text)

    title, plain = per_call.spec.steps[1:]
    assert (title.name, title.retries) == ("title", 2)
    assert (plain.name, plain.retries) == ("headline_impl", 0)
    assert title.arguments == plain.arguments == {"text": "{fetch}"}


def test_with_options_after_adds_an_edge() -> None:
    @workflow
    def ordered():
        first = shell("first", command="true")
        shell("second", command="true")
        combine.with_options(after=[first], timeout_seconds=3)("a", "b")

    spec = ordered.spec.steps[2]
    assert spec.timeout_seconds == 3
    assert set(ordered.graph.edges) == {("first", "second"), ("second", "combine"),
                                        ("first", "combine")}


def test_with_options_keeps_the_function_metadata() -> None:
    titled = headline.with_options(name="title")
    assert titled.__name__ == "headline_impl"
    assert titled.__wrapped__ is headline_impl
    assert inspect.signature(titled) == inspect.signature(headline_impl)


# --- definition errors --------------------------------------------------------------------


@pytest.mark.parametrize("bad", [object(), {1, 2}, b"bytes", [1, object()], {"k": object()}],
                         ids=["object", "set", "bytes", "nested-in-list", "nested-in-dict"])
def test_arguments_that_are_not_json_serialisable(bad) -> None:
    @step
    def keep(value) -> str:
        return ""

    def body():
        keep(bad)

    message = definition_error(body)
    assert "'broken'" in message and "'keep'" in message
    assert "JSON" in message


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("a", "b", "c"), {}), (("a",), {}), (("a", "b"), {"c": 1}), (("x",), {"a": "y", "b": "z"})],
    ids=["too-many", "missing", "unknown-keyword", "twice"],
)
def test_bad_call_signature(args, kwargs) -> None:
    def body():
        combine(*args, **kwargs)

    message = definition_error(body)
    assert "'broken'" in message and "'combine'" in message


def test_reference_to_an_unknown_step_in_an_argument() -> None:
    def body():
        combine("{ghost}", "b")

    message = definition_error(body)
    assert "'combine'" in message and "{ghost}" in message


def test_reference_to_an_unknown_step_nested_in_an_argument() -> None:
    @step
    def take(data: dict) -> str:
        return ""

    def body():
        take({"list": ["ok", "{ghost}"]})

    assert "{ghost}" in definition_error(body)


def test_an_explicit_name_already_taken_is_a_duplicate() -> None:
    def body():
        shell("title", command="true")
        headline.with_options(name="title")("x")

    message = definition_error(body)
    assert "'title'" in message and "duplicate" in message.lower()


def test_a_bad_explicit_name() -> None:
    def body():
        headline.with_options(name="no spaces allowed")("x")

    assert "'no spaces allowed'" in definition_error(body)


# --- running ------------------------------------------------------------------------------


def test_steps_run_with_node_arguments_resolved_to_text() -> None:
    @workflow(name="step-run")
    def step_run():
        text = shell("fetch", command="printf 'hello world\\nsecond'")
        title = headline.with_options(name="title")(text)
        loud = shout(title)
        combine(loud, trigger.body)

    result = step_run(trigger={"body": "tail"})
    assert result.succeeded, result.error
    assert result.steps["title"].output == "hello world"
    assert result.steps["shout"].output == "HELLO WORLD"
    assert result.steps["combine"].output == "HELLO WORLD+tail"
