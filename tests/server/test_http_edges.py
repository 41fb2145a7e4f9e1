"""The HTTP edges of ``brain serve`` (SPEC §7) against a real subprocess on a free port:
JSON-only endpoints, malformed input answering 4xx (never 500), every 500 logged, the
OpenAPI page served offline, and the header read timeout."""

from __future__ import annotations

import json
import logging
import re
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar import get
from litestar.testing import AsyncTestClient
from serve_support import BrainServer, brain_argv, clean_env
from support import write_source

from brain import shell, workflow
from brain.server import create_app

WORKFLOWS = """
from brain import shell, trigger, workflow


@workflow
def echo():
    shell("echo", argv=["echo", trigger.body])


@workflow
def parked():
    shell("nap", command="sleep 60")
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    root = tmp_path_factory.mktemp("http")
    folder = root / "workflows"
    folder.mkdir()
    write_source(folder, "flows.py", WORKFLOWS)
    srv = BrainServer(brain_argv(), folder, root, clean_env(root / "brain.db"))
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def json_error(r: httpx.Response, status: int | tuple[int, ...]) -> str:
    """Check the JSON error shape (no stack trace); return the detail."""
    allowed = (status,) if isinstance(status, int) else status
    assert r.status_code in allowed, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.headers
    data = r.json()
    assert data["status_code"] == r.status_code
    assert isinstance(data["detail"], str) and data["detail"]
    assert "Traceback" not in r.text and 'File "' not in r.text
    return str(data["detail"])


def runs_of(server: BrainServer, wf: str) -> set[str]:
    return set(server.run_ids(wf))


# --- JSON endpoints take application/json only ---------------------------------------------------


@pytest.mark.parametrize(("content_type", "body"), [
    ("text/plain", b'{"body": "x"}'),
    ("text/plain;charset=UTF-8", b'{"body": "x"}'),
    ("application/x-www-form-urlencoded", b"body=x"),
    ("multipart/form-data; boundary=b",
     b'--b\r\nContent-Disposition: form-data; name="body"\r\n\r\nx\r\n--b--\r\n'),
    ("application/jsonx", b'{"body": "x"}'),
    (None, b'{"body": "x"}'),
])
def test_start_run_refuses_non_json_content_types(server: BrainServer, content_type: str | None,
                                                  body: bytes) -> None:
    """A browser can send these without a preflight; the API refuses them (415), creating nothing."""
    before = runs_of(server, "echo")
    headers = {"Content-Type": content_type} if content_type else {}
    request = server.client.build_request("POST", "/api/workflows/echo/runs", content=body,
                                          headers=headers)
    if content_type is None:
        request.headers.pop("Content-Type", None)
    r = server.client.send(request)
    detail = json_error(r, 415)
    assert "application/json" in detail
    assert runs_of(server, "echo") == before


def test_cancel_refuses_non_json_content_types(server: BrainServer) -> None:
    r = server.client.post("/api/workflows/parked/runs", json={})
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    for headers, body in (({"Content-Type": "text/plain"}, b""),
                          ({"Content-Type": "application/x-www-form-urlencoded"}, b"a=b"),
                          ({}, b"x")):
        request = server.client.build_request("POST", f"/api/runs/{run_id}/cancel", content=body,
                                              headers=headers)
        if not headers:
            request.headers.pop("Content-Type", None)
        json_error(server.client.send(request), 415)
    assert server.run(run_id)["status"] in ("queued", "running")
    ok = server.client.post(f"/api/runs/{run_id}/cancel")  # no body, no type: fine
    assert ok.status_code == 202, ok.text
    assert server.wait_run(run_id)["status"] == "cancelled"


def test_json_and_empty_bodies_start_runs(server: BrainServer) -> None:
    empty = server.client.post("/api/workflows/echo/runs")
    assert empty.status_code == 202, empty.text
    assert "content-type" not in {k.lower() for k in empty.request.headers}
    run = server.wait_run(empty.json()["run_id"])
    assert run["status"] == "succeeded" and run["trigger"]["body"] in (None, "")
    typed = server.client.post("/api/workflows/echo/runs", content=b'{"body": "hi"}',
                               headers={"Content-Type": "application/json; charset=utf-8"})
    assert typed.status_code == 202, typed.text
    assert server.wait_run(typed.json()["run_id"])["steps"][0]["output"] == "hi"


# --- malformed input: 400 with a useful detail, never 500 ----------------------------------------


def post_json(server: BrainServer, body: bytes, path: str = "/api/workflows/echo/runs") -> httpx.Response:
    return server.client.post(path, content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(("body", "words"), [
    (b"[" * 100_000 + b"]" * 100_000, "nested"),
    (b'{"body": ' + b"[" * 101 + b"]" * 101 + b"}", "nested"),
    (b'{"body": ' + b"9" * 5000 + b"}", "number"),
    (b'{"body": -' + b"1" * 5000 + b"}", "number"),
    (b'{"body": NaN}', "NaN"),
    (b'{"body": Infinity}', "Infinity"),
    (b'{"body": [-Infinity]}', "Infinity"),
    (b'{"body": 1e999}', "range"),
    (b'{"body": "\\ud800"}', "surrogate"),
    (b'{"body": "\xff"}', "UTF-8"),
    (b'{"body": ', "JSON"),
    (b'{"wait": "yes"}', "wait"),
])
def test_malformed_bodies_are_400_with_useful_detail(server: BrainServer, body: bytes,
                                                     words: str) -> None:
    before = runs_of(server, "echo")
    detail = json_error(post_json(server, body), 400)
    assert words.lower() in detail.lower(), detail
    assert runs_of(server, "echo") == before


def test_deep_json_on_cancel_is_400(server: BrainServer) -> None:
    json_error(post_json(server, b"[" * 100_000, "/api/runs/nope/cancel"), 400)


@pytest.mark.parametrize(("body", "words"), [
    (b'{"wait": "true"}', "wait must be true or false"),  # JSON true, not text that says it
    (b'{"wait": 1}', "wait must be true or false"),
    (b"null", "must be a JSON object"),
    (b'{"body": "x", "extra": 1}', "unknown fields ['extra']: use params, body and wait"),
])
def test_start_run_reads_its_fields_strictly(server: BrainServer, body: bytes, words: str) -> None:
    before = runs_of(server, "echo")
    assert words in json_error(post_json(server, body), 400)
    assert runs_of(server, "echo") == before


def test_cancel_and_retry_take_any_well_formed_body(server: BrainServer) -> None:
    """Cancel defines no fields: a well-formed body is ignored (the run is looked up: 404).
    Retry's body has one field, ``from`` (``brain retry --from``): an empty body gives none,
    and an unknown field or a body that is not an object is a 400 saying so, as for every
    typed body."""
    for body in (b'{"reason": "x"}', b"[1, 2]", b"null", b"  "):
        json_error(post_json(server, body, "/api/runs/0123abcd/cancel"), 404)
    for body in (b"  ", b"{}"):
        json_error(post_json(server, body, "/api/runs/0123abcd/retry"), 404)
    for body in (b"[1, 2]", b"null"):
        assert "object" in json_error(post_json(server, body, "/api/runs/0123abcd/retry"), 400)
    refused = json_error(post_json(server, b'{"reason": "x"}', "/api/runs/0123abcd/retry"), 400)
    assert "reason" in refused and "from" in refused, refused


def test_malformed_ipv6_host_is_400(server: BrainServer) -> None:
    """A raw request (clients refuse to send such a Host) for the API and the page."""
    for target in ("/api/workflows", "/"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(f"GET {target} HTTP/1.1\r\nHost: [::1\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), answer[:300]
        data = json.loads(body)
        assert data["status_code"] == 400 and "Host header" in data["detail"], data


JSON_PIECES = ["{", "}", "[", "]", ",", ":", '"', "\\", "\\u", "d800", "NaN", "Infinity", "-",
               "1e999", "9" * 120, "null", "true", " ", '"body"', '"wait"', "0", "\x00", "é"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=300)
       | st.lists(st.sampled_from(JSON_PIECES), max_size=40).map(lambda p: "".join(p).encode())
       | st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                      max_leaves=20).map(lambda v: json.dumps(v).encode()),
       path=st.sampled_from(["/api/workflows/echo/runs", "/api/runs/not-a-run/cancel"]))
def test_random_bodies_never_answer_500(server: BrainServer, body: bytes, path: str) -> None:
    r = post_json(server, body, path)
    assert r.status_code < 500, (body[:200], r.status_code, r.text)
    if r.status_code >= 400:
        json_error(r, r.status_code)


# --- every 500 is logged, the client sees only the JSON shape ------------------------------------


async def test_internal_errors_are_logged_with_traceback_not_shown(caplog: pytest.LogCaptureFixture) -> None:
    @workflow(name="quiet")
    def quiet() -> None:
        shell("ok", argv=["echo", "ok"])

    @get("/boom", sync_to_thread=False)
    def boom() -> None:
        raise RuntimeError("secret internals 7f3a")

    app = create_app([quiet], execute=False, triggers=False)
    app.register(boom)
    caplog.set_level(logging.ERROR, logger="brain.server")
    async with AsyncTestClient(app, base_url="http://127.0.0.1") as client:
        r = await client.get("/boom")
    assert r.status_code == 500
    assert r.json() == {"status_code": 500, "detail": "Internal Server Error"}
    assert "7f3a" not in r.text and "Traceback" not in r.text
    records = [rec for rec in caplog.records if rec.name == "brain.server" and rec.exc_info]
    assert records, caplog.text
    assert "GET /boom" in records[0].getMessage()
    assert "secret internals 7f3a" in caplog.text and "Traceback" in caplog.text


# --- /schema works offline ------------------------------------------------------------------------


def test_schema_page_loads_every_asset_from_the_app(server: BrainServer) -> None:
    page = server.client.get("/schema", follow_redirects=True)
    assert page.status_code == 200, page.text
    assert "text/html" in page.headers["content-type"]
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", page.text)
    assert any(u.endswith(".js") for u in urls) and any(u.endswith(".css") for u in urls), urls
    for url in urls:
        full = urljoin(str(page.url), url)
        assert urlsplit(full).netloc == urlsplit(server.url).netloc, f"{url} is not served by the app"
        asset = server.client.get(full)
        assert asset.status_code == 200, (url, asset.status_code)
        assert asset.content, url
    assert server.client.get("/schema/openapi.json").json()["info"]["title"] == "The Brain"


# --- slow clients ----------------------------------------------------------------------------------


def _half_sent(port: int, sent: bytes, limit: float) -> socket.socket:
    """A connection to ``port`` that sent ``sent`` and no more; its reads wait up to ``limit``."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(limit)
    sock.sendall(sent)
    return sock


def _still_open(sock: socket.socket) -> bool:
    """Whether the server keeps ``sock`` open for a moment more (nothing read, not closed)."""
    limit = sock.gettimeout()
    sock.settimeout(0.5)
    try:
        return sock.recv(1024) != b""
    except TimeoutError:
        return True
    except ConnectionResetError:
        return False
    finally:
        sock.settimeout(limit)


def _read_to_close(sock: socket.socket, what: str) -> bytes:
    """Everything the server sends until it closes ``sock``; the test fails if it never does
    (within the socket's timeout, far past the server's own)."""
    data = b""
    try:
        while chunk := sock.recv(1024):
            data += chunk
    except TimeoutError:
        pytest.fail(f"the server kept {what} open past its timeout")
    except ConnectionResetError:
        pass
    return data


def test_half_sent_heads_and_trickling_bodies_are_closed_by_their_timeouts(
        server: BrainServer) -> None:
    """A head that never ends is closed after the header timeout; headers in time, then a body
    that trickles, after the body timeout: slow clients cannot hold the server's connections
    (and the client's early end is no 500). Both wait at once, so the test waits for the longer
    timeout only. Neither is closed at once: the timeout closes them, not the bytes sent."""
    from brain.cli.serve import BODY_TIMEOUT_SECONDS, HEADER_TIMEOUT_SECONDS

    # Far past the timeouts: only a server that never closes the connections fails here.
    head = _half_sent(server.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                      HEADER_TIMEOUT_SECONDS + 60)
    body = _half_sent(server.port, b"POST /hooks/nothing HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: text/plain\r\nContent-Length: 1000000\r\n\r\nab",
                      BODY_TIMEOUT_SECONDS + 60)
    with head, body:
        assert _still_open(head) and _still_open(body), "closed before any timeout"
        assert _read_to_close(head, "a half-sent request head") == b""
        answer = _read_to_close(body, "a trickling body")
    assert b" 500 " not in answer.split(b"\r\n", 1)[0], answer
    assert server.client.get("/health").status_code == 200


def test_server_log_has_no_traceback(server: BrainServer) -> None:
    """After everything above (the module's last test), nothing logged a traceback."""
    output: Any = server.output()
    assert "Traceback" not in output, output[-3000:]
