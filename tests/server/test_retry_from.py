"""SPEC §24 retries: a retry after the workflow changed runs on the current definition when
the steps it keeps are unchanged (else 409, nothing queued); ``{"from": STEP}`` (``brain
retry --from``, the console's "retry from here") runs STEP and everything downstream again,
exactly those (their side effects counted), and keeps the others' outputs. One retry per run,
still, everywhere."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from serve_support import wait_run
from support import write_source

from brain.loader import load_file
from brain.server import create_app

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

FLOW = '''
    from brain import parallel, shell, workflow

    @workflow
    def chain():
        shell("a", command="echo a >> {log}; echo a-{v_a}")
        with parallel():
            b = shell("b", command="echo b >> {log}; echo b-{v_b}")
            shell("d", command="echo d >> {log}; echo d")
        shell("c", command="echo c >> {log}; test -e {ok} && echo c-{v_c}", after=[b])
'''


def flow(tmp_path: Path, **versions: str) -> Any:
    v = {"v_a": "1", "v_b": "1", "v_c": "1", **versions}
    path = write_source(tmp_path, "flows.py", FLOW.format(log=tmp_path / "log",
                                                          ok=tmp_path / "ok", **v))
    return load_file(path)["chain"]


def counts(tmp_path: Path) -> dict[str, int]:
    found = (tmp_path / "log").read_text().split()
    return {name: found.count(name) for name in "abcd"}


@asynccontextmanager
async def client_for(wf: Any) -> AsyncIterator[Any]:
    async with AsyncTestClient(create_app([wf]), base_url="http://127.0.0.1",
                               timeout=60) as client:
        yield client


async def _run(client: Any) -> dict[str, Any]:
    r = await client.post("/api/workflows/chain/runs", json={"wait": True})
    assert r.status_code in (200, 202), r.text
    return await wait_run(client, r.json()["run_id"])


async def _runs(client: Any) -> list[dict[str, Any]]:
    return (await client.get("/api/runs")).json()


async def test_retry_from_a_step_runs_exactly_it_and_what_is_downstream(tmp_path: Path) -> None:
    (tmp_path / "ok").touch()
    async with client_for(flow(tmp_path)) as client:
        first = await _run(client)
        assert first["status"] == "succeeded"
        assert counts(tmp_path) == {"a": 1, "b": 1, "c": 1, "d": 1}
    # b changes; a and d (not downstream of b) keep their outputs, b and c run the new code
    async with client_for(flow(tmp_path, v_b="2", v_c="2")) as client:
        r = await client.post(f"/api/runs/{first['run_id']}/retry", json={"from": "b"})
        assert r.status_code == 202, r.text
        again = await wait_run(client, r.json()["run_id"])
        twice = await client.post(f"/api/runs/{first['run_id']}/retry", json={"from": "b"})
    assert again["status"] == "succeeded", again
    assert counts(tmp_path) == {"a": 1, "b": 2, "c": 2, "d": 1}
    outputs = {s["name"]: s["output"] for s in again["steps"]}
    assert outputs == {"a": "a-1", "b": "b-2", "d": "d", "c": "c-2"}
    assert again["retry_of"] == first["run_id"]
    assert again["continued_on"] and again["continued_on"] != [first["version"]]
    assert twice.status_code == 409 and "already retried" in twice.json()["detail"]


async def test_a_retry_that_would_keep_a_changed_step_is_refused_and_queues_nothing(
        tmp_path: Path) -> None:
    async with client_for(flow(tmp_path)) as client:
        failed = await _run(client)  # c fails: no "ok" file
    assert failed["status"] == "failed"
    async with client_for(flow(tmp_path, v_a="2")) as client:
        r = await client.post(f"/api/runs/{failed['run_id']}/retry")
        assert r.status_code == 409, r.text
        assert r.json()["detail"] == ("workflow changed since the run started: step 'a' "
                                      "(command changed)")
        r = await client.post(f"/api/runs/{failed['run_id']}/retry", json={"from": "b"})
        assert r.status_code == 409 and "step 'a'" in r.json()["detail"]
        r = await client.post(f"/api/runs/{failed['run_id']}/retry", json={"from": "nope"})
        assert r.status_code == 400, r.text
        assert "has no step 'nope'" in r.json()["detail"]
        r = await client.post(f"/api/runs/{failed['run_id']}/retry", json={"frm": "b"})
        assert r.status_code == 400
        # from a: every step runs again, so nothing kept can have changed
        r = await client.post(f"/api/runs/{failed['run_id']}/retry", json={"from": "a"})
        assert r.status_code == 202, r.text
        (tmp_path / "ok").touch()
        again = await wait_run(client, r.json()["run_id"])
        runs = await _runs(client)
    assert again["status"] == "succeeded", again
    assert len(runs) == 2  # the refused retries queued nothing
    assert counts(tmp_path) == {"a": 2, "b": 2, "c": 2, "d": 2}


async def test_a_plain_retry_after_a_later_step_changed_runs_the_new_code(tmp_path: Path) -> None:
    async with client_for(flow(tmp_path)) as client:
        failed = await _run(client)
    (tmp_path / "ok").touch()
    async with client_for(flow(tmp_path, v_c="2")) as client:
        r = await client.post(f"/api/runs/{failed['run_id']}/retry")
        assert r.status_code == 202, r.text
        again = await wait_run(client, r.json()["run_id"])
    assert again["status"] == "succeeded", again
    assert {s["name"]: s["output"] for s in again["steps"]}["c"] == "c-2"
    assert counts(tmp_path) == {"a": 1, "b": 1, "c": 2, "d": 1}


def _cli_ran(tmp_path: Path, brain_cmd: list[str], db_url: str
             ) -> tuple[Callable[..., subprocess.CompletedProcess[str]], dict[str, Any]]:
    """The ``brain`` command on the test's database, and a succeeded ``brain run`` of chain."""
    wf = flow(tmp_path)
    (tmp_path / "ok").touch()
    env = dict(os.environ, BRAIN_DATABASE_URL=db_url)

    def brain(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*brain_cmd, *args], capture_output=True, text=True, env=env,
                              timeout=60)

    first = json.loads(brain("run", wf.spec.source_file, "--json").stdout)
    assert first["status"] == "succeeded"
    return brain, first


def test_brain_retry_from(tmp_path: Path, brain_cmd: list[str], db_url: str) -> None:
    """The CLI: ``--from`` queues exactly the downstream steps again; an unknown step is
    exit 2 and queues nothing; a second retry is exit 1, naming the first."""
    brain, first = _cli_ran(tmp_path, brain_cmd, db_url)
    unknown = brain("retry", first["run_id"][:10], "--from", "nope")
    assert unknown.returncode == 2 and "has no step 'nope'" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    plain = brain("retry", first["run_id"][:10])
    assert plain.returncode == 1 and "--from STEP" in plain.stderr
    queued = brain("retry", first["run_id"][:10], "--from", "c")
    assert queued.returncode == 0, queued.stderr
    assert "from step c" in queued.stderr + queued.stdout
    again = brain("retry", first["run_id"][:10], "--from", "c")
    assert again.returncode == 1 and "already retried" in again.stderr
    runs = json.loads(brain("runs", "--json").stdout)
    assert len(runs) == 2
    [retry] = [r for r in runs if r["retry_of"] == first["run_id"]]
    shown = json.loads(brain("show", retry["run_id"], "--json").stdout)
    assert {s["name"]: s["status"] for s in shown["steps"]} == {
        "a": "succeeded", "b": "succeeded", "d": "succeeded", "c": "pending"}


def test_brain_retry_with_paths_refuses_a_changed_kept_step_up_front(
        tmp_path: Path, brain_cmd: list[str], db_url: str) -> None:
    """``brain retry RUN_ID PATH``: with the workflow files as deployed loaded, a retry
    whose kept step changed since is exit 2 naming it, and nothing is queued; the same
    retry from a step upstream of the change is queued."""
    brain, first = _cli_ran(tmp_path, brain_cmd, db_url)
    flow(tmp_path, v_b="2")  # b changes: a retry from c keeps it
    refused = brain("retry", first["run_id"][:10], "--from", "c", str(tmp_path))
    assert refused.returncode == 2, refused.stderr
    assert "step 'b' (command changed)" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert len(json.loads(brain("runs", "--json").stdout)) == 1  # nothing queued
    queued = brain("retry", first["run_id"][:10], "--from", "b", str(tmp_path))
    assert queued.returncode == 0, queued.stderr
    assert len(json.loads(brain("runs", "--json").stdout)) == 2
