"""LLM steps (SPEC §1 "Secrets", §2 "LLM" and "Failure", §3): real HTTP to a FakeChatServer.

Every test runs a workflow in-process against :class:`brain.testing.FakeChatServer`,
a real OpenAI-compatible HTTP server on 127.0.0.1 that records each request and
answers scripted replies. httpx is never mocked. The conftest points
``BRAIN_DATABASE_URL`` at a private SQLite file per test and clears ``LLM_*``.
"""

from __future__ import annotations

import email.utils
import json
import logging
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from brain import WorkflowDefinitionError, llm, parallel, secret, shell, trigger, workflow
from brain.testing import FakeChatServer, completion

# --- helpers -----------------------------------------------------------------


class QuickChatServer(FakeChatServer):
    """A FakeChatServer whose ``stop()`` returns at once.

    ``FakeChatServer.start`` runs ``serve_forever()`` with the default 0.5 s poll
    interval, so each ``stop()`` waits up to half a second; over ~60 servers that
    alone would double this file's run time.
    """

    def start(self) -> QuickChatServer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever,
                                            kwargs={"poll_interval": 0.02},
                                            name="fake-chat-server", daemon=True)
            self._thread.start()
        return self


class TimedChatServer(QuickChatServer):
    """A FakeChatServer that also notes when (monotonic clock) each request arrived."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.times: list[float] = []
        self.wall_times: list[float] = []

    def _next(self):  # type: ignore[no-untyped-def]
        self.times.append(time.monotonic())
        self.wall_times.append(time.time())
        return super()._next()


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    with QuickChatServer(reply="fake reply") as s:
        yield s


@pytest.fixture
def other_server() -> Iterator[FakeChatServer]:
    with QuickChatServer(reply="other reply") as s:
        yield s


@pytest.fixture
def timed_server() -> Iterator[TimedChatServer]:
    with TimedChatServer(reply="timed reply") as s:
        yield s


# Sockets bound and never listening, kept open for the session (see closed_port_url).
_REFUSING: list[socket.socket] = []


def closed_port_url() -> str:
    """A base URL on 127.0.0.1 whose port nothing listens on: bound here and never listening,
    so connecting is refused, and held open so that no other process (another test worker's
    server, say) can take the port meanwhile."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    _REFUSING.append(sock)
    return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def db_bytes(tmp_path: Path) -> bytes:
    """Every byte SQLite wrote for this test's database (main file, WAL, shared memory)."""
    return b"".join(p.read_bytes() for p in sorted(tmp_path.glob("brain.db*")))


def stored_step(tmp_path: Path, run_id: str, name: str) -> dict[str, Any]:
    """The step's row as committed in the SQLite file (inputs parsed)."""
    con = sqlite3.connect(tmp_path / "brain.db")
    try:
        row = con.execute("SELECT inputs, output, error, status, tries FROM brain_steps "
                          "WHERE run_id = ? AND name = ?", (run_id, name)).fetchone()
    finally:
        con.close()
    assert row is not None, f"step {name!r} of run {run_id} is not stored"
    inputs, output, error, status, tries = row
    return {"inputs": json.loads(inputs) if inputs else None, "output": output, "error": error,
            "status": status, "tries": tries}


def auth(server: FakeChatServer, i: int = 0) -> str | None:
    return server.requests[i].headers.get("authorization")


# --- the request ---------------------------------------------------------------


def test_request_body_headers_path_and_output(server: FakeChatServer):
    url = server.url

    @workflow
    def llm_basic():
        llm("ask", prompt="Say hi", model="m-basic", provider_url=url)

    r = llm_basic()
    assert r.status == "succeeded", r.error
    assert r.steps["ask"].output == "fake reply"
    assert r.steps["ask"].kind == "llm"
    assert r.steps["ask"].tries == 1
    assert len(server.requests) == 1
    req = server.requests[0]
    assert req.method == "POST"
    assert req.path == "/v1/chat/completions"
    assert req.headers["content-type"].startswith("application/json")
    assert "authorization" not in req.headers
    # exactly these fields: no max_tokens when unset, default temperature 0.7
    assert req.json == {"model": "m-basic", "messages": [{"role": "user", "content": "Say hi"}],
                        "temperature": 0.7}


def test_max_tokens_temperature_and_system_message_first(server: FakeChatServer):
    url = server.url

    @workflow
    def llm_tuned():
        llm("tuned", prompt="the question", system="You are terse.", model="m",
            provider_url=url, temperature=0.0, max_tokens=321)
        llm("hot", prompt="another", model="m", provider_url=url, temperature=2)

    r = llm_tuned()
    assert r.status == "succeeded", r.error
    tuned, hot = server.requests[0].json, server.requests[1].json
    assert tuned["messages"] == [{"role": "system", "content": "You are terse."},
                                 {"role": "user", "content": "the question"}]
    assert tuned["max_tokens"] == 321
    assert tuned["temperature"] == 0
    assert hot["temperature"] == 2
    assert "max_tokens" not in hot
    assert [m["role"] for m in hot["messages"]] == ["user"]


def test_output_is_the_content_verbatim(server: FakeChatServer):
    text = "  Line one.\n\nLine two with ünïcödé and {braces}\n\n"
    server.respond(content=text)
    url = server.url

    @workflow
    def llm_verbatim():
        llm("v", prompt="p", model="m", provider_url=url)

    r = llm_verbatim()
    assert r.status == "succeeded", r.error
    assert r.steps["v"].output == text


@pytest.mark.parametrize("model_on_step", [True, False], ids=["model-step", "model-env"])
@pytest.mark.parametrize("url_on_step", [True, False], ids=["url-step", "url-env"])
@pytest.mark.parametrize("key_on_step", [True, False], ids=["key-step", "key-env"])
def test_step_fields_override_environment_and_fall_back_to_it(
        server: FakeChatServer, other_server: FakeChatServer, monkeypatch: pytest.MonkeyPatch,
        model_on_step: bool, url_on_step: bool, key_on_step: bool):
    """Each of model / provider_url / api_key: the step's value wins, else LLM_* (SPEC §2)."""
    step_url = server.url

    @workflow(name=f"llm_combo_{int(model_on_step)}{int(url_on_step)}{int(key_on_step)}")
    def combo():
        llm("c", prompt="p",
            model="step-model" if model_on_step else None,
            provider_url=step_url if url_on_step else None,
            api_key="step-key-123" if key_on_step else None)

    # set after the definition: configuration is read at run time
    monkeypatch.setenv("LLM_MODEL", "env-model")
    monkeypatch.setenv("LLM_BASE_URL", other_server.url)
    monkeypatch.setenv("LLM_API_KEY", "env-key-456")

    r = combo()
    assert r.status == "succeeded", r.error
    target, unused = (server, other_server) if url_on_step else (other_server, server)
    assert len(target.requests) == 1
    assert unused.requests == []
    req = target.requests[0]
    assert req.json["model"] == ("step-model" if model_on_step else "env-model")
    assert auth(target) == ("Bearer step-key-123" if key_on_step else "Bearer env-key-456")
    inputs = r.steps["c"].inputs
    assert inputs["model"] == req.json["model"]
    assert inputs["url"] == target.url + "/chat/completions"
    assert inputs.get("api_key") == "***"


def test_environment_is_read_when_the_run_starts_not_when_defined(
        server: FakeChatServer, other_server: FakeChatServer, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LLM_MODEL", "model-at-definition")
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LLM_API_KEY", "key-at-definition")

    @workflow
    def llm_env_late():
        llm("e", prompt="p")

    monkeypatch.setenv("LLM_MODEL", "model-one")
    monkeypatch.setenv("LLM_BASE_URL", server.url)
    monkeypatch.setenv("LLM_API_KEY", "key-one-0001")
    r1 = llm_env_late()
    assert r1.status == "succeeded", r1.error

    monkeypatch.setenv("LLM_MODEL", "model-two")
    monkeypatch.setenv("LLM_BASE_URL", other_server.url)
    monkeypatch.delenv("LLM_API_KEY")
    r2 = llm_env_late()
    assert r2.status == "succeeded", r2.error

    assert len(server.requests) == 1 and len(other_server.requests) == 1
    assert server.requests[0].json["model"] == "model-one"
    assert auth(server) == "Bearer key-one-0001"
    assert other_server.requests[0].json["model"] == "model-two"
    assert auth(other_server) is None
    assert r2.steps["e"].output == "other reply"


def test_no_key_anywhere_means_no_authorization_header(server: FakeChatServer,
                                                         monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("LLM_BASE_URL", server.url)
    monkeypatch.setenv("LLM_MODEL", "m")

    @workflow
    def llm_no_key():
        llm("k", prompt="p")

    r = llm_no_key()
    assert r.status == "succeeded", r.error
    assert "authorization" not in server.requests[0].headers
    assert "api_key" not in r.steps["k"].inputs


def test_key_from_environment_only_is_a_bearer_header(server: FakeChatServer,
                                                       monkeypatch: pytest.MonkeyPatch):
    url = server.url

    @workflow
    def llm_env_key():
        llm("k", prompt="p", model="m", provider_url=url)

    monkeypatch.setenv("LLM_API_KEY", "only-in-env-key")
    r = llm_env_key()
    assert r.status == "succeeded", r.error
    assert auth(server) == "Bearer only-in-env-key"
    assert r.steps["k"].inputs["api_key"] == "***"


def test_trailing_slash_on_the_base_url_does_not_matter(server: FakeChatServer,
                                                         monkeypatch: pytest.MonkeyPatch):
    url = server.url

    @workflow
    def llm_slash():
        llm("with_slash", prompt="p", model="m", provider_url=url + "/")
        llm("without_slash", prompt="p", model="m", provider_url=url)
        llm("env_slash", prompt="p", model="m")

    monkeypatch.setenv("LLM_BASE_URL", url + "/")
    r = llm_slash()
    assert r.status == "succeeded", r.error
    assert [q.path for q in server.requests] == ["/v1/chat/completions"] * 3
    assert r.steps["with_slash"].inputs["url"] == url + "/chat/completions"
    assert r.steps["env_slash"].inputs["url"] == url + "/chat/completions"


def test_no_model_anywhere_fails_before_any_request(server: FakeChatServer,
                                                     monkeypatch: pytest.MonkeyPatch):
    url = server.url

    @workflow
    def llm_no_model():
        llm("nomodel", prompt="p", provider_url=url, retries=3, retry_delay_seconds=0.01)
        shell("after", command="echo never")

    monkeypatch.setenv("LLM_BASE_URL", url)
    r = llm_no_model()
    assert server.requests == []
    step = r.steps["nomodel"]
    assert step.status == "failed"
    assert step.tries == 1
    err = step.error or ""
    assert "model" in err
    assert "LLM_MODEL" in err  # says where to set one
    assert r.status == "failed"
    assert r.error == f"step 'nomodel' failed: {err}"
    assert r.steps["after"].status == "skipped"


def test_empty_llm_model_variable_counts_as_unset(server: FakeChatServer,
                                                  monkeypatch: pytest.MonkeyPatch):
    url = server.url

    @workflow
    def llm_blank_model():
        llm("b", prompt="p", provider_url=url)

    monkeypatch.setenv("LLM_MODEL", "")
    r = llm_blank_model()
    assert r.steps["b"].status == "failed"
    assert "LLM_MODEL" in (r.steps["b"].error or "")
    assert server.requests == []


# --- failures ------------------------------------------------------------------


def test_http_error_shows_status_and_start_of_body(server: FakeChatServer):
    body = "upstream model crashed: CUDA out of memory " + "x" * 5000
    server.respond(500, body=body)
    url = server.url

    @workflow
    def llm_http_error():
        llm("boom", prompt="p", model="m", provider_url=url)

    r = llm_http_error()
    step = r.steps["boom"]
    assert step.status == "failed"
    err = step.error or ""
    assert "500" in err
    assert "upstream model crashed: CUDA out of memory" in err
    assert len(err) < 2000  # the start of the body, not all of it
    assert step.output is None
    assert r.error == f"step 'boom' failed: {err}"


def test_unreachable_endpoint_fails_clearly():
    url = closed_port_url()

    @workflow
    def llm_unreachable():
        llm("gone", prompt="p", model="m", provider_url=url)

    r = llm_unreachable()
    step = r.steps["gone"]
    assert step.status == "failed"
    err = step.error or ""
    assert url.split("//")[1].split("/")[0] in err  # names host:port
    assert step.tries == 1


def test_unreachable_endpoint_is_retried():
    url = closed_port_url()

    @workflow
    def llm_unreachable_retry():
        llm("gone", prompt="p", model="m", provider_url=url, retries=2, retry_delay_seconds=0.01)

    r = llm_unreachable_retry()
    assert r.steps["gone"].status == "failed"
    assert r.steps["gone"].tries == 3


def test_timeout_fails_the_step(server: FakeChatServer):
    server.respond(content="too late", delay=1.5)
    url = server.url

    @workflow
    def llm_timeout():
        llm("slow", prompt="p", model="m", provider_url=url, timeout_seconds=0.3)

    r = llm_timeout()
    step = r.steps["slow"]
    assert step.status == "failed"
    assert "timed out" in (step.error or "")
    assert step.tries == 1
    assert len(server.requests) == 1


def test_timeout_is_retried_when_retries_are_set(server: FakeChatServer):
    server.respond(content="too late", delay=1.5)
    server.respond(content="in time")
    url = server.url

    @workflow
    def llm_timeout_retry():
        llm("slow", prompt="p", model="m", provider_url=url, timeout_seconds=0.5,
            retries=1, retry_delay_seconds=0.01)

    r = llm_timeout_retry()
    assert r.status == "succeeded", r.error
    assert r.steps["slow"].output == "in time"
    assert r.steps["slow"].tries == 2
    assert len(server.requests) == 2


def test_non_json_answer_fails_and_is_not_retried(server: FakeChatServer):
    server.respond(200, body="<html><body>Bad gateway page</body></html>")
    url = server.url

    @workflow
    def llm_not_json():
        llm("html", prompt="p", model="m", provider_url=url, retries=2, retry_delay_seconds=0.01)

    r = llm_not_json()
    step = r.steps["html"]
    assert step.status == "failed"
    err = step.error or ""
    assert "JSON" in err
    assert "Bad gateway page" in err
    assert len(server.requests) == 1


@pytest.mark.parametrize("answer", [
    {"error": "nope"},
    {"choices": []},
    {"choices": [{"message": {"role": "assistant"}}]},
    {"choices": [{"message": {"content": 42}}]},
    ["not", "an", "object"],
], ids=["no-choices", "empty-choices", "no-content", "content-not-text", "a-list"])
def test_wrongly_shaped_answer_fails_and_is_not_retried(server: FakeChatServer, answer: Any):
    server.respond(json=answer)
    url = server.url

    @workflow
    def llm_shape():
        llm("shape", prompt="p", model="m", provider_url=url, retries=2, retry_delay_seconds=0.01)

    r = llm_shape()
    step = r.steps["shape"]
    assert step.status == "failed"
    assert "choices[0].message.content" in (step.error or "")
    assert step.output is None
    assert len(server.requests) == 1


def test_empty_content_fails_with_reasoning_model_advice(server: FakeChatServer):
    server.respond(content="")
    url = server.url

    @workflow
    def llm_empty():
        llm("empty", prompt="p", model="m", provider_url=url, retries=2, retry_delay_seconds=0.01)

    r = llm_empty()
    step = r.steps["empty"]
    assert step.status == "failed"
    err = step.error or ""
    assert "max_tokens" in err and "timeout_seconds" in err
    assert "reasoning" in err
    assert len(server.requests) == 1


def test_null_content_fails_the_step(server: FakeChatServer):
    """A reasoning model out of tokens often answers ``"content": null``."""
    answer = completion(None)
    answer["choices"][0]["message"]["reasoning_content"] = "thinking..."
    answer["choices"][0]["finish_reason"] = "length"
    server.respond(json=answer)
    url = server.url

    @workflow
    def llm_null():
        llm("null", prompt="p", model="m", provider_url=url)

    r = llm_null()
    step = r.steps["null"]
    assert step.status == "failed"
    assert "content" in (step.error or "")
    assert step.output is None
    assert r.status == "failed"


# --- retries -------------------------------------------------------------------


def test_429_is_retried_honouring_retry_after(timed_server: TimedChatServer):
    timed_server.respond(429, headers={"Retry-After": "1"})
    url = timed_server.url

    @workflow
    def llm_429():
        llm("limited", prompt="p", model="m", provider_url=url, retries=1,
            retry_delay_seconds=0.01)

    r = llm_429()
    assert r.status == "succeeded", r.error
    assert r.steps["limited"].tries == 2
    assert r.steps["limited"].output == "timed reply"
    assert len(timed_server.requests) == 2
    assert timed_server.times[1] - timed_server.times[0] >= 0.9


def test_retry_after_as_an_http_date_is_honoured(timed_server: TimedChatServer):
    target = float(int(time.time() + 2))  # an HTTP date has whole seconds
    timed_server.respond(429, headers={"Retry-After": email.utils.formatdate(target, usegmt=True)})
    url = timed_server.url

    @workflow
    def llm_429_date():
        llm("limited", prompt="p", model="m", provider_url=url, retries=1,
            retry_delay_seconds=0.01)

    r = llm_429_date()
    assert r.status == "succeeded", r.error
    assert len(timed_server.requests) == 2
    assert timed_server.wall_times[1] >= target - 0.1  # not retried before the given date


@pytest.mark.parametrize("retries", [0, 1])
def test_malformed_retry_after_is_ignored(server: FakeChatServer, retries: int):
    """A garbage ``Retry-After`` must not replace the HTTP error or stop the retry."""
    server.respond(429, body="slow down please", headers={"Retry-After": "soon-ish"})
    url = server.url

    @workflow(name=f"llm_bad_retry_after_{retries}")
    def wf():
        llm("limited", prompt="p", model="m", provider_url=url, retries=retries,
            retry_delay_seconds=0.01)

    r = wf()
    step = r.steps["limited"]
    if retries:
        assert r.status == "succeeded", r.error
        assert step.tries == 2
        assert len(server.requests) == 2
    else:
        assert step.status == "failed"
        assert "429" in (step.error or "")
        assert "slow down please" in (step.error or "")


def test_429_without_retries_fails_with_the_status(server: FakeChatServer):
    server.respond(429, body='{"error": "rate limited, slow down"}', headers={"Retry-After": "0"})
    url = server.url

    @workflow
    def llm_429_once():
        llm("limited", prompt="p", model="m", provider_url=url)

    r = llm_429_once()
    assert r.steps["limited"].status == "failed"
    assert "429" in (r.steps["limited"].error or "")
    assert "rate limited" in (r.steps["limited"].error or "")
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [500, 502, 503])
def test_5xx_is_retried(server: FakeChatServer, status: int):
    server.respond(status, body="temporarily unavailable")
    url = server.url

    @workflow(name=f"llm_{status}_retry")
    def wf():
        llm("flaky", prompt="p", model="m", provider_url=url, retries=2, retry_delay_seconds=0.01)

    r = wf()
    assert r.status == "succeeded", r.error
    assert r.steps["flaky"].tries == 2
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body


def test_503_every_time_fails_after_all_retries(server: FakeChatServer):
    for _ in range(3):
        server.respond(503, body="still down")
    url = server.url

    @workflow
    def llm_503_always():
        llm("down", prompt="p", model="m", provider_url=url, retries=2, retry_delay_seconds=0.01)

    r = llm_503_always()
    assert r.steps["down"].status == "failed"
    assert r.steps["down"].tries == 3
    assert "503" in (r.steps["down"].error or "")
    assert len(server.requests) == 3


@pytest.mark.parametrize("status", [400, 401, 404])
def test_other_4xx_fail_at_once_without_retry(server: FakeChatServer, status: int):
    server.respond(status, body=f"client error {status} here")
    url = server.url

    @workflow(name=f"llm_{status}_no_retry")
    def wf():
        llm("bad", prompt="p", model="m", provider_url=url, retries=3, retry_delay_seconds=0.01)

    r = wf()
    step = r.steps["bad"]
    assert step.status == "failed"
    assert len(server.requests) == 1
    assert step.tries == 1
    assert str(status) in (step.error or "")
    assert f"client error {status} here" in (step.error or "")


# --- secrets -------------------------------------------------------------------


@pytest.mark.parametrize("how", ["literal", "secret", "env"])
def test_api_key_never_stored_returned_or_logged(
        server: FakeChatServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str], how: str):
    key = f"sk-{how}-Zq81xLmP0w"
    url = server.url
    monkeypatch.setenv("LLM_TEST_OTHER_HOST_KEY", key if how == "secret" else "unused")
    if how == "env":
        monkeypatch.setenv("LLM_API_KEY", key)
    api_key: Any = {"literal": key, "secret": secret("LLM_TEST_OTHER_HOST_KEY"), "env": None}[how]
    # the fake server echoes the key back in a 400 body for the second step
    server.respond(content=f"the key was {key}")
    server.respond(400, body=f'{{"error": "invalid api key {key}"}}')

    @workflow(name=f"llm_secret_{how}")
    def wf():
        llm("ok", prompt="p", model="m", provider_url=url, api_key=api_key)
        llm("rejected", prompt="p", model="m", provider_url=url, api_key=api_key)

    caplog.set_level(logging.DEBUG)
    r = wf()
    assert [auth(server, i) for i in range(len(server.requests))] == [f"Bearer {key}"] * 2

    ok, rejected = r.steps["ok"], r.steps["rejected"]
    assert ok.status == "succeeded"
    assert ok.output == "the key was ***"
    assert ok.inputs["api_key"] == "***"
    assert rejected.status == "failed"
    assert "invalid api key ***" in (rejected.error or "")
    assert key not in (rejected.error or "")
    assert key not in (r.error or "")

    assert key not in json.dumps(r.to_json_dict())
    assert key not in r.model_dump_json()
    assert key not in repr(r)

    stored = stored_step(tmp_path, r.run_id, "rejected")
    assert stored["inputs"]["api_key"] == "***"
    assert "invalid api key ***" in stored["error"]
    raw = db_bytes(tmp_path)
    assert raw, "the database file should exist"
    assert key.encode() not in raw

    assert caplog.records, "DEBUG logging captured nothing: the log check would be vacuous"
    assert key not in caplog.text
    assert all(key not in str(rec.args) for rec in caplog.records)
    out, err = capsys.readouterr()
    assert key not in out and key not in err


def test_missing_secret_fails_naming_the_variable_and_sends_nothing(
        server: FakeChatServer, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("LLM_TEST_UNSET_KEY", raising=False)
    url = server.url

    @workflow
    def llm_unset_secret():
        llm("s", prompt="p", model="m", provider_url=url, api_key=secret("LLM_TEST_UNSET_KEY"))

    r = llm_unset_secret()
    assert r.steps["s"].status == "failed"
    assert "LLM_TEST_UNSET_KEY" in (r.steps["s"].error or "")
    assert server.requests == []


def test_secret_is_read_when_the_step_starts(server: FakeChatServer,
                                             monkeypatch: pytest.MonkeyPatch):
    url = server.url
    monkeypatch.setenv("LLM_TEST_ROTATING_KEY", "old-key-0001")

    @workflow
    def llm_rotating():
        llm("s", prompt="p", model="m", provider_url=url, api_key=secret("LLM_TEST_ROTATING_KEY"))

    monkeypatch.setenv("LLM_TEST_ROTATING_KEY", "new-key-0001")
    r = llm_rotating()
    assert r.status == "succeeded", r.error
    assert auth(server) == "Bearer new-key-0001"


def test_url_credentials_are_redacted_in_stored_inputs(server: FakeChatServer, tmp_path: Path):
    host_port = server.url.split("//")[1].split("/")[0]
    url = f"http://alice:pw-Hunter2x@{host_port}/v1"

    @workflow
    def llm_userinfo():
        llm("u", prompt="p", model="m", provider_url=url)

    r = llm_userinfo()
    assert r.status == "succeeded", r.error
    assert len(server.requests) == 1
    assert r.steps["u"].inputs["url"] == f"http://***@{host_port}/v1/chat/completions"
    assert stored_step(tmp_path, r.run_id, "u")["inputs"]["url"] == \
        f"http://***@{host_port}/v1/chat/completions"
    assert "pw-Hunter2x" not in json.dumps(r.to_json_dict())
    assert b"pw-Hunter2x" not in db_bytes(tmp_path)


def test_api_key_is_sent_as_bearer_even_with_credentials_in_the_url(server: FakeChatServer):
    host_port = server.url.split("//")[1].split("/")[0]
    url = f"http://carol:pw-Other9@{host_port}/v1"

    @workflow
    def llm_userinfo_and_key():
        llm("u", prompt="p", model="m", provider_url=url, api_key="the-real-key")

    r = llm_userinfo_and_key()
    assert r.status == "succeeded", r.error
    assert auth(server) == "Bearer the-real-key"


def test_url_credentials_are_redacted_in_error_messages():
    port_url = closed_port_url()
    host_port = port_url.split("//")[1].split("/")[0]
    url = f"http://bob:pw-Secr3tz@{host_port}/v1"

    @workflow
    def llm_userinfo_error():
        llm("u", prompt="p", model="m", provider_url=url)

    r = llm_userinfo_error()
    assert r.steps["u"].status == "failed"
    assert "pw-Secr3tz" not in (r.steps["u"].error or "")
    assert "pw-Secr3tz" not in (r.error or "")


# --- stored inputs and placeholders ------------------------------------------------


def test_stored_inputs_carry_the_resolved_request(server: FakeChatServer, tmp_path: Path):
    url = server.url

    @workflow
    def llm_inputs():
        up = shell("up", command="echo upstream-output")
        llm("ask", prompt=f"Summarise {up} for {trigger.body}",
            system="Context: {trigger.body} / {up}", model="m-inputs", provider_url=url,
            max_tokens=77, temperature=0.2, api_key="k-inputs")

    r = llm_inputs(trigger={"body": "the trigger text"})
    assert r.status == "succeeded", r.error
    expected = {"prompt": "Summarise upstream-output for the trigger text",
                "system": "Context: the trigger text / upstream-output",
                "model": "m-inputs", "url": url + "/chat/completions", "max_tokens": 77}
    for inputs in (r.steps["ask"].inputs, stored_step(tmp_path, r.run_id, "ask")["inputs"]):
        for field, value in expected.items():
            assert inputs[field] == value, field
        assert inputs["api_key"] == "***"
    body = server.requests[0].json
    assert body["messages"] == [
        {"role": "system", "content": "Context: the trigger text / upstream-output"},
        {"role": "user", "content": "Summarise upstream-output for the trigger text"}]
    assert body["max_tokens"] == 77
    assert body["temperature"] == 0.2


def test_stored_inputs_without_system_or_max_tokens(server: FakeChatServer):
    url = server.url

    @workflow
    def llm_inputs_min():
        llm("ask", prompt="plain", model="m", provider_url=url)

    r = llm_inputs_min()
    assert r.status == "succeeded", r.error
    inputs = r.steps["ask"].inputs
    assert inputs["prompt"] == "plain"
    assert "system" not in inputs or inputs["system"] is None
    assert "max_tokens" not in inputs or inputs["max_tokens"] is None
    assert "api_key" not in inputs or inputs["api_key"] is None


def test_placeholder_values_are_inserted_once_and_unknown_braces_kept(server: FakeChatServer):
    url = server.url

    @workflow
    def llm_braces():
        up = shell("up", argv=["printf", "%s", "{{trigger.body}} and {{up}}"])
        llm("ask", prompt=f'JSON {{"a": {{"b": 1}}}} then {up} then {{{{up}}}}', model="m",
            provider_url=url)

    r = llm_braces(trigger={"body": "BODY"})
    assert r.status == "succeeded", r.error
    prompt = server.requests[0].json["messages"][0]["content"]
    # upstream output inserted as is (not rescanned); JSON left alone; {{up}} escapes
    assert prompt == 'JSON {"a": {"b": 1}} then {trigger.body} and {up} then {up}'


def test_model_url_and_key_are_never_substituted(server: FakeChatServer,
                                                 monkeypatch: pytest.MonkeyPatch):
    host_port = server.url.split("//")[1].split("/")[0]

    @workflow
    def llm_literal_fields():
        shell("up", command="echo x")
        llm("lit", prompt="p", model="org/{up}-{trigger.body}", api_key="key-{trigger.body}",
            provider_url=f"http://{host_port}/{{up}}/v1")

    r = llm_literal_fields(trigger={"body": "B"})
    assert r.status == "succeeded", r.error
    req = server.requests[0]
    assert req.json["model"] == "org/{up}-{trigger.body}"
    assert auth(server) == "Bearer key-{trigger.body}"
    assert unquote(req.path) == "/{up}/v1/chat/completions"
    assert r.steps["lit"].inputs["model"] == "org/{up}-{trigger.body}"


def test_missing_trigger_field_in_prompt_fails_the_step(server: FakeChatServer):
    url = server.url

    @workflow
    def llm_missing_path():
        llm("ask", prompt="file: {trigger.path}", model="m", provider_url=url)

    r = llm_missing_path()
    assert r.steps["ask"].status == "failed"
    assert "path" in (r.steps["ask"].error or "")
    assert server.requests == []


# --- definition errors -----------------------------------------------------------


def _define(body: Any, name: str = "llm_bad") -> None:
    workflow(name=name)(body)


@pytest.mark.parametrize("field", ["model", "provider_url"])
@pytest.mark.parametrize("lazy", ["node", "trigger"])
def test_node_or_trigger_as_model_or_url_is_a_definition_error(field: str, lazy: str):
    def wf():
        up = shell("up", command="echo x")
        value = up if lazy == "node" else trigger.body
        llm("ask", prompt="p", **{field: value})

    with pytest.raises(WorkflowDefinitionError) as info:
        _define(wf, "llm_lazy_field")
    msg = str(info.value)
    assert "llm_lazy_field" in msg and "'ask'" in msg and field in msg


@pytest.mark.parametrize("temperature", [-0.1, 2.5, "0.5", True, None])
def test_bad_temperature_is_a_definition_error(temperature: Any):
    def wf():
        llm("ask", prompt="p", model="m", temperature=temperature)

    with pytest.raises(WorkflowDefinitionError) as info:
        _define(wf, "llm_bad_temperature")
    msg = str(info.value)
    assert "temperature" in msg and "'ask'" in msg and "llm_bad_temperature" in msg


@pytest.mark.parametrize("max_tokens", [0, -5, 1.5, "100", True])
def test_bad_max_tokens_is_a_definition_error(max_tokens: Any):
    def wf():
        llm("ask", prompt="p", model="m", max_tokens=max_tokens)

    with pytest.raises(WorkflowDefinitionError) as info:
        _define(wf, "llm_bad_max_tokens")
    msg = str(info.value)
    assert "max_tokens" in msg and "'ask'" in msg and "llm_bad_max_tokens" in msg


@pytest.mark.parametrize("url", ["localhost:1234/v1", "ftp://host/v1", "127.0.0.1:1234/v1", ""])
def test_provider_url_without_http_scheme_is_a_definition_error(url: str):
    def wf():
        llm("ask", prompt="p", model="m", provider_url=url)

    with pytest.raises(WorkflowDefinitionError) as info:
        _define(wf, "llm_bad_url")
    msg = str(info.value)
    assert "provider_url" in msg and "http" in msg and "'ask'" in msg


@pytest.mark.parametrize("api_key", [123, ["k"], {"k": "v"}, b"bytes-key"])
def test_api_key_of_a_wrong_type_is_a_definition_error(api_key: Any):
    def wf():
        llm("ask", prompt="p", model="m", api_key=api_key)

    with pytest.raises(WorkflowDefinitionError) as info:
        _define(wf, "llm_bad_key")
    msg = str(info.value)
    assert "api_key" in msg and "'ask'" in msg


def test_model_of_a_wrong_type_is_a_definition_error():
    def wf():
        llm("ask", prompt="p", model=7)

    with pytest.raises(WorkflowDefinitionError, match="model"):
        _define(wf, "llm_bad_model")


def test_valid_llm_steps_define_without_contacting_anything(server: FakeChatServer):
    url = server.url

    @workflow
    def llm_defined_only():
        llm("a", prompt="p", model="m", provider_url=url, temperature=0, max_tokens=1)
        llm("b", prompt="p", provider_url="https://example.invalid/v1", temperature=2.0,
            api_key=secret("LLM_TEST_NOT_SET_YET"))

    assert llm_defined_only.graph.nodes == ("a", "b")
    assert server.requests == []


# --- parallel ------------------------------------------------------------------------


def test_parallel_llm_steps_each_reach_their_own_server(monkeypatch: pytest.MonkeyPatch):
    """SPEC §1 example: a fast model on LLM_BASE_URL, a careful one on its own host and key."""
    with QuickChatServer(reply="short") as fast_srv, QuickChatServer(reply="long") as careful_srv:
        fast_srv.respond(content="short", delay=0.4)
        careful_srv.respond(content="long", delay=0.4)
        careful_url = careful_srv.url

        @workflow
        def llm_parallel_digest():
            recall = shell("recall", command="echo memo A")
            with parallel():
                fast = llm("fast", prompt=f"Two sentences: {recall}", model="ministral-3b",
                           max_tokens=400, timeout_seconds=60)
                slow = llm("careful", prompt=f"Detailed breakdown: {recall}",
                           provider_url=careful_url, api_key=secret("OTHER_HOST_KEY"),
                           timeout_seconds=600, max_tokens=8000, retries=2)
            shell("save", command=f"echo {fast} {slow}")

        monkeypatch.setenv("LLM_BASE_URL", fast_srv.url)
        monkeypatch.setenv("LLM_MODEL", "careful-default-model")
        monkeypatch.setenv("OTHER_HOST_KEY", "other-host-key-991")
        r = llm_parallel_digest()

    assert r.status == "succeeded", r.error
    assert len(fast_srv.requests) == 1 and len(careful_srv.requests) == 1
    fast_body, careful_body = fast_srv.requests[0].json, careful_srv.requests[0].json
    assert fast_body["model"] == "ministral-3b"
    assert fast_body["max_tokens"] == 400
    assert fast_body["messages"] == [{"role": "user", "content": "Two sentences: memo A"}]
    assert "authorization" not in fast_srv.requests[0].headers
    assert careful_body["model"] == "careful-default-model"
    assert careful_body["max_tokens"] == 8000
    assert careful_body["messages"] == [{"role": "user", "content": "Detailed breakdown: memo A"}]
    assert careful_srv.requests[0].headers["authorization"] == "Bearer other-host-key-991"
    assert r.steps["fast"].output == "short" and r.steps["careful"].output == "long"
    assert r.steps["save"].output == "short long"
    # siblings ran side by side: each started before the other ended
    fast, careful = r.steps["fast"], r.steps["careful"]
    assert fast.started_at is not None and careful.started_at is not None
    assert fast.ended_at is not None and careful.ended_at is not None
    assert fast.started_at < careful.ended_at and careful.started_at < fast.ended_at
    assert r.workflow == "llm_parallel_digest"
    assert ("recall", "fast") in llm_parallel_digest.graph.edges
    assert ("fast", "careful") not in llm_parallel_digest.graph.edges
