"""``brain.testing.FakeChatServer`` itself: a real loopback HTTP server with scripted answers."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from brain.testing import FakeChatServer, completion


def post(url: str, payload: Any, headers: dict[str, str] | None = None,
         timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """POST JSON with the standard library; return status, headers (lower-case) and body."""
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def test_url_is_a_loopback_v1_base():
    with FakeChatServer() as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert server.url.endswith("/v1")


def test_records_each_request_and_answers_the_default_reply():
    with FakeChatServer(reply="hello there") as server:
        status, _, body = post(server.url + "/chat/completions", {"model": "m", "messages": []},
                               headers={"Authorization": "Bearer k", "X-Extra": "1"})
    assert status == 200
    assert json.loads(body)["choices"][0]["message"]["content"] == "hello there"
    assert len(server.requests) == 1
    req = server.requests[0]
    assert req.method == "POST"
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer k"
    assert req.headers["x-extra"] == "1"
    assert req.json == {"model": "m", "messages": []}


def test_scripted_answers_come_in_order_then_the_default():
    with FakeChatServer(reply="default") as server:
        server.respond(503, headers={"Retry-After": "7"})
        server.respond(content="second")
        server.respond(json={"anything": [1, 2]})
        server.respond(body="not json at all")
        url = server.url + "/chat/completions"
        answers = [post(url, {"n": i}) for i in range(5)]

    status, headers, body = answers[0]
    assert status == 503
    assert headers["retry-after"] == "7"
    assert b"error" in body  # an error status without a body still gets a JSON error body
    assert answers[1][0] == 200
    assert json.loads(answers[1][2]) == completion("second")
    assert json.loads(answers[2][2]) == {"anything": [1, 2]}
    assert answers[3][2] == b"not json at all"
    assert json.loads(answers[4][2])["choices"][0]["message"]["content"] == "default"
    assert [r.json["n"] for r in server.requests] == [0, 1, 2, 3, 4]


def test_completion_with_null_content():
    assert completion(None)["choices"][0]["message"]["content"] is None


def test_delay_holds_the_answer_back():
    with FakeChatServer() as server:
        server.respond(content="late", delay=0.4)
        t0 = time.monotonic()
        status, _, body = post(server.url + "/chat/completions", {})
        elapsed = time.monotonic() - t0
    assert status == 200
    assert json.loads(body)["choices"][0]["message"]["content"] == "late"
    assert elapsed >= 0.35


def test_stop_closes_the_port():
    server = FakeChatServer().start()
    url = server.url + "/chat/completions"
    assert post(url, {})[0] == 200
    server.stop()
    with pytest.raises(urllib.error.URLError):
        post(url, {}, timeout=2)
