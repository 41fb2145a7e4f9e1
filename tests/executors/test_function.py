"""``@step`` function steps (SPEC §1 "@step", §2): threads, argument parsing, return values.

Upstream values come from real shell steps; runs are recorded in the test's own
SQLite file. Pydantic models and helpers live at module level so that the
annotations resolve (``typing.get_type_hints``).
"""

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from support import sql_rows

from brain import shell, step, trigger, workflow

# Spawns subprocesses in-process: finalise earlier tests' leftovers first (see the conftest).
pytestmark = pytest.mark.usefixtures("collect_garbage_first")


class Point(BaseModel):
    x: int
    y: int


class Tagged(BaseModel):
    name: str
    tags: list[str]


# --- where functions run ------------------------------------------------------------


def test_sync_function_runs_in_a_worker_thread_async_on_the_loop():
    caller = threading.get_ident()

    @step
    def sync_ident() -> str:
        return str(threading.get_ident())

    @step
    async def async_ident() -> str:
        asyncio.get_running_loop()  # raises if not on a loop
        await asyncio.sleep(0)
        return str(threading.get_ident())

    @workflow
    def fn_threads():
        sync_ident()
        async_ident()

    r = fn_threads()  # no loop runs here, so the run's loop is in this thread
    assert r.status == "succeeded", r.error
    loop_thread = int(r.steps["async_ident"].output)
    worker_thread = int(r.steps["sync_ident"].output)
    assert loop_thread == caller
    assert worker_thread != loop_thread
    assert r.steps["sync_ident"].kind == "step"


@pytest.mark.asyncio
async def test_arun_async_step_on_the_callers_loop_sync_step_elsewhere():
    loop_thread = threading.get_ident()

    @step
    def sync_ident() -> str:
        return str(threading.get_ident())

    @step
    async def async_ident() -> str:
        return str(threading.get_ident())

    @workflow
    def fn_threads_arun():
        sync_ident()
        async_ident()

    r = await fn_threads_arun.arun()
    assert r.status == "succeeded", r.error
    assert int(r.steps["async_ident"].output) == loop_thread
    assert int(r.steps["sync_ident"].output) != loop_thread


def test_outside_a_workflow_a_step_is_the_plain_function():
    @step
    def double(n: int) -> int:
        """Twice n."""
        return n * 2

    assert double(21) == 42
    assert double.__name__ == "double"
    assert double.__doc__ == "Twice n."
    assert double.__wrapped__(2) == 4


# --- arguments -----------------------------------------------------------------------


def test_node_arguments_arrive_as_str():
    @step
    def describe(value, text: str, anything: Any) -> str:
        return json.dumps([type(value).__name__, value, type(text).__name__, type(anything).__name__])

    @workflow
    def fn_str_args():
        n = shell("n", command="echo 42")
        describe(n, n, f"{n}")

    r = fn_str_args()
    assert r.status == "succeeded", r.error
    assert json.loads(r.steps["describe"].output) == ["str", "42", "str", "str"]
    assert r.steps["describe"].inputs == {"value": "42", "text": "42", "anything": "42"}


def test_annotated_parameters_are_parsed_as_json_and_validated():
    @step
    def total(n: int, items: list[int], point: Point, tagged: Tagged) -> str:
        assert isinstance(n, int)
        assert isinstance(point, Point) and isinstance(tagged, Tagged)
        return f"{n + sum(items)} {point.x * point.y} {tagged.name}:{','.join(tagged.tags)}"

    @workflow
    def fn_typed():
        n = shell("n", command="echo 41")
        items = shell("items", command="echo '[1, 2, 3]'")
        point = shell("point", command='echo \'{"x": 3, "y": 4}\'')
        tagged = shell("tagged", command='echo \'{"name": "t", "tags": ["a", "b"]}\'')
        total(n, items, point, tagged)

    r = fn_typed()
    assert r.status == "succeeded", r.error
    assert r.steps["total"].output == "47 12 t:a,b"
    # Stored inputs are the resolved texts.
    assert r.steps["total"].inputs["n"] == "41"
    assert r.steps["total"].inputs["point"] == '{"x": 3, "y": 4}'


@pytest.mark.parametrize(("annotation_case", "text", "needle"), [
    ("int", "not a number", "argument 'n' is not a valid int"),
    ("list", "[1, \"two\", 3]", "argument 'items' is not a valid list"),
    ("model", '{"x": 1}', "argument 'point' is not a valid Point"),
    ("model", "{broken json", "argument 'point' is not a valid Point"),
])
def test_invalid_text_for_an_annotated_parameter_fails_the_step(annotation_case: str, text: str,
                                                                needle: str):
    called: list[object] = []

    @step
    def as_int(n: int) -> int:
        called.append(n)
        return n

    @step
    def as_list(items: list[int]) -> int:
        called.append(items)
        return sum(items)

    @step
    def as_model(point: Point) -> str:
        called.append(point)
        return "ok"

    fn = {"int": as_int, "list": as_list, "model": as_model}[annotation_case]

    @workflow
    def fn_invalid():
        value = shell("value", argv=["printf", "%s", "{trigger.body}"])
        fn(value)
        shell("after", command="echo after")

    r = fn_invalid(trigger={"body": text})
    name = fn.__name__
    assert r.steps[name].status == "failed"
    error = r.steps[name].error or ""
    assert needle in error
    assert r.status == "failed"
    assert r.error == f"step {name!r} failed: {error}"
    assert r.steps["after"].status == "skipped"
    assert called == []  # the function never ran


def test_arguments_at_any_depth_are_resolved():
    @step
    def gather(items: list, mapping: dict, plain: int, label) -> dict:
        return {"items": items, "mapping": mapping, "plain": plain, "label": label}

    @workflow
    def fn_deep():
        a = shell("a", command="echo alpha")
        b = shell("b", command="echo beta")
        gather([a, f"x-{b}", 3, None, [b]], {"k": {"inner": a, "n": 1.5, "lit": "no {{a}} here"}},
               7, f"{trigger.body}/{a}")

    r = fn_deep(trigger={"body": "B"})
    assert r.status == "succeeded", r.error
    out = json.loads(r.steps["gather"].output)
    assert out == {
        "items": ["alpha", "x-beta", 3, None, ["beta"]],
        "mapping": {"k": {"inner": "alpha", "n": 1.5, "lit": "no {a} here"}},
        "plain": 7,
        "label": "B/alpha",
    }
    assert r.steps["gather"].inputs["items"] == ["alpha", "x-beta", 3, None, ["beta"]]
    assert r.steps["gather"].inputs["label"] == "B/alpha"


def test_plain_json_arguments_pass_through_with_their_types():
    @step
    def kinds(n: int, flag: bool, ratio: float, data: dict, nothing=None) -> str:
        return json.dumps([type(n).__name__, type(flag).__name__, type(ratio).__name__,
                           data, nothing])

    @workflow
    def fn_plain():
        kinds(3, True, 0.5, {"a": [1, {"b": "{not a placeholder: 1}"}]})

    r = fn_plain()
    assert r.status == "succeeded", r.error
    assert json.loads(r.steps["kinds"].output) == [
        "int", "bool", "float", {"a": [1, {"b": "{not a placeholder: 1}"}]}, None]


# --- return values -----------------------------------------------------------------------


def test_return_values_become_text():
    @step
    def give_str() -> str:
        return "  spaced text\n\n"

    @step
    def give_none() -> None:
        return None

    @step
    def give_dict() -> dict:
        return {"a": 1, "b": [True, None, "é"]}

    @step
    def give_list() -> list:
        return [1, "two", 3.5]

    @step
    def give_int() -> int:
        return 42

    @step
    def give_model() -> Point:
        return Point(x=1, y=2)

    @workflow
    def fn_returns():
        give_str()
        give_none()
        give_dict()
        give_list()
        give_int()
        give_model()

    r = fn_returns()
    assert r.status == "succeeded", r.error
    out = {name: s.output for name, s in r.steps.items()}
    assert out["give_str"] == "  spaced text\n\n"  # a str is stored exactly as is
    assert out["give_none"] == ""
    assert json.loads(out["give_dict"]) == {"a": 1, "b": [True, None, "é"]}
    assert json.loads(out["give_list"]) == [1, "two", 3.5]
    assert out["give_int"] == "42"
    assert json.loads(out["give_model"]) == {"x": 1, "y": 2}


def test_a_returned_value_feeds_a_typed_downstream_step():
    @step
    def produce() -> dict:
        return {"values": [1, 2, 3]}

    @step
    def consume(data: dict[str, list[int]]) -> int:
        return sum(data["values"])

    @workflow
    def fn_chain():
        consume(produce())

    r = fn_chain()
    assert r.status == "succeeded", r.error
    assert r.steps["consume"].output == "6"


def test_unserialisable_return_value_fails_the_step():
    @step
    def give_object():
        return object()

    @workflow
    def fn_bad_return():
        give_object()

    r = fn_bad_return()
    assert r.status == "failed"
    assert r.steps["give_object"].status == "failed"
    assert r.steps["give_object"].error


# --- exceptions and retries ------------------------------------------------------------------


def test_exception_fails_the_step_with_type_and_message(tmp_path: Path):
    @step
    def explode(text: str) -> str:
        raise ValueError(f"cannot handle {text}")

    @workflow
    def fn_raise():
        explode(trigger.body)
        shell("after", command="echo after")

    r = fn_raise(trigger={"body": "xyz"})
    assert r.steps["explode"].status == "failed"
    assert r.steps["explode"].error == "ValueError: cannot handle xyz"
    assert r.steps["explode"].tries == 1
    assert r.status == "failed"
    assert r.error == "step 'explode' failed: ValueError: cannot handle xyz"
    assert r.steps["after"].status == "skipped"
    row = sql_rows(tmp_path, "SELECT status, error, tries, inputs FROM brain_steps WHERE run_id = ? "
                   "AND name = 'explode'", r.run_id)[0]
    assert row[:3] == ("failed", "ValueError: cannot handle xyz", 1)
    assert json.loads(row[3]) == {"text": "xyz"}


def test_exception_is_retried_until_success():
    calls: list[float] = []

    @step(retries=2, retry_delay_seconds=0.05)
    def flaky() -> str:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise ConnectionError(f"attempt {len(calls)} failed")
        return f"ok after {len(calls)}"

    @workflow
    def fn_retry():
        flaky()

    r = fn_retry()
    assert r.status == "succeeded", r.error
    assert r.steps["flaky"].tries == 3
    assert r.steps["flaky"].output == "ok after 3"
    assert r.steps["flaky"].error is None
    assert len(calls) == 3
    # The delay doubles: at least 0.05 s, then at least 0.1 s.
    assert calls[1] - calls[0] >= 0.045
    assert calls[2] - calls[1] >= 0.095


def test_exception_retries_exhausted():
    calls: list[int] = []

    @step
    async def always_fails() -> str:
        calls.append(1)
        raise RuntimeError("nope")

    @workflow
    def fn_retry_fail():
        always_fails.with_options(name="named", retries=2, retry_delay_seconds=0.01)()

    r = fn_retry_fail()
    assert r.steps["named"].status == "failed"
    assert r.steps["named"].tries == 3
    assert r.steps["named"].error == "RuntimeError: nope"
    assert len(calls) == 3
    assert r.error == "step 'named' failed: RuntimeError: nope"


# --- timeouts -------------------------------------------------------------------------------


def test_sync_function_timeout_fails_the_step_promptly_while_the_thread_runs_on():
    """Python cannot stop a thread: the step fails at once, the function keeps running.

    "Promptly" is shown without timing: the run has returned while the function
    is still blocked (it only returns once the test releases it).
    """
    release = threading.Event()
    finished = threading.Event()

    @step(timeout_seconds=0.5)
    def stuck() -> str:
        release.wait(8)
        finished.set()
        return "late"

    @workflow
    def fn_sync_timeout():
        stuck()
        shell("after", command="echo after")

    try:
        r = fn_sync_timeout()
        still_running = not finished.is_set()
        assert r.steps["stuck"].status == "failed"
        assert r.steps["stuck"].error == "timed out after 0.5 s"
        assert r.steps["after"].status == "skipped"
        assert r.status == "failed"
        assert still_running, "the run waited for the timed-out function to return"
    finally:
        release.set()
    assert finished.wait(10)  # the documented leftover thread ends once released


@pytest.mark.asyncio
async def test_sync_function_timeout_under_arun_does_not_block_the_loop():
    release = threading.Event()
    finished = threading.Event()

    @step(timeout_seconds=0.5)
    def stuck_arun() -> str:
        release.wait(8)
        finished.set()
        return "late"

    @workflow
    def fn_sync_timeout_arun():
        stuck_arun()

    try:
        r = await fn_sync_timeout_arun.arun()
        assert r.steps["stuck_arun"].status == "failed"
        assert "timed out" in (r.steps["stuck_arun"].error or "")
        assert not finished.is_set()
    finally:
        release.set()
    assert await asyncio.to_thread(finished.wait, 10)


def test_async_function_timeout_cancels_it():
    cancelled = threading.Event()

    @step(timeout_seconds=0.5)
    async def sleeper() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    @workflow
    def fn_async_timeout():
        sleeper()

    r = fn_async_timeout()
    assert r.steps["sleeper"].status == "failed"
    assert r.steps["sleeper"].error == "timed out after 0.5 s"
    assert cancelled.is_set()


def test_function_raising_timeout_error_is_not_mistaken_for_the_step_timeout():
    @step(timeout_seconds=30)
    def raises_timeout() -> str:
        raise TimeoutError("upstream API timed out")

    @workflow
    def fn_own_timeout():
        raises_timeout()

    r = fn_own_timeout()
    assert r.steps["raises_timeout"].status == "failed"
    assert "timed out after 30 s" not in (r.steps["raises_timeout"].error or "")
    assert "TimeoutError" in (r.steps["raises_timeout"].error or "")
