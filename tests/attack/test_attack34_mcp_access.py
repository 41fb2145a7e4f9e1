"""Attack on SPEC §23/§7 (access): ``/mcp`` on ``brain serve`` follows the rule of ``/api``.
With ``BRAIN_API_TOKEN`` set, a request without the right bearer is refused (401) and
starts nothing; without a token, only a loopback ``Host`` with no foreign ``Origin`` is
served (DNS rebinding, CSRF). Raw HTTP on 127.0.0.1, header variants generated."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.append(str(Path(__file__).resolve().parent))
from attack34_support import LEGACY, answer_of, call, rpc_body, run_count
from serve_support import AppServer
from support import serving

TOKEN = "atk34-token-Zq9x7Lw2Vb"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

FLOWS = '''
from brain import shell, workflow

@workflow(mcp=True)
def touch(tag: str = "x") -> str:
    """Start a run."""
    return shell("t", argv=["echo", "touched"])
'''


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    folder = tmp_path_factory.mktemp("atk34-access")
    (folder / "flows.py").write_text(FLOWS)
    with serving(lambda: AppServer(folder / "flows.py"),
                 folder / "brain.db", BRAIN_MCP_WAIT_SECONDS="5", BRAIN_API_TOKEN=TOKEN) as app:
        yield app


@pytest.fixture(autouse=True)
def _settings(served: AppServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_DATABASE_URL", served.db_url)  # type: ignore[attr-defined]
    monkeypatch.setenv("BRAIN_API_TOKEN", TOKEN)


def _raw(served: AppServer, method: str, path: str, headers: list[tuple[str, str]],
         body: str | None = None) -> httpx.Response:
    """A request with exactly these headers (repeats kept, in order)."""
    with httpx.Client(base_url=served.url, timeout=30) as client:
        request = client.build_request(method, path, content=body)
        request.headers = httpx.Headers(
            [("host", request.headers["host"]), *headers,
             *([("content-length", str(len(body.encode())))] if body is not None else [])])
        return client.send(request)


def test_the_right_bearer_is_served(served: AppServer) -> None:
    assert served.client is not None
    answer = call(served.client, "touch", {}, headers=AUTH)
    assert answer.status_code == 200 and "result" in answer_of(answer.text)


def _wrong_authorizations() -> st.SearchStrategy[list[str]]:
    wrong_token = st.one_of(
        st.just(TOKEN.upper()), st.just(TOKEN[:-1]), st.just(TOKEN + "x"), st.just(" "),
        st.just(TOKEN[1:]), st.just(""), st.just(TOKEN.encode().hex()),
        st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=30))
    header = st.one_of(
        st.builds(lambda t: f"Bearer {t}", wrong_token),
        st.builds(lambda t: f"Basic {t}", st.just(TOKEN)),
        st.builds(lambda t: f"Token {t}", st.just(TOKEN)),
        st.builds(lambda t: f"Bearer{t}", st.just(TOKEN)),
        st.builds(lambda t: f"{t}", st.just(TOKEN)),
        st.builds(lambda t: f"Bearer {t},{t}", st.just(TOKEN)),
        st.builds(lambda t: f"Bearer {t} {t}", st.just(TOKEN)),
        st.builds(lambda t: f"Bearer \"{t}\"", st.just(TOKEN)))
    return st.lists(header.filter(lambda h: h.strip() not in (f"Bearer {TOKEN}",)),
                    max_size=3)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(authorizations=_wrong_authorizations(),
       method=st.sampled_from(["POST", "GET", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"]),
       path=st.sampled_from(["/mcp", "/mcp/", "/mcp/x", "/mcp?token=" + TOKEN,
                             "/mcp?authorization=Bearer%20" + TOKEN]),
       cookie=st.booleans())
def test_without_the_right_bearer_every_request_is_refused_and_starts_nothing(
        served: AppServer, authorizations: list[str], method: str, path: str,
        cookie: bool) -> None:
    assert served.client is not None
    before = run_count(served.client, AUTH)
    headers = [("authorization", a.strip()) for a in authorizations]
    headers += [("accept", LEGACY["Accept"]), ("content-type", "application/json"),
                ("mcp-protocol-version", "2025-11-25")]
    if cookie:
        headers.append(("cookie", f"brain_token={TOKEN}"))
    body = rpc_body("tools/call", {"name": "touch", "arguments": {}}) \
        if method in ("POST", "PUT", "PATCH") else None
    answer = _raw(served, method, path, headers, body)
    assert answer.status_code == 401, (method, path, authorizations, answer.status_code,
                                       answer.text[:300])
    assert TOKEN not in answer.text
    assert run_count(served.client, AUTH) == before


@pytest.mark.parametrize("order", ["right-first", "wrong-first"])
def test_two_authorization_headers_start_nothing_unless_the_first_is_right(
        served: AppServer, order: str) -> None:
    """Which of two headers counts is a choice; a wrong first one with a right second one
    must not be taken as 'maybe' (no mixing), and nothing leaks."""
    assert served.client is not None
    before = run_count(served.client, AUTH)
    pair = [f"Bearer {TOKEN}", "Bearer nope-nope-nope"]
    if order == "wrong-first":
        pair.reverse()
    headers = [("authorization", a) for a in pair] + [
        ("accept", LEGACY["Accept"]), ("content-type", "application/json"),
        ("mcp-protocol-version", "2025-11-25")]
    answer = _raw(served, "POST", "/mcp", headers,
                  rpc_body("tools/call", {"name": "touch", "arguments": {}}))
    assert answer.status_code in (200, 401)
    assert run_count(served.client, AUTH) == before + (answer.status_code == 200)


@pytest.mark.parametrize("body", [
    "{", "[]", "null", '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + "[" * 100000,
    '[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"touch"}},'
    '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"touch"}}]',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"touch","arguments":'
    '{"tag":"' + "a" * 5_000_000 + '"}}}'])
def test_malformed_or_huge_bodies_without_the_bearer_are_401(served: AppServer, body: str) -> None:
    assert served.client is not None
    before = run_count(served.client, AUTH)
    answer = served.client.post("/mcp", content=body, headers=LEGACY)
    assert answer.status_code == 401
    assert run_count(served.client, AUTH) == before


@pytest.mark.parametrize("body", [
    "{", "[]", "null", '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + "[" * 100000,
    '[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"touch"}},'
    '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"touch"}}]',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"touch","arguments":'
    '{"tag":' + "[" * 3000 + "]" * 3000 + '}}}',
    '{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"touch"}}',
    '{"jsonrpc":"2.0","id":{"a":1},"method":"tools/call","params":{"name":"touch"}}',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"touch","arguments":[]}}',
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["touch"]}}'])
def test_malformed_json_rpc_with_the_bearer_is_a_client_error_and_starts_nothing(
        served: AppServer, body: str) -> None:
    assert served.client is not None
    before = run_count(served.client, AUTH)
    answer = served.client.post("/mcp", content=body, headers={**LEGACY, **AUTH})
    assert answer.status_code < 500, answer.text[:300]
    assert "Traceback" not in answer.text
    if answer.status_code == 200:
        assert "error" in answer_of(answer.text)
    assert run_count(served.client, AUTH) == before


# --- no token: loopback only ---------------------------------------------------------------


@pytest.fixture
def no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BRAIN_API_TOKEN", raising=False)


@pytest.mark.usefixtures("no_token")
@pytest.mark.parametrize(("host", "origin"), [
    ("evil.example", None), ("evil.example:80", None), ("127.0.0.1.nip.io", None),
    ("localhost.", None), ("127.1", None), ("0x7f000001", None), ("0.0.0.0", None),
    ("[::ffff:7f00:1]", None), ("localhost@evil.example", None),
    ("evil.example#@localhost", None), ("localhost:80 evil", None),
    ("LOCALHOST", "http://evil.example"), ("127.0.0.1", "null"),
    ("127.0.0.1", "http://127.0.0.1.evil.example"), ("127.0.0.1", "http://localhost"),
    ("127.0.0.1:1", "http://127.0.0.1:2"), ("localhost", "file://"),
    ("localhost", "http://localhost@evil.example")])
def test_without_a_token_foreign_hosts_and_origins_are_refused(
        served: AppServer, host: str, origin: str | None) -> None:
    assert served.client is not None
    before = run_count(served.client)
    headers = [("host", host), ("accept", LEGACY["Accept"]),
               ("content-type", "application/json"), ("mcp-protocol-version", "2025-11-25")]
    if origin is not None:
        headers.append(("origin", origin))
    body = rpc_body("tools/call", {"name": "touch", "arguments": {}})
    with httpx.Client(base_url=served.url, timeout=30) as client:
        request = client.build_request("POST", "/mcp", content=body)
        request.headers = httpx.Headers([*headers, ("content-length", str(len(body)))])
        answer = client.send(request)
    assert answer.status_code in (400, 401, 403), (host, origin, answer.status_code)
    assert run_count(served.client) == before


@pytest.mark.usefixtures("no_token")
def test_without_a_token_a_loopback_client_of_this_origin_is_served(served: AppServer) -> None:
    assert served.client is not None
    host = served.url.removeprefix("http://")
    answer = call(served.client, "touch", {}, headers={"Origin": f"http://{host}"})
    assert answer.status_code == 200 and "result" in answer_of(answer.text)
