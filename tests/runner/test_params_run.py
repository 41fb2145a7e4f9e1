"""Typed parameters at run time: every Python way of starting a run validates them before
anything is stored (a bad one stores no row at all), the run keeps them, steps read them
through placeholders, and resumes and retries reuse the stored ones.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel

from brain import WorkflowInputError, shell, step, workflow
from brain.results import RunStatus, TriggerData
from brain.service.api import BrainApi
from brain.store import Store


class Target(BaseModel):
    host: str
    port: int = 22


@step
def describe(target: Target, n: int, raw) -> str:  # type: ignore[no-untyped-def]
    return f"{type(target).__name__}:{target.host}:{target.port} {type(n).__name__}:{n} " \
           f"{type(raw).__name__}"


@workflow(name="params_deploy")
def deploy(service: str, version: str = "latest", env: Literal["staging", "prod"] = "staging",
           n: int = 2, target: Target = Target(host="h")) -> None:
    shell("plan", argv=["echo", service, version, env, f"{target.host}:{target.port}"])
    shell("quoted", command=f"echo {service} \"{version}\" '{env}'")
    describe(target, n, target)


async def run_rows(url: str) -> int:
    async with Store(url) as store:
        return len(await store.list_runs())


async def test_keyword_parameters_run_the_workflow(db_url: str) -> None:
    result = deploy(service="api", n=5, store=db_url)
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert result.params == {"service": "api", "version": "latest", "env": "staging", "n": 5,
                             "target": {"host": "h", "port": 22}}
    assert result.steps["plan"].output == "api latest staging h:22"
    assert result.steps["quoted"].output == "api latest staging"
    # The function gets typed values: a model, an int; an unannotated one the JSON value.
    assert result.steps["describe"].output == "Target:h:22 int:5 dict"
    async with Store(db_url) as store:
        assert (await store.get_run(result.run_id)).params == result.params


async def test_run_and_arun_take_params(db_url: str) -> None:
    assert deploy.run(params={"service": "a"}, store=db_url).params["service"] == "a"
    result = await deploy.arun(params={"service": "b", "env": "prod"}, store=db_url)
    assert (result.params["service"], result.params["env"]) == ("b", "prod")
    assert result.to_json_dict()["params"]["env"] == "prod"


@pytest.mark.parametrize("bad", [{}, {"service": 1}, {"service": "a", "env": "dev"},
                                 {"service": "a", "nope": 1}, {"service": "a", "n": "x"}])
async def test_invalid_params_store_nothing(db_url: str, bad: dict[str, Any]) -> None:
    with pytest.raises(WorkflowInputError) as info:
        deploy.run(params=bad, store=db_url)
    assert info.value.errors and all(set(e) == {"loc", "msg", "type"} for e in info.value.errors)
    with pytest.raises(WorkflowInputError):
        await deploy.arun(params=bad, store=db_url)
    with pytest.raises(WorkflowInputError):
        await deploy.enqueue(params=bad)
    with pytest.raises(WorkflowInputError):
        await deploy.enqueue_many([{"params": {"service": "ok"}}, {"params": bad}])
    async with Store(db_url) as store:
        with pytest.raises(WorkflowInputError):
            await BrainApi(store).start(deploy, TriggerData(), params=bad)
    assert await run_rows(db_url) == 0


def test_keyword_parameters_and_params_together(db_url: str) -> None:
    with pytest.raises(TypeError, match="given twice"):
        deploy(params={"service": "a"}, service="b", store=db_url)
    with pytest.raises(WorkflowInputError, match="service: Field required"):
        deploy(store=db_url)


async def test_enqueue_and_enqueue_many_keep_params(db_url: str) -> None:
    one = await deploy.enqueue(body="b", params={"service": "one"})
    many = await deploy.enqueue_many([{"params": {"service": "two"}, "body": "x"},
                                      {"params": {"service": "three", "n": 9}}])
    with pytest.raises(WorkflowInputError) as info:
        await deploy.enqueue_many([{"params": {"service": "ok"}}, {"params": {}}])
    assert info.value.errors[0]["loc"] == [1, "service"]
    async with Store(db_url) as store:
        got = [await store.get_run(i) for i in (one, *many)]
    assert [r.params["service"] for r in got] == ["one", "two", "three"]
    assert got[2].params["n"] == 9
    assert got[0].trigger.body == "b"
    assert await run_rows(db_url) == 3


async def test_brain_api_start_validates_and_queues(db_url: str) -> None:
    async with Store(db_url) as store:
        api = BrainApi(store)
        run_id, created = await api.start(deploy, TriggerData(), params={"service": "s"})
        assert created
        assert (await api.run(run_id)).params["service"] == "s"
