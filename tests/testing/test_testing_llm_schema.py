"""``brain.testing`` mocks of ``llm()`` steps with ``schema=`` (SPEC §10, §18): a mock is held
to the schema as a real answer is, and its output is what the real step would give, the
validated value's compact JSON. Mocked steps open no connection: no server runs here.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from brain import llm, step, workflow
from brain.testing import MockCall, run_workflow


class Verdict(BaseModel):
    urgent: bool
    reason: str = "none"


PERSON = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@step
def headline(verdict: Verdict) -> str:
    return ("URGENT: " if verdict.urgent else "") + verdict.reason


@workflow
def triage() -> None:
    verdict = llm("judge", prompt="Is it urgent?", model="m", schema=Verdict, retries=2)
    headline(verdict)


@workflow
def who() -> None:
    llm("name", prompt="Who?", model="m", schema=PERSON)
    llm("free", prompt="Anything", model="m")


@pytest.mark.parametrize("mock", [
    '{ "urgent": true,\n "reason": "db down" }',
    {"urgent": True, "reason": "db down"},
    Verdict(urgent=True, reason="db down"),
    lambda call: {"urgent": True, "reason": "db down"},
], ids=["json-text", "dict", "model", "callable"])
def test_a_matching_mock_gives_the_compact_json_a_real_answer_would(mock: Any) -> None:
    r = run_workflow(triage, mocks={"judge": mock})
    assert r.succeeded, r.error
    assert r.steps["judge"].output == '{"urgent":true,"reason":"db down"}'
    # ... which a parameter annotated with the model receives parsed.
    assert r.steps["headline"].output == "URGENT: db down"


def test_the_validated_value_fills_in_defaults() -> None:
    r = run_workflow(triage, mocks={"judge": {"urgent": False}})
    assert r.steps["judge"].output == '{"urgent":false,"reason":"none"}'


def test_a_mock_that_does_not_match_fails_the_step_saying_so_at_once() -> None:
    r = run_workflow(triage, mocks={"judge": {"urgent": "maybe"}})
    assert r.status == "failed"
    judge = r.steps["judge"]
    assert judge.status == "failed"
    assert judge.tries == 1  # not retried: it would not match the next time either
    assert (judge.error or "").startswith("the mock of step 'judge' does not match its schema: ")
    assert "urgent" in (judge.error or "")
    assert r.steps["headline"].status == "skipped"
    assert len(r.calls["judge"]) == 1


def test_a_mock_that_is_not_json_fails_the_step() -> None:
    r = run_workflow(triage, mocks={"judge": "Yes, very urgent."})
    assert "does not match its schema" in (r.steps["judge"].error or "")
    assert "JSON" in (r.steps["judge"].error or "")


def test_a_dict_schema_is_checked_with_json_schema_and_a_kind_mock_counts_too() -> None:
    calls: list[MockCall] = []

    def answer(call: MockCall) -> Any:
        calls.append(call)
        return {"name": "Ana"} if call.name == "name" else "free text, not JSON"

    r = run_workflow(who, mocks={"llm": answer})
    assert r.succeeded, r.error
    assert r.steps["name"].output == '{"name":"Ana"}'
    assert r.steps["free"].output == "free text, not JSON"  # no schema: taken as it is
    assert calls[0].inputs["schema"] == "answer"
    assert "schema" not in calls[1].inputs


def test_a_mock_that_breaks_a_dict_schema_names_the_problem() -> None:
    r = run_workflow(who, mocks={"name": {"name": 7}, "free": "x"})
    error = r.steps["name"].error or ""
    assert error == ("the mock of step 'name' does not match its schema: "
                     "7 is not of type 'string' at $.name")


async def test_an_async_mock_is_checked_as_well() -> None:
    from brain.testing import arun_workflow

    async def later(call: MockCall) -> str:
        return '{"reason": "no verdict"}'

    r = await arun_workflow(triage, mocks={"judge": later})
    assert "does not match its schema" in (r.steps["judge"].error or "")
