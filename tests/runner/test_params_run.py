"""Typed parameters at run time: every Python way of starting a run validates them before
anything is stored (a bad one stores no row at all), the run keeps them, steps read them
through placeholders, and resumes and retries reuse the stored ones.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from brain import WorkflowInputError, for_each, shell, step, workflow
from brain.results import RunStatus, TriggerData
from brain.runner.queueing import new_run
from brain.service.api import BrainApi
from brain.store import Store
from brain.testing import run_workflow


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


# --- parameters in conditions, fan-out and text -----------------------------------------------


@workflow(name="params_flow")
def flow(files: list[str], dry_run: bool = False, label: str = "L",
         meta: dict[str, int] = {"a": 1}) -> None:  # noqa: B006 - a JSON default
    shell("plan", argv=["echo", "plan"])
    shell("apply", argv=["echo", "apply"], when=~dry_run)
    shell("dry", argv=["echo", "dry"], when=dry_run)
    with for_each(files, max_parallel=2) as f:
        shell("each", argv=["echo", f"{label}:{f}"])
    shell("meta", argv=["echo", f"{meta}", f"{files}"])


@pytest.mark.parametrize("dry_run", [True, False])
def test_conditions_and_for_each_on_parameters(db_url: str, dry_run: bool) -> None:
    result = flow(files=["a b", "c'd"], dry_run=dry_run, store=db_url)
    assert result.status == RunStatus.SUCCEEDED, result.error
    steps = result.steps
    assert steps["apply"].status == ("skipped" if dry_run else "succeeded")
    assert steps["dry"].status == ("succeeded" if dry_run else "skipped")
    assert steps["each[0]"].output == "L:a b"
    assert steps["each[1]"].output == "L:c'd"
    assert steps["meta"].output == '{"a":1} ["a b","c\'d"]'


def test_for_each_over_an_empty_list_parameter(db_url: str) -> None:
    result = flow(files=[], store=db_url)
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert result.steps["each"].output == "[]"


HOSTILE = ["$(touch MARK)", "`touch MARK`", "'; touch MARK; '", '"; touch MARK; "',
           "a\nb", "-n", "$HOME", "\\", "{a}", "{{params.s}}", "x' \"y", "*", "~root", "",
           "${IFS}touch${IFS}MARK", "|touch MARK", "&& touch MARK", "\\'\\\"$(touch MARK)"]
#: Where the hostile shell steps run (their marker would appear here).
WORK = tempfile.mkdtemp(prefix="brain-params-hostile-")


@workflow(name="params_hostile")
def hostile(s: str, blob: dict[str, str] = {}) -> None:  # noqa: B006 - a JSON default
    shell("bare", command=f"printf '%s|' {s} {blob}", cwd=WORK)
    shell("dq", command=f'printf "%s|" "<{s}>" "{blob}"', cwd=WORK)
    shell("sq", command=f"printf '%s|' '<{s}>'", cwd=WORK)
    shell("sub", command=f'printf "%s|" "$(printf %s {s})"', cwd=WORK)
    shell("redir", command=f"printf %s {s} > {s}.out; cat -- {s}.out; rm -f -- {s}.out",
          cwd=WORK)
    shell("argv", argv=["printf", "%s|", s, f"{blob}"], stdin=f"{s}", cwd=WORK)
    shell("env", command='printf %s "$S"', env={"S": s}, cwd=WORK)


def expected(s: str, blob: dict[str, str]) -> dict[str, str]:
    text = json.dumps(blob, ensure_ascii=False, separators=(",", ":"))
    return {"bare": f"{s}|{text}|", "dq": f"<{s}>|{text}|", "sq": f"<{s}>|",
            "sub": f"{s.rstrip(chr(10))}|", "argv": f"{s}|{text}|", "env": s}


VALUES = st.one_of(st.sampled_from(HOSTILE), st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=20))


@settings(max_examples=25, deadline=None)
@given(s=VALUES, blob=st.dictionaries(st.sampled_from(["k", "'", '"', "$(x)"]), VALUES,
                                      max_size=2))
def test_hostile_parameter_values_stay_data_in_shell_steps(s: str, blob: dict[str, str]) -> None:
    """Any text, in every quoting context a parameter may stand in: printed back exactly,
    never run (the marker file never appears)."""
    result = run_workflow(hostile, params={"s": s, "blob": blob})
    mark = os.path.join(WORK, "MARK")
    assert not os.path.exists(mark)
    outputs = {n: st_.output for n, st_ in result.steps.items()}
    want = expected(s, blob)
    for name, text in want.items():
        assert outputs[name] == text.rstrip("\n"), name
    if s and "/" not in s and s not in (".", "..") and not s.startswith("-") and \
            len(s.encode()) < 200:
        assert result.steps["redir"].status == "succeeded"
        assert outputs["redir"] == s.rstrip("\n")


@workflow(name="params_keyed", max_concurrent_runs=1, concurrency_key="{params.service}/{params.t.host}")
def keyed(service: str, t: Target = Target(host="h1")) -> None:
    shell("a", argv=["echo", service])


async def test_a_concurrency_key_resolves_parameters_when_queued(db_url: str) -> None:
    run_id = await keyed.enqueue(params={"service": "api"})
    async with Store(db_url) as store:
        assert (await store.get_run(run_id)).concurrency_key == "api/h1"
    assert new_run(keyed, TriggerData(), {"service": "db", "t": {"host": "x"}}
                   ).concurrency_key == "db/x"
