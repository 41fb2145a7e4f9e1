"""What steps spent and how far they got, on the server (SPEC §17, §18): the console's run
page shows each step's tokens, the run's tokens in all and a running step's latest progress
(a bar when its total is known), every text escaped; ``/metrics`` counts the tokens of LLM
steps as ``brain_llm_tokens_total{workflow, model, kind}``."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from prometheus_client.parser import text_string_to_metric_families

from brain import llm, shell, step, workflow
from brain._clock import utcnow
from brain.results import LogBatch, StepResult, StepStatus, TriggerData
from brain.server import create_app
from brain.server.console.usage import number, progress, tokens, total_tokens
from brain.store import Store
from brain.testing import FakeChatServer, completion

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


def step_with(**fields: Any) -> StepResult:
    return StepResult(name="s", kind="mcp_tool", status=StepStatus.RUNNING, **fields)


def test_progress_reads_as_figures_and_a_bar_only_with_a_total() -> None:
    shown = progress(step_with(progress={"progress": 3, "total": 10, "message": "copying"}))
    assert shown is not None
    assert (shown.value, shown.max, shown.percent, shown.text) == ("3", "10", 30, "3/10: copying")
    no_total = progress(step_with(progress={"progress": 2.5, "total": None, "message": None}))
    assert no_total is not None and (no_total.max, no_total.text) == (None, "2.5")
    # Past its total, the bar is full; a total of 0 or a figure that is no number draws none.
    over = progress(step_with(progress={"progress": 12, "total": 10, "message": None}))
    assert over is not None and (over.value, over.percent, over.text) == ("10", 100, "12/10")
    for odd in ({"progress": 1, "total": 0}, {"progress": "x", "total": 4, "message": "m"},
                {"progress": float("nan"), "total": 4}, {"progress": True, "total": 4}):
        drawn = progress(step_with(progress=odd))
        assert drawn is not None and drawn.max is None, odd
    words = progress(step_with(progress={"progress": "x", "message": "only words"}))
    assert words is not None and words.text == "only words"
    assert progress(step_with()) is None
    assert [number(v) for v in (3.0, 2.5, 1 / 3, 9.999, 0.001)] == ["3", "2.5", "0.33", "10", "0"]


def test_tokens_of_steps_and_their_total() -> None:
    ask = step_with(usage={"prompt_tokens": 1200, "completion_tokens": 7})
    again = step_with(usage={"prompt_tokens": 30, "completion_tokens": 4})
    spent = tokens(ask)
    assert spent is not None and str(spent) == "1,200 prompt + 7 completion"
    assert spent.total_text == "1,207"
    assert str(total_tokens([ask, step_with(), again])) == "1,230 prompt + 11 completion"
    assert total_tokens([step_with()]) is None and tokens(step_with()) is None


async def _record(url: str) -> str:
    """A run as executors record it: an LLM step that spent tokens, an MCP step running
    with its latest progress, one that ended with its last progress."""
    async with Store(url) as store:
        run_id = uuid.uuid4().hex
        await store.create_run(run_id=run_id, workflow="report", definition_hash="h",
                               trigger=TriggerData(), step_rows=[
                                   ("ask", "llm"), ("copy", "mcp_tool"), ("count", "mcp_tool")])
        now = utcnow()
        await store.step_finished(run_id, "ask", status=StepStatus.SUCCEEDED, tries=2,
                                  ended_at=now, started_at=now - timedelta(seconds=2),
                                  inputs={"model": "m"}, output="yes",
                                  usage={"prompt_tokens": 1200, "completion_tokens": 34})
        await store.step_running(run_id, "copy", inputs={}, tries=1, started_at=now)
        await store.step_finished(run_id, "count", status=StepStatus.SUCCEEDED, tries=1,
                                  ended_at=now, started_at=now, inputs={}, output="5")
        await store.append_logs(run_id, [
            ("copy", LogBatch(progress={"progress": 3, "total": 10,
                                        "message": "copying <b>files</b>"})),
            ("count", LogBatch(progress={"progress": 5, "total": None, "message": "counted"}))])
    return run_id


@workflow(name="report")
def report() -> None:
    shell("ask", argv=["echo", "never run here"])


def _step_html(page: str, name: str) -> str:
    found = re.search(rf'<details class="step[^"]*" id="step-{name}".*?</details>', page, re.S)
    assert found is not None, name
    return found.group(0)


async def test_the_run_page_shows_tokens_totals_and_a_running_steps_progress(
        db_url: str) -> None:
    run_id = await _record(db_url)
    app = create_app([report], execute=False, triggers=False)
    async with AsyncTestClient(app, base_url="http://127.0.0.1", timeout=60) as client:
        r = await client.get(f"/runs/{run_id}")
    assert r.status_code == 200, r.text
    page = r.text
    head = page[page.index('id="run-head"'):page.index('class="actions"')]
    assert 'id="run-tokens"' in head and "tokens 1,200 prompt + 34 completion" in head

    ask = _step_html(page, "ask")
    assert "1,234 tokens" in ask.split("</summary>")[0]
    assert '<div class="field" data-field="usage"><h3>Tokens</h3>' \
           '<p class="figures">1,200 prompt + 34 completion</p>' in ask

    copy = _step_html(page, "copy").split("</summary>")[0]
    assert '<progress value="3" max="10">30%</progress>' in copy
    assert '<span class="progress-text">3/10: copying &lt;b&gt;files&lt;/b&gt;</span>' in copy
    assert "<b>files" not in page

    count = _step_html(page, "count")  # ended: its last progress among its fields, no bar
    assert "<progress" not in count
    assert '<h3>Last progress</h3><p class="figures">5: counted</p>' in count


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def _answer(content: str, prompt: int, completion_tokens: int) -> dict[str, Any]:
    return {**completion(content, model="fake-model"),
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                      "total_tokens": prompt + completion_tokens}}


def _tokens(got: dict[Any, float], workflow: str, model: str, kind: str) -> float:
    labels = (("kind", kind), ("model", model), ("workflow", workflow))
    return got.get(("brain_llm_tokens_total", labels), 0.0)


async def test_metrics_count_the_tokens_of_llm_steps_by_workflow_and_model(
        fake_llm: FakeChatServer) -> None:
    @step
    def counted() -> str:
        from brain.executors.capture import current_log

        log = current_log.get()
        assert log is not None
        log.count_usage(5, 1)  # tokens a step spent without naming a model
        return "ok"

    @workflow(name="asking")
    def asking() -> None:
        llm("first", prompt="one")
        llm("second", prompt="two", model="other-model")
        counted()

    @workflow(name="quiet")
    def quiet() -> None:
        shell("echo", argv=["echo", "no tokens"])

    app = create_app([asking, quiet], triggers=False)
    async with AsyncTestClient(app, base_url="http://127.0.0.1", timeout=60) as client:
        for prompt_tokens in (100, 200):
            fake_llm.respond(json=_answer("a", prompt_tokens, 10))
            fake_llm.respond(json=_answer("b", 7, 3))
            r = await client.post("/api/workflows/asking/runs", json={"wait": True})
            assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
        r = await client.post("/api/workflows/quiet/runs", json={"wait": True})
        assert r.status_code == 200, r.text
        # The step's end is counted as the run ends (bounded wait: a busy machine is slow).
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            got = _samples((await client.get("/metrics")).text)
            if _tokens(got, "asking", "unknown", "prompt") >= 10:
                break
            assert asyncio.get_running_loop().time() < deadline, got
            await asyncio.sleep(0.05)

    assert _tokens(got, "asking", "fake-model", "prompt") == 300
    assert _tokens(got, "asking", "fake-model", "completion") == 20
    assert _tokens(got, "asking", "other-model", "prompt") == 14
    assert _tokens(got, "asking", "other-model", "completion") == 6
    assert _tokens(got, "asking", "unknown", "prompt") == 10
    assert _tokens(got, "asking", "unknown", "completion") == 2
    assert not any(name == "brain_llm_tokens_total" and ("workflow", "quiet") in labels
                   for name, labels in got)
