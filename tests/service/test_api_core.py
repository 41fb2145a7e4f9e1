"""The application core (``brain.service.api.BrainApi``): every operation on runs, with its
rules, in-process on a real SQLite file — with a store alone (as the CLI uses it) and with a
serving ``BrainService`` (as the HTTP layer does) — and retry-once on PostgreSQL too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from brain import approval, shell, wait_for, workflow
from brain._errors import BrainError, RunConflict, RunNotFound, StepNotFound
from brain.results import RunStatus, TriggerData
from brain.service import BrainService
from brain.service.api import AlreadyRetried, BrainApi, InvalidInput, QueueFull, UnknownWorkflow
from brain.store import Store

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


def flows(tmp_path: Path) -> dict[str, Any]:
    """``fixable`` fails until ``fixed`` exists (its first step always succeeds);
    ``talk`` prints two lines; ``gate`` waits for an approval, ``ci`` for a signal."""
    fixed = tmp_path / "fixed"

    @workflow(name="fixable")
    def fixable() -> None:
        shell("first", command="echo one")
        shell("check", command=f"test -e {fixed} && echo fixed")

    @workflow(name="talk")
    def talk() -> None:
        shell("say", command="echo hello; echo oops >&2")

    @workflow(name="gate")
    def gate() -> None:
        approval("go", prompt="Go?")

    @workflow(name="ci")
    def ci() -> None:
        wait_for("built", signal="build-done")

    return {wf.name: wf for wf in (fixable, talk, gate, ci)}


@asynccontextmanager
async def serving(url: str, workflows: dict[str, Any]) -> AsyncIterator[BrainApi]:
    """A started service on ``url`` serving ``workflows`` (no schedules), and its core."""
    service = BrainService(workflows, store=Store(url), concurrency=2, triggers=False)
    await service.start()
    try:
        yield service.api
    finally:
        await service.stop(grace_seconds=5)


async def ended(api: BrainApi, run_id: str) -> Any:
    run = await api.wait_for(run_id, 60)
    assert run is not None, f"run {run_id} did not end within a minute"
    return run


# --- with a store alone (the CLI) ----------------------------------------------------------------


async def test_start_queues_a_run_and_refuses_unknown_names_and_a_full_queue(
        tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    wfs = flows(tmp_path)
    monkeypatch.setenv("BRAIN_MAX_QUEUED_RUNS", "1")
    async with Store(db_url) as store:
        api = BrainApi(store)
        assert api.workflows == {}
        with pytest.raises(UnknownWorkflow, match="no workflow 'talk'"):
            await api.start("talk")  # nothing is loaded without a service
        run_id, created = await api.start(wfs["talk"], TriggerData(event="manual", body="hi"))
        assert created
        run = await api.run(run_id[:8])
        assert (run.workflow, run.status, run.trigger.body) == ("talk", RunStatus.QUEUED, "hi")
        with pytest.raises(QueueFull):
            await api.start(wfs["talk"])
        assert [r.run_id for r in await api.runs()] == [run_id]


async def test_retry_queues_once_and_refuses_a_second_retry(tmp_path: Path, db_url: str) -> None:
    wfs = flows(tmp_path)
    async with Store(db_url) as store:
        failed = await wfs["fixable"].arun(store=store)
        assert failed.status == RunStatus.FAILED
        api = BrainApi(store)
        new_id, original = await api.retry(failed.run_id[:10])
        assert original == failed.run_id
        retry = await api.run(new_id)
        assert (retry.status, retry.retry_of) == (RunStatus.QUEUED, original)
        assert retry.steps["first"].status == "succeeded"  # kept, not run again
        before = await api.runs()
        with pytest.raises(AlreadyRetried) as refused:
            await api.retry(original)
        assert refused.value.retried_by == new_id
        assert f"already retried by run {new_id[:12]} (queued)" in str(refused.value)
        assert await api.runs() == before  # nothing queued
        ok = await wfs["talk"].arun(store=store)
        with pytest.raises(RunConflict, match="only a failed or cancelled run can be retried"):
            await api.retry(ok.run_id)
        with pytest.raises(RunNotFound):
            await api.retry("0" * 12)


async def test_cancel_ends_a_queued_run_at_once_and_says_when_it_had_ended(
        tmp_path: Path, db_url: str) -> None:
    wfs = flows(tmp_path)
    async with Store(db_url) as store:
        api = BrainApi(store)
        run_id, _ = await api.start(wfs["talk"])
        run, active = await api.cancel(run_id[:9])
        assert (run.run_id, run.status, active) == (run_id, RunStatus.CANCELLED, True)
        again, active = await api.cancel(run_id)
        assert (again.status, active) == (RunStatus.CANCELLED, False)


async def test_runs_filter_by_workflow_status_and_event_in_pages(tmp_path: Path,
                                                                  db_url: str) -> None:
    wfs = flows(tmp_path)
    async with Store(db_url) as store:
        api = BrainApi(store)
        done = await wfs["talk"].arun(store=store)
        failed = await wfs["fixable"].arun(store=store)
        hooked, _ = await api.start(wfs["talk"], TriggerData(event="webhook", body="{}"),
                                    trigger_key="webhook")
        assert [r.run_id for r in await api.runs()] == [hooked, failed.run_id, done.run_id]
        assert [r.run_id for r in await api.runs(workflow="talk")] == [hooked, done.run_id]
        assert [r.run_id for r in await api.runs(status="failed")] == [failed.run_id]
        assert [r.run_id for r in await api.runs(event="webhook")] == [hooked]
        assert [r.run_id for r in await api.runs(limit=1, offset=1)] == [failed.run_id]
        for bad in ({"limit": 0}, {"offset": -1}):
            with pytest.raises(InvalidInput):
                await api.runs(**bad)


async def test_step_log_reads_a_steps_lines_after_a_seq(tmp_path: Path, db_url: str) -> None:
    wfs = flows(tmp_path)
    async with Store(db_url) as store:
        api = BrainApi(store)
        done = await wfs["talk"].arun(store=store)
        run, status, lines = await api.step_log(done.run_id[:10], "say")
        assert (run.run_id, status) == (done.run_id, "succeeded")
        assert sorted((ln.stream, ln.text) for ln in lines) == [("stderr", "oops"),
                                                               ("stdout", "hello")]
        _, _, rest = await api.step_log(done.run_id, "say", after=lines[0].seq)
        assert rest == lines[1:]
        with pytest.raises(StepNotFound, match="has no step 'nope'"):
            await api.step_log(done.run_id, "nope")


async def test_decide_and_signal_end_waits_and_refuse_what_is_not_waiting(
        tmp_path: Path, db_url: str) -> None:
    """Without a service, a wait is ended in the database; a second decision is refused, a
    bad signal name changes nothing."""
    wfs = flows(tmp_path)
    async with Store(db_url) as store:
        api = BrainApi(store)
        gate_id, _ = await api.start(wfs["gate"])
        with pytest.raises(RunConflict):  # queued: its step is not waiting yet
            await api.decide(gate_id, "go", approved=True, by="test")
        with pytest.raises(InvalidInput, match="bad signal name 'a b'"):
            await api.signal("a b", None, "x")
        with pytest.raises(InvalidInput, match="larger than 1 MiB"):
            await api.signal("build-done", None, "x" * (1024 * 1024 + 1))
        assert await api.signal("build-done", None, "{}") == []  # nothing waits


async def test_workers_and_metrics_need_what_they_read(tmp_path: Path, db_url: str) -> None:
    async with Store(db_url) as store:
        api = BrainApi(store)
        assert await api.workers() == []
        with pytest.raises(BrainError, match="serving process"):
            await api.metrics_text()


# --- with a serving BrainService (the HTTP layer) ----------------------------------------------


async def test_with_a_service_runs_are_started_by_name_and_waited_for(tmp_path: Path,
                                                                      db_url: str) -> None:
    wfs = flows(tmp_path)
    async with serving(db_url, wfs) as api:
        assert set(api.workflows) == set(wfs)
        run_id, _ = await api.start("talk", TriggerData(event="manual"))
        run = await ended(api, run_id)
        assert run.status == RunStatus.SUCCEEDED
        [worker] = await api.workers()
        assert worker["kind"] == "serve"
        text = (await api.metrics_text()).decode()
        assert "brain_runs" in text
        with pytest.raises(UnknownWorkflow):
            await api.start("nope")
        # a run still going: wait_for gives up after the time given
        gate_id, _ = await api.start("gate")
        assert await api.wait_for(gate_id, 0.3) is None


async def test_with_a_service_decisions_and_signals_continue_runs(tmp_path: Path,
                                                                  db_url: str) -> None:
    wfs = flows(tmp_path)
    async with serving(db_url, wfs) as api:
        gate_id, _ = await api.start("gate")
        ci_id, _ = await api.start("ci")
        for run_id in (gate_id, ci_id):
            for _ in range(600):
                if (await api.run(run_id, with_steps=False)).status == RunStatus.WAITING:
                    break
                await asyncio.sleep(0.05)
        assert [w["run_id"] for w in await api.decisions_waiting()] == [gate_id]
        decision = await api.decide(gate_id[:10], "go", approved=True, comment="ok", by="test")
        assert (decision["run_id"], decision["step"], decision["approved"], decision["by"]) == (
            gate_id, "go", True, "test")
        with pytest.raises(RunConflict):
            await api.decide(gate_id, "go", approved=False, by="test")
        assert await api.signal("build-done", None, '{"ok": true}', by="test") == [
            (ci_id, "built")]
        assert (await ended(api, gate_id)).status == RunStatus.SUCCEEDED
        assert (await ended(api, ci_id)).status == RunStatus.SUCCEEDED


async def test_with_a_service_a_retry_runs_and_its_original_is_not_retried_again(
        tmp_path: Path, db_url: str) -> None:
    wfs = flows(tmp_path)
    async with serving(db_url, wfs) as api:
        first, _ = await api.start("fixable")
        assert (await ended(api, first)).status == RunStatus.FAILED
        (tmp_path / "fixed").touch()
        retry_id, original = await api.retry(first)
        assert original == first
        assert (await ended(api, retry_id)).status == RunStatus.SUCCEEDED
        with pytest.raises(AlreadyRetried, match=f"already retried by run {retry_id[:12]} "
                                                 f"\\(succeeded\\)"):
            await api.retry(first)
    # a workflow the service does not serve is not retried by it
    others = {"talk": wfs["talk"]}
    async with serving(db_url, others) as api:
        failed = (await api.runs(status="failed"))[0]
        with pytest.raises(RunConflict, match="'fixable' is not served here"):
            await api.retry(failed.run_id)


# --- PostgreSQL -------------------------------------------------------------------------------------


async def test_on_postgresql_concurrent_retries_through_the_core_queue_one(
        tmp_path: Path, fresh_pg_url: str) -> None:
    from support import upgraded_schema

    await upgraded_schema(fresh_pg_url)
    wfs = flows(tmp_path)
    async with Store(fresh_pg_url) as store, Store(fresh_pg_url) as other:
        failed = await wfs["fixable"].arun(store=store)
        assert failed.status == RunStatus.FAILED
        apis = (BrainApi(store), BrainApi(other)) * 3
        answers = await asyncio.gather(*(api.retry(failed.run_id) for api in apis),
                                       return_exceptions=True)
        queued = [a for a in answers if isinstance(a, tuple)]
        refused = [a for a in answers if isinstance(a, AlreadyRetried)]
        assert len(queued) == 1 and len(refused) == 5, answers
        assert [r.run_id for r in await BrainApi(store).runs(status="queued")] == [queued[0][0]]
