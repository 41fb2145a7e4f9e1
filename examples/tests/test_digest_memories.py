"""Tests for examples/digest_memories.py: `for_each` over recalled memories, `when` anything was found.

The memory server (MCP) and the model (LLM) are mocked, and so is the ``save``
step, which would append to a file in the examples folder: no process, no
network. The three ``@step`` functions run for real.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from digest_memories import DIGEST_FILE, MEMORY_SERVER, RECALL_LIMIT, digest_memories, split_memories

from brain.testing import MockCall, run_workflow

EXAMPLES = Path(__file__).resolve().parent.parent
MEMORIES = [
    "2024-03-02 db1: disk full, WAL files piled up",
    "2024-05-11 db2: replication lag after a long vacuum",
    "2024-09-30 db1: outage during the kernel upgrade",
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """None of the caller's LLM or Brain settings, and no digest file written."""
    for key in list(os.environ):
        if key.startswith(("BRAIN_", "THE_BRAIN_", "LLM_")):
            monkeypatch.delenv(key)
    digest = EXAMPLES / DIGEST_FILE
    before = digest.stat().st_mtime_ns if digest.exists() else None
    yield
    assert (digest.stat().st_mtime_ns if digest.exists() else None) == before


def one_line(call: MockCall) -> str:
    """The model's answer for one instance: which instance it was and what it read."""
    memory = call.inputs["prompt"].rsplit("\n\n", 1)[1]
    return f"#{call.index}: {memory.split(': ', 1)[1]}"


MOCKS: dict[str, Any] = {
    "recall": "\n".join(MEMORIES),               # one text block per memory, joined by newlines
    "summary": one_line,                         # one mock for every instance
    "save": lambda call: call.inputs["stdin"],   # tee would print what it appends
}


def test_one_summary_per_memory_and_a_digest_of_them_all() -> None:
    r = run_workflow(digest_memories, trigger={"body": "db outage"}, mocks=MOCKS)
    assert r.succeeded, r.error
    assert r.steps["recall"].inputs == {"server_command": MEMORY_SERVER.split(), "tool": "recall",
                                        "args": {"query": "db outage", "limit": RECALL_LIMIT}}
    assert json.loads(r.steps["split_memories"].output or "") == MEMORIES
    assert r.steps["anything_found"].output == "true"

    # The summary step ran once per memory, each instance with its own memory in the prompt.
    calls = sorted(r.calls["summary"], key=lambda c: c.index or 0)
    assert [(c.name, c.index, c.try_number) for c in calls] == [("summary", 0, 1), ("summary", 1, 1),
                                                               ("summary", 2, 1)]
    for call, memory in zip(calls, MEMORIES, strict=True):
        assert call.inputs["prompt"] == f"Summarise this memory about db outage:\n\n{memory}"
        assert call.inputs["temperature"] == 0.2
    summaries = [f"#{i}: {m.split(': ', 1)[1]}" for i, m in enumerate(MEMORIES)]
    assert [r.steps[f"summary[{i}]"].output for i in range(3)] == summaries
    # After the block, {summary} is the JSON list of the instances' answers, in memory order.
    assert r.steps["summary"].status == "succeeded"
    assert json.loads(r.steps["summary"].output or "") == summaries

    digest = r.steps["layout"].output or ""
    assert digest.startswith("## db outage (") and digest.splitlines()[0].endswith(", 3 memories)")
    assert digest.splitlines()[2:] == [f"- {s}" for s in summaries]
    assert r.steps["save"].inputs == {"argv": ["tee", "-a", DIGEST_FILE], "stdin": f"{digest}\n\n"}
    assert r.steps["nothing-found"].status == "skipped"


def test_nothing_recalled_skips_the_digest_and_the_run_succeeds() -> None:
    r = run_workflow(digest_memories, trigger={"body": "db outage"},
                     mocks={**MOCKS, "recall": "[]"})
    assert r.status == "succeeded", r.error
    assert r.steps["split_memories"].output == "[]"
    assert r.steps["anything_found"].output == "false"
    assert r.steps["summary"].status == "succeeded"     # a block over no items: no instances, []
    assert r.steps["summary"].output == "[]"
    assert not any(name.startswith("summary[") for name in r.steps)
    assert "summary" not in r.calls
    assert (r.steps["layout"].status, r.steps["save"].status) == ("skipped", "skipped")
    assert "save" not in r.calls
    assert r.steps["nothing-found"].output == "no memories about db outage"


@pytest.mark.parametrize("answer", [
    '{"result":[]}',                                     # a Python MCP tool returning [] (no text block)
    "",
    "\n  \n",
])
def test_empty_answers_are_no_memories(answer: str) -> None:
    assert split_memories(answer) == []


def test_a_json_array_is_one_memory_per_element() -> None:
    assert split_memories('["a", {"date": "2024-03-02", "what": "disk full"}]') == [
        "a", '{"date": "2024-03-02", "what": "disk full"}']
    assert split_memories('{"result":["a","b"]}') == ["a", "b"]
