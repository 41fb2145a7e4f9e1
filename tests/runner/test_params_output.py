"""What a workflow returns, at the end of a succeeded run: resolved from its steps' outputs
(typed steps as JSON values, the others as text) and its parameters, validated against the
return annotation, stored as the run's ``output``; and resumes and retries that reuse the
stored parameters (SQLite file and PostgreSQL).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from pydantic import BaseModel
from support import upgraded_schema

from brain import WorkflowInputError, for_each, llm, shell, step, workflow
from brain.results import RunStatus, TriggerData
from brain.runner import resume_run
from brain.store import Store
from brain.testing import run_workflow


class Verdict(BaseModel):
    risky: bool
    summary: str


@step
def count(text: str) -> int:
    return len(text)


@step
def words(text: str) -> list[str]:
    return text.split()


@step
def untyped(text):  # type: ignore[no-untyped-def]
    return {"text": text}


@workflow(name="params_results")
def results(service: str, n: int = 2) -> dict[str, Any]:
    plan = shell("plan", argv=["echo", "42"])
    size = count(service)
    split = words(f"{service} x")
    loose = untyped(service)
    with for_each(["a", "b"]) as item:
        per = count(f"{item}{item}")
        echoed = shell("echoed", argv=["echo", f"{item}"])
    return {"plan": plan, "size": size, "words": split, "loose": loose, "service": service,
            "n": n, "per": per, "echoed": echoed, "literal": [1, "x", None]}


def test_the_output_resolves_typed_steps_as_json_and_the_rest_as_text(db_url: str) -> None:
    result = results(service="api", store=db_url)
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert result.output == {"plan": "42", "size": 3, "words": ["api", "x"],
                             "loose": '{"text":"api"}', "service": "api", "n": 2,
                             "per": [2, 2], "echoed": ["a", "b"], "literal": [1, "x", None]}
    assert result.to_json_dict()["output"] == result.output


async def test_the_stored_output_is_read_back(db_url: str) -> None:
    result = await results.arun(params={"service": "db"}, store=db_url)
    async with Store(db_url) as store:
        again = await store.get_run(result.run_id)
    assert again.output == result.output
    assert again.output["size"] == 2


@workflow(name="params_verdict")
def verdict(text: str, shape: str = "ok") -> Verdict:
    answer = llm("review", prompt=f"Is this risky? {text}", schema=Verdict, model="m")
    return answer


@workflow(name="params_text_returned")
def text_returned(n: int) -> int:
    out = shell("out", argv=["echo", f"{n}"])
    return out


def test_an_llm_with_a_schema_is_typed_and_validated_against_the_return_type() -> None:
    result = run_workflow(verdict, params={"text": "rm -rf"},
                          mocks={"review": {"risky": True, "summary": "deletes"}})
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert result.output == {"risky": True, "summary": "deletes"}
    assert Verdict.model_validate(result.output).risky


def test_text_output_validates_against_a_scalar_return_type() -> None:
    result = run_workflow(text_returned, params={"n": 7})
    assert (result.status, result.output) == (RunStatus.SUCCEEDED, 7)


@workflow(name="params_mismatch")
def mismatch() -> int:
    return shell("out", argv=["echo", "not a number"])


def test_an_output_that_does_not_match_the_return_type_fails_the_run(db_url: str) -> None:
    result = mismatch(store=db_url)
    assert result.status == RunStatus.FAILED
    assert result.error is not None
    assert result.error.startswith("output does not match the return type: ")
    assert result.output is None
    assert result.steps["out"].status == "succeeded"


@workflow(name="params_no_return")
def no_return(service: str = "x") -> None:
    shell("a", argv=["echo", service])


def test_no_return_is_no_output() -> None:
    result = run_workflow(no_return)
    assert (result.status, result.output, result.params) == (
        RunStatus.SUCCEEDED, None, {"service": "x"})


@workflow(name="params_skipped_output")
def skipped_output(go: bool = False) -> dict[str, Any]:
    a = shell("a", argv=["echo", "a"], when=go)
    return {"a": a}


def test_a_skipped_step_returns_none() -> None:
    assert run_workflow(skipped_output).output == {"a": None}
    assert run_workflow(skipped_output, params={"go": True}).output == {"a": "a"}


def test_run_workflow_validates_params_before_running() -> None:
    with pytest.raises(WorkflowInputError) as info:
        run_workflow(results, params={"n": "two"})
    assert [e["loc"] for e in info.value.errors] == [["service"], ["n"]]


def test_a_failed_run_has_no_output() -> None:
    result = run_workflow(results, params={"service": "api"},
                          mocks={"plan": lambda call: (_ for _ in ()).throw(RuntimeError("no"))})
    assert result.status == RunStatus.FAILED
    assert result.output is None


# --- resumes and retries reuse the stored parameters ---------------------------------------------


@workflow(name="params_resumed")
def resumed(service: str, tag: str = "t1") -> str:
    shell("first", argv=["echo", service])
    return shell("second", argv=["echo", f"{service}-{tag}"])


@pytest.fixture(params=["sqlite", "postgresql"])
def any_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'resume.db'}"
    url = str(request.getfixturevalue("fresh_pg_url"))
    asyncio.run(upgraded_schema(url))
    return url


async def test_a_resumed_run_uses_its_stored_params(any_url: str) -> None:
    async with Store(any_url) as store:
        run_id = uuid.uuid4().hex
        params = resumed.validate_params({"service": "api"})
        # Recorded running under an executor that died (its lease already ran out).
        await store.create_run(run_id=run_id, workflow=resumed.name,
                               definition_hash=resumed.definition_hash, trigger=TriggerData(),
                               step_rows=[(s.name, s.kind) for s in resumed.spec.steps],
                               owner="elsewhere:1:dead", lease_seconds=-1, params=params)
        result = await resume_run(resumed, store, run_id)
    assert result is not None and result.status == RunStatus.SUCCEEDED, result
    assert result.params == {"service": "api", "tag": "t1"}
    assert result.steps["second"].output == "api-t1"
    assert result.output == "api-t1"


async def test_a_retry_runs_with_the_original_params(any_url: str) -> None:
    async with Store(any_url) as store:
        first = await resumed.arun(params={"service": "db", "tag": "t9"}, store=store)
        assert first.status == RunStatus.SUCCEEDED
        # Fail it by hand, as a failed step would have, then retry it.
        run_id = uuid.uuid4().hex
        await store.create_run(run_id=run_id, workflow=resumed.name,
                               definition_hash=resumed.definition_hash, trigger=TriggerData(),
                               step_rows=[(s.name, s.kind) for s in resumed.spec.steps],
                               owner="me:1:a", params=first.params)
        await store.finish_run(run_id, RunStatus.FAILED, "boom", owner="me:1:a")
        retry_id = await store.retry_run(run_id, definition_hash=resumed.definition_hash)
        result = await resume_run(resumed, store, retry_id)
    assert result is not None and result.status == RunStatus.SUCCEEDED, result
    assert result.params == {"service": "db", "tag": "t9"}
    assert result.output == "db-t9"
