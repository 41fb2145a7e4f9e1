"""Observing runs (``brain.runner.observe``): what an observer is told of a real run, in
order; an observer that raises breaks nothing; metrics count through the seam; and
``/api/events`` gets the changes of this process's runs without waiting for a look.

Real subprocesses, a real ``@step`` function, a real wait ended by a real signal, a
real SQLite file.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from brain import shell, step, wait_for, workflow
from brain.metrics import Metrics
from brain.results import RunResult, StepResult
from brain.runner.events import LogEvent, ProgressEvent, RunEvent, StepEvent, WaitEvent
from brain.runner.observe import RunObserver
from brain.server.events import ChangeWatcher
from brain.service import BrainService
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


class Recording(RunObserver):
    """Keeps every event as a tuple, in the order told."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []
        self.workflows: set[str] = set()
        self.logs: dict[str, list[str]] = {}
        self.waiting_ended = asyncio.Event()

    def run_started(self, run: RunEvent) -> None:
        self.seen.append(("run_started", run.how))
        self.workflows.add(run.workflow)

    def run_ended(self, run: RunEvent, result: RunResult, seconds: float) -> None:
        self.seen.append(("run_ended", run.how, str(result.status)))
        assert seconds >= 0

    def step_started(self, event: StepEvent) -> None:
        self.seen.append(("step_started", event.step, event.status, event.tries))
        self.workflows.add(event.workflow)

    def step_ended(self, event: StepEvent) -> None:
        self.seen.append(("step_ended", event.step, event.status, event.tries))
        self.workflows.add(event.workflow)

    def step_waiting(self, event: WaitEvent) -> None:
        self.seen.append(("step_waiting", event.step, event.kind, event.tries, event.signal))

    def step_log(self, event: LogEvent) -> None:
        self.seen.append(("step_log", event.step))
        self.logs.setdefault(event.step, []).extend(ln.text for ln in event.lines)

    def progress(self, event: ProgressEvent) -> None:
        self.seen.append(("progress", event.step))


@step
def greet(text: str) -> str:
    """A ``@step`` function that prints (its log) and returns."""
    print(f"greeting {text}")
    return f"hi {text}"


def _observed(tmp_path: Path) -> Any:
    marker = tmp_path / "tried"

    @workflow(name="observed")
    def observed() -> None:
        a = shell("a", command="echo one")
        greet(a)
        wait_for("go", signal="go-ahead")
        shell("flaky", command='if [ -e "$F" ]; then echo second; else touch "$F"; '
                               'echo "first try" >&2; exit 1; fi',
              env={"F": str(marker)}, retries=1, retry_delay_seconds=0.01)
        shell("boom", command="echo bad >&2; exit 3")

    return observed


EXPECTED = [
    ("run_started", "started"),
    ("step_started", "a", "running", 1), ("step_ended", "a", "succeeded", 1),
    ("step_started", "greet", "running", 1), ("step_ended", "greet", "succeeded", 1),
    ("step_waiting", "go", "signal", 1, "go-ahead"),
    ("run_ended", "started", "waiting"),
    # the wait ended while nobody executed the run: told before the run is taken again
    ("step_ended", "go", "succeeded", 1),
    ("run_started", "continued"),
    ("step_started", "flaky", "running", 1), ("step_ended", "flaky", "retrying", 1),
    ("step_ended", "flaky", "succeeded", 2),
    ("step_started", "boom", "running", 1), ("step_ended", "boom", "failed", 1),
    ("run_ended", "continued", "failed"),
]


def test_an_observer_is_told_of_a_real_run_in_order(tmp_path: Path, db_url: str) -> None:
    """A shell step, a ``@step``, a wait ended by a signal, a retried try and a failure:
    the exact sequence of events, each step's log lines between its start and its end."""
    observed = _observed(tmp_path)
    seen = Recording()

    async def go() -> RunResult:
        told = asyncio.Event()

        def on_wait(run: RunResult, steps: list[StepResult]) -> None:
            told.set()

        async with Store(db_url) as store:
            task = asyncio.create_task(observed.arun(store=store, observers=[seen],
                                                     on_wait=on_wait))
            await asyncio.wait_for(told.wait(), 60)  # the run waits, told in the foreground
            assert await store.send_signal("go-ahead", None, "yes", by="test") != []
            return await asyncio.wait_for(task, 60)

    result = asyncio.run(go())
    assert result.status == "failed" and "exit code 3" in (result.steps["boom"].error or "")
    assert [e for e in seen.seen if e[0] != "step_log"] == EXPECTED
    assert seen.workflows == {"observed"}
    assert seen.logs["a"] == ["one"]
    assert seen.logs["greet"] == ["greeting one"]
    assert "first try" in seen.logs["flaky"] and "second" in seen.logs["flaky"]
    assert "bad" in seen.logs["boom"]
    # Causality: a step's lines are told after its start and before its end.
    for name in ("a", "greet", "flaky", "boom"):
        start = seen.seen.index(("step_started", name, "running", 1))
        end = max(i for i, e in enumerate(seen.seen) if e[:2] == ("step_ended", name))
        logged = [i for i, e in enumerate(seen.seen) if e == ("step_log", name)]
        assert logged and all(start < i < end for i in logged), (name, seen.seen)


class Raising(RunObserver):
    """Fails at every call."""

    calls = 0

    def _fail(self, *args: object) -> None:
        Raising.calls += 1
        raise RuntimeError("observer broke")

    run_started = run_ended = step_started = step_ended = step_log = _fail  # type: ignore[assignment]


def test_an_observer_that_raises_breaks_nothing_and_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    @workflow(name="sturdy")
    def sturdy() -> None:
        shell("one", command="echo 1")
        shell("two", command="echo 2")

    seen = Recording()
    Raising.calls = 0
    with caplog.at_level(logging.WARNING, logger="brain.runner"):
        result = sturdy.run(observers=[Raising(), seen])
    assert result.succeeded, result.error
    assert Raising.calls >= 6  # told of everything, failing each time
    assert [e for e in seen.seen if e[0] != "step_log"] == [
        ("run_started", "started"),
        ("step_started", "one", "running", 1), ("step_ended", "one", "succeeded", 1),
        ("step_started", "two", "running", 1), ("step_ended", "two", "succeeded", 1),
        ("run_ended", "started", "succeeded")]
    complaints = [r for r in caplog.records if "observer" in r.getMessage()]
    assert len(complaints) == 1 and "observer broke" in complaints[0].getMessage()


def test_an_execution_that_raises_is_told_ended_as_stored(tmp_path: Path) -> None:
    """A run interrupted while its step runs (its caller's task cancelled, as Ctrl-C
    does): its observers are told the execution ended, with the run as the store has it
    (``cancelled``), before the cancellation reaches the caller."""

    @workflow(name="interrupted")
    def interrupted() -> None:
        shell("slow", command="sleep 30")

    seen = Recording()
    url = f"sqlite:///{tmp_path}/i.db"

    async def go() -> str:
        async with Store(url) as store:
            task = asyncio.create_task(interrupted.arun(store=store, observers=[seen]))
            while ("step_started", "slow", "running", 1) not in seen.seen:
                assert not task.done(), task
                await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            runs = await store.list_runs(workflow="interrupted")
            assert len(runs) == 1
            return str(runs[0].status)

    assert asyncio.run(go()) == "cancelled"
    assert [e[:3] for e in seen.seen if e[0] != "step_log"] == [
        ("run_started", "started"), ("step_started", "slow", "running"),
        ("step_ended", "slow", "cancelled"), ("run_ended", "started", "cancelled")]


def test_metrics_count_runs_and_steps_through_the_observer() -> None:
    @workflow(name="counted")
    def counted() -> None:
        shell("fine", command="true")
        shell("bad", command="exit 2")

    metrics = Metrics()
    for _ in range(2):
        assert counted.run(observers=[metrics]).status == "failed"
    sample = metrics.registry.get_sample_value
    assert sample("brain_runs_started_total", {"workflow": "counted"}) == 2
    assert sample("brain_runs_ended_total", {"workflow": "counted", "status": "failed"}) == 2
    assert sample("brain_runs_ended_total", {"workflow": "counted", "status": "succeeded"}) \
        is None
    assert sample("brain_step_duration_seconds_count",
                  {"kind": "shell", "status": "succeeded"}) == 2
    assert sample("brain_step_duration_seconds_count",
                  {"kind": "shell", "status": "failed"}) == 2


def test_api_events_get_a_local_runs_changes_without_a_look(db_url: str) -> None:
    """A service with its change watcher as an observer: with looks an hour apart, every
    change of a run this process executes reaches the listener, and no look read it."""

    @workflow(name="pushed")
    def pushed() -> None:
        shell("first", command="echo hello")
        shell("second", command="echo world")

    async def go() -> tuple[list[tuple[str, dict[str, Any]]], int]:
        service = BrainService({"pushed": pushed}, store=Store(db_url), triggers=False,
                               concurrency=1)
        watcher = ChangeWatcher(service.store, look_seconds=3600)
        service.observe(watcher)
        await service.start()
        got: list[tuple[str, dict[str, Any]]] = []
        try:
            async with watcher.listen(workflow="pushed") as listener:
                # The first look (at connecting) is done before the run: nothing tells it.
                while watcher.looks < 1:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
                run_id = await pushed.enqueue(body="x")
                while True:
                    item = await asyncio.wait_for(listener.queue.get(), 60)
                    assert item is not None
                    got.append(item)
                    if item[0] == "run" and item[1]["status"] == "succeeded":
                        break
                assert all(data["run_id"] == run_id for _, data in got)
                return got, watcher.looks
        finally:
            await watcher.close()
            await service.stop()

    got, looks = asyncio.run(go())
    assert looks == 1, "a look at the database delivered what the run told"
    steps = [(d["name"], d["status"]) for e, d in got if e == "step"]
    assert steps == [("first", "running"), ("first", "succeeded"),
                     ("second", "running"), ("second", "succeeded")]
    runs = [d["status"] for e, d in got if e == "run"]
    assert runs == ["running", "succeeded"]
    lines = {d["step"]: [ln["text"] for ln in d["lines"]] for e, d in got if e == "log"}
    assert lines == {"first": ["hello"], "second": ["world"]}
    # Each step's lines come after its start and before its end.
    order = [(e, d.get("name") or d.get("step"), d.get("status")) for e, d in got]
    for name in ("first", "second"):
        assert order.index(("step", name, "running")) < order.index(("log", name, None)) \
            < order.index(("step", name, "succeeded"))


def test_looks_beside_pushes_never_announce_an_older_state(db_url: str) -> None:
    """Looks every 20 ms beside the changes told at once: each step is announced
    ``running`` then ``succeeded`` once each (a look may add ``pending`` before, never
    anything after), and the run ends the stream of its own changes."""

    @workflow(name="raced")
    def raced() -> None:
        for i in range(4):
            shell(f"s{i}", command=f"sleep 0.{i}; echo {i}")

    async def go() -> list[tuple[str, dict[str, Any]]]:
        service = BrainService({"raced": raced}, store=Store(db_url), triggers=False,
                               concurrency=1)
        watcher = ChangeWatcher(service.store, look_seconds=0.02)
        service.observe(watcher)
        await service.start()
        got: list[tuple[str, dict[str, Any]]] = []
        try:
            async with watcher.listen(workflow="raced") as listener:
                await raced.enqueue(body="x")
                while not (got and got[-1][0] == "run" and got[-1][1]["status"] == "succeeded"):
                    item = await asyncio.wait_for(listener.queue.get(), 60)
                    assert item is not None
                    got.append(item)
                # Looks go on a while after the end: none announces anything more.
                looks = watcher.looks
                while watcher.looks < looks + 5:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
                assert listener.queue.empty(), listener.queue.get_nowait()
                return got
        finally:
            await watcher.close()
            await service.stop()

    got = asyncio.run(go())
    for i in range(4):
        statuses = [d["status"] for e, d in got if e == "step" and d["name"] == f"s{i}"]
        assert statuses in (["running", "succeeded"], ["pending", "running", "succeeded"]), \
            (i, statuses)
    runs = [d["status"] for e, d in got if e == "run"]
    assert runs[-2:] == ["running", "succeeded"] and runs.count("succeeded") == 1, runs
