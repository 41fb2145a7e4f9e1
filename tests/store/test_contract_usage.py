"""The store contract for what an LLM step spent and what an MCP step reported (SPEC §17,
§18): a step's ``usage`` is written with its end, its latest ``progress`` with its log, and
both are read back, shown to the change watcher and cleared when a step is reset.

Every test runs on SQLite and PostgreSQL (see ``contract_support``).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from store import contract_support as contract
from store.contract_support import make_run

from brain._clock import utcnow
from brain.results import LogBatch, LogLine, StepStatus

store = contract.store
contract_database = contract.contract_database
OWNER = "me:1:a"


async def test_usage_is_written_with_the_end_and_read_back(store: Any) -> None:
    run_id = await make_run(store, owner=OWNER, steps=("ask", "plain"), kind="llm")
    await store.step_finished(run_id, "ask", status=StepStatus.SUCCEEDED, tries=2,
                              ended_at=utcnow(), output="{}", owner=OWNER,
                              usage={"prompt_tokens": 120, "completion_tokens": 7})
    await store.step_finished(run_id, "plain", status=StepStatus.SUCCEEDED, tries=1,
                              ended_at=utcnow(), output="x", owner=OWNER)
    run = await store.get_run(run_id)
    assert run.steps["ask"].usage == {"prompt_tokens": 120, "completion_tokens": 7}
    assert run.steps["plain"].usage is None


async def test_progress_is_written_with_a_log_batch(store: Any) -> None:
    run_id = await make_run(store, owner=OWNER, steps=("tool", "other"), kind="mcp_tool")
    await store.step_running(run_id, "tool", inputs={}, tries=1, started_at=utcnow(),
                             owner=OWNER)
    since = utcnow() - timedelta(seconds=5)
    first = {"progress": 1, "total": 4, "message": "copying"}
    await store.append_logs(run_id, [("tool", LogBatch(progress=first))], owner=OWNER)
    assert (await store.get_run(run_id)).steps["tool"].progress == first
    # A later report replaces it, lines and progress in the same write.
    later = {"progress": 3, "total": 4, "message": None}
    line = LogLine(1, "brain", 0.5, "progress 3/4")
    await store.append_logs(run_id, [("tool", LogBatch(lines=(line,), progress=later))],
                            owner=OWNER)
    run = await store.get_run(run_id)
    assert run.steps["tool"].progress == later
    assert run.steps["other"].progress is None
    assert [ln.text for ln in await store.read_log(run_id, "tool")] == ["progress 3/4"]
    found = {r.run_id: steps for r, steps in await store.recent_activity(since)}
    kind, status, tries, progress = found[run_id]["tool"]
    assert (kind, status, tries) == ("mcp_tool", "running", 1)
    assert progress is not None and json.loads(progress) == later
    assert found[run_id]["other"][3] is None


async def test_a_reset_step_forgets_its_usage_and_progress(store: Any) -> None:
    run_id = await make_run(store, owner=OWNER, steps=("tool",), kind="mcp_tool")
    await store.step_running(run_id, "tool", inputs={}, tries=1, started_at=utcnow(),
                             owner=OWNER)
    await store.append_logs(run_id, [("tool", LogBatch(progress={"progress": 1}))], owner=OWNER)
    await store.reset_steps(run_id, ["tool"], owner=OWNER)
    assert (await store.get_run(run_id)).steps["tool"].progress is None


async def test_a_step_cut_off_keeps_the_tokens_it_spent(store: Any) -> None:
    run_id = await make_run(store, owner=OWNER, steps=("ask",), kind="llm")
    await store.step_output(run_id, "ask", output=None, stderr=None, owner=OWNER,
                            usage={"prompt_tokens": 9, "completion_tokens": 0})
    await store.steps_ended(run_id, ["ask"], StepStatus.CANCELLED, "cancelled", owner=OWNER)
    run = await store.get_run(run_id)
    assert run.steps["ask"].usage == {"prompt_tokens": 9, "completion_tokens": 0}
    assert run.usage == {"prompt_tokens": 9, "completion_tokens": 0}
    assert run.to_json_dict()["usage"] == run.usage
