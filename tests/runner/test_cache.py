"""Cached steps (SPEC §26): a step with ``cache=`` answers an identical request from the
entry an earlier run stored, making no request at all; anything that changes what the step
does or is given misses; failures are never stored; entries are the database's, so another
process finds them; ``brain cache clear`` drops them; a secret the step uses never reaches
the database file.

Requests are counted where they arrive: a real OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from support import write_source

from brain import Cache, WorkflowDefinitionError, llm, secret, shell, step, workflow
from brain.loader import load_file
from brain.metrics import Metrics
from brain.testing import FakeChatServer, completion

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    with FakeChatServer(reply="the answer") as s:
        yield s


USED = {"prompt_tokens": 12, "completion_tokens": 30}


def answer_with_usage(server: FakeChatServer, content: str = "the answer") -> None:
    server.respond(json={**completion(content), "usage": USED})


def test_a_second_identical_run_asks_the_model_nothing(server: FakeChatServer) -> None:
    @workflow
    def summarize(topic: str) -> None:
        llm("sum", prompt=f"Summarize {topic}", model="m", provider_url=server.url, cache="7d")

    metrics = Metrics()
    answer_with_usage(server)
    first = summarize.run(params={"topic": "owls"}, observers=[metrics])
    second = summarize.run(params={"topic": "owls"}, observers=[metrics])
    assert first.succeeded and second.succeeded
    assert len(server.requests) == 1
    ran, hit = first.steps["sum"], second.steps["sum"]
    assert not ran.cached and ran.usage == USED
    assert hit.cached and hit.output == "the answer" and hit.status == "succeeded"
    assert hit.usage is None and hit.saved_usage == USED
    assert second.usage is None  # it spent nothing
    as_json = second.to_json_dict()["steps"][0]
    assert as_json["cached"] is True and as_json["saved_usage"] == USED
    text = generate_latest(metrics.registry).decode()
    assert 'brain_cache_hits_total{kind="llm",workflow="summarize"} 1.0' in text
    assert 'brain_cache_misses_total{kind="llm",workflow="summarize"} 1.0' in text
    assert ('brain_llm_tokens_saved_total{kind="completion",model="m",workflow="summarize"} '
            '30.0') in text
    # A changed prompt (another parameter) misses.
    summarize.run(params={"topic": "bats"})
    assert len(server.requests) == 2


def test_failures_are_never_cached(server: FakeChatServer) -> None:
    server.respond(status=500)

    @workflow
    def flaky() -> None:
        llm("ask", prompt="hello", model="m", provider_url=server.url, cache="1h")

    assert not flaky().succeeded
    assert flaky().succeeded
    assert flaky().succeeded
    assert len(server.requests) == 2  # the failure, then the success the third run reused


def test_an_entry_expires(server: FakeChatServer) -> None:
    @workflow
    def short() -> None:
        llm("ask", prompt="hello", model="m", provider_url=server.url, cache="0.3s")

    short()
    short()
    assert len(server.requests) == 1
    time.sleep(0.4)
    short()
    assert len(server.requests) == 2


def test_a_key_of_its_own_replaces_the_inputs(server: FakeChatServer) -> None:
    @workflow
    def keyed(doc: str, version: str) -> None:
        llm("ask", prompt=f"Review {doc}", model="m", provider_url=server.url,
            cache=Cache(expire="1d", key=[version]))

    keyed.run(params={"doc": "first text", "version": "v1"})
    keyed.run(params={"doc": "other text, same version", "version": "v1"})
    assert len(server.requests) == 1
    keyed.run(params={"doc": "first text", "version": "v2"})
    assert len(server.requests) == 2


def test_a_shell_step_and_a_step_function_are_cached_too(tmp_path: Path) -> None:
    marks = tmp_path / "marks"

    @step(cache="1h")
    def count(text: str) -> int:
        with open(marks, "a") as f:
            f.write("step\n")
        return len(text)

    @workflow
    def both() -> None:
        out = shell("echo", argv=["sh", "-c", f'echo shell >> "{marks}"; echo hi'], cache="1h")
        count(out)

    assert both().succeeded
    result = both()
    assert result.succeeded
    assert marks.read_text() == "shell\nstep\n"
    assert result.steps["echo"].cached and result.steps["count"].cached
    assert result.steps["count"].output == "2"


FLOW = '''
from brain import step, workflow


def helper(text):
    return text.upper(){helper_change}


@step(cache="1h")
def shout(text: str) -> str:
    with open({marks!r}, "a") as f:
        f.write("ran\\n")
    return helper(text){body_change}


@workflow
def loud():
    shout("hello")
'''


def _run_version(folder: Path, marks: Path, name: str, **changes: str) -> str:
    path = folder / name
    write_source(folder, name, FLOW.format(**{"marks": str(marks), "helper_change": "",
                                              "body_change": "", **changes}))
    result = load_file(path)["loud"].run()
    assert result.succeeded, result.error
    return result.steps["shout"].output or ""


def test_a_changed_step_body_or_helper_misses(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    assert _run_version(tmp_path, marks, "a.py") == "HELLO"
    assert _run_version(tmp_path, marks, "b.py") == "HELLO"  # the same code in another file
    assert marks.read_text() == "ran\n"
    assert _run_version(tmp_path, marks, "c.py", body_change=' + "!"') == "HELLO!"
    assert _run_version(tmp_path, marks, "d.py", helper_change=' + "?"') == "HELLO?"
    assert marks.read_text() == "ran\n" * 3


CLI_FLOW = '''
from brain import llm, workflow


@workflow
def ask():
    llm("ask", prompt="hello", model="m", provider_url="{url}", cache="1d")
'''


def _brain(brain_cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*brain_cmd, *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ))


def test_a_hit_across_processes_and_brain_cache_clear(tmp_path: Path, server: FakeChatServer,
                                                      brain_cmd: list[str]) -> None:
    write_source(tmp_path, "flow.py", CLI_FLOW.format(url=server.url))
    flow = str(tmp_path / "flow.py")
    first = _brain(brain_cmd, "run", flow, "--json")
    second = _brain(brain_cmd, "run", flow, "--json")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert len(server.requests) == 1
    assert json.loads(second.stdout)["steps"][0]["cached"] is True
    shown = _brain(brain_cmd, "show", json.loads(second.stdout)["run_id"])
    assert "(cached)" in shown.stdout and "answered from the cache" in shown.stdout

    cleared = _brain(brain_cmd, "cache", "clear", "--workflow", "other")
    assert cleared.returncode == 0 and "cleared 0 cached outputs" in cleared.stderr
    cleared = _brain(brain_cmd, "cache", "clear", "--workflow", "ask", "--step", "ask")
    assert cleared.returncode == 0 and "cleared 1 cached output" in cleared.stderr
    assert _brain(brain_cmd, "run", flow, "--json").returncode == 0
    assert len(server.requests) == 2
    assert _brain(brain_cmd, "cache", "clear").stderr.startswith("cleared 1 cached output")

    bad = _brain(brain_cmd, "cache", "clear", "--step", "ask")
    assert bad.returncode == 2 and "--step needs --workflow" in bad.stderr
    assert "Traceback" not in bad.stderr


SECRETS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
                  min_size=16, max_size=40)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=SECRETS, token=SECRETS)
def test_a_secret_input_never_reaches_the_database_file(server: FakeChatServer, key: str,
                                                        token: str) -> None:
    folder = Path(tempfile.mkdtemp())
    db = folder / "brain.db"
    old = {k: os.environ.get(k) for k in ("CACHE_KEY", "CACHE_TOKEN")}
    os.environ.update(CACHE_KEY=key, CACHE_TOKEN=token)
    try:
        @workflow
        def secretive() -> None:
            llm("ask", prompt="hello", model="m", provider_url=server.url,
                api_key=secret("CACHE_KEY"), cache="1d")
            shell("use", argv=["sh", "-c", 'test -n "$TOKEN" && echo fine'],
                  env={"TOKEN": secret("CACHE_TOKEN")}, cache="1d")

        url = f"sqlite:///{db}"
        assert secretive.run(store=url).succeeded
        hit = secretive.run(store=url)
        assert hit.succeeded and hit.steps["ask"].cached and hit.steps["use"].cached
        data = b"".join(p.read_bytes() for p in folder.iterdir())
        for value in (key, token):
            assert value.encode() not in data
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_a_changed_secret_misses(server: FakeChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    @workflow
    def keyed_by_secret() -> None:
        llm("ask", prompt="hello", model="m", provider_url=server.url,
            api_key=secret("CACHE_KEY"), cache="1d")

    monkeypatch.setenv("CACHE_KEY", "first-secret-value")
    keyed_by_secret()
    keyed_by_secret()
    monkeypatch.setenv("CACHE_KEY", "second-secret-value")
    keyed_by_secret()
    assert len(server.requests) == 2


@pytest.mark.parametrize(("cache", "says"), [
    ("soon", "bad duration"),
    (0, "longer than zero"),
    (Cache(expire="1d", key="version"), "takes a list"),
])
def test_a_bad_cache_is_a_definition_error(cache: object, says: str) -> None:
    with pytest.raises(WorkflowDefinitionError, match=says):
        @workflow
        def wrong() -> None:
            shell("a", command="true", cache=cache)
