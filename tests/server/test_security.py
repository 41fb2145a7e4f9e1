"""Who may call the API (SPEC §7): the bearer token, and loopback-only rules without one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from litestar.testing import AsyncTestClient

from brain import shell, trigger, workflow
from brain.server import create_app
from brain.server.security import BadHostHeader, loopback_problem

TOKEN = "test-token-3f1c9a"


def make_guarded() -> Any:
    @workflow(name="guarded")
    def guarded() -> None:
        shell("echo", argv=["echo", trigger.body])

    return guarded


@asynccontextmanager
async def client_for(host: str = "127.0.0.1") -> AsyncIterator[Any]:
    """Executors off: runs stay queued, so cancelling one always answers 202."""
    app = create_app([make_guarded()], execute=False)
    async with AsyncTestClient(app, base_url=f"http://{host}") as client:
        yield client


async def every_api_call(client: Any, headers: dict[str, str], run_id: str) -> dict[str, httpx.Response]:
    """One request to each ``/api`` route (and the page) with ``headers``."""
    return {
        "GET /api/workflows": await client.get("/api/workflows", headers=headers),
        "GET /api/workflows/{name}": await client.get("/api/workflows/guarded", headers=headers),
        "POST /api/workflows/{name}/runs": await client.post("/api/workflows/guarded/runs",
                                                             json={"body": "x"}, headers=headers),
        "GET /api/runs": await client.get("/api/runs", headers=headers),
        "GET /api/runs?filters": await client.get("/api/runs", params={"workflow": "guarded",
                                                                       "limit": 5}, headers=headers),
        "GET /api/runs/{id}": await client.get(f"/api/runs/{run_id}", headers=headers),
        "POST /api/runs/{id}/cancel": await client.post(f"/api/runs/{run_id}/cancel", headers=headers),
        "GET / (page)": await client.get("/", headers=headers, follow_redirects=False),
    }


SUCCESS = {"POST /api/workflows/{name}/runs": 202, "POST /api/runs/{id}/cancel": 202}


async def queued_run(client: Any, headers: dict[str, str]) -> str:
    r = await client.post("/api/workflows/guarded/runs", json={"body": "seed"}, headers=headers)
    assert r.status_code == 202, r.text
    return str(r.json()["run_id"])


def assert_401(r: httpx.Response, what: str) -> None:
    if what.startswith("GET / (page)") and r.status_code == 303:  # the console asks to log in
        assert r.headers["location"].startswith("/login?next="), r.headers
        assert TOKEN not in r.text
        return
    assert r.status_code == 401, (what, r.status_code, r.text)
    data = r.json()
    assert data["status_code"] == 401
    assert data["detail"]
    assert TOKEN not in r.text
    assert "Traceback" not in r.text


@pytest.mark.parametrize("variable", ["BRAIN_API_TOKEN", "THE_BRAIN_API_TOKEN"])
async def test_token_required_on_every_api_route(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    async with client_for() as client:
        # Read per request, not frozen when the app was built.
        monkeypatch.setenv(variable, TOKEN)
        right = {"Authorization": f"Bearer {TOKEN}"}
        run_ids = [await queued_run(client, right) for _ in range(3)]

        for headers in ({}, {"Authorization": "Bearer wrong-token"},
                        {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": f"Bearer {TOKEN[:-1]}"},
                        {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"},
                        {"Authorization": "Bearer "}):
            answers = await every_api_call(client, headers, run_ids[0])
            for what, r in answers.items():
                assert_401(r, f"{what} with {headers}")

        # Nothing was created or cancelled by the refused calls.
        runs = (await client.get("/api/runs", headers=right)).json()
        assert sorted(r["run_id"] for r in runs) == sorted(run_ids)
        assert {r["status"] for r in runs} == {"queued"}

        answers = await every_api_call(client, right, run_ids[1])
        for what, r in answers.items():
            assert r.status_code == SUCCESS.get(what, 200), (what, r.status_code, r.text)
        assert answers["GET /api/runs/{id}"].json()["run_id"] == run_ids[1]
        assert (await client.get(f"/api/runs/{run_ids[1]}", headers=right)).json()["status"] == "cancelled"

        # /health stays open to probes.
        assert (await client.get("/health")).status_code == 200


async def test_token_lets_any_host_and_origin_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_API_TOKEN", TOKEN)
    async with client_for(host="brain.example.com") as client:
        right = {"Authorization": f"Bearer {TOKEN}", "Origin": "https://dashboard.example.com"}
        r = await client.get("/api/workflows", headers=right)
        assert r.status_code == 200, r.text
        assert [w["name"] for w in r.json()] == ["guarded"]
        assert_401(await client.get("/api/workflows"), "no token, public host")


async def test_without_token_loopback_hosts_work() -> None:
    async with client_for() as client:
        run_id = await queued_run(client, {})
        for host in ("localhost", "127.0.0.1", "localhost:8000", "127.0.0.1:8000", "[::1]:8000",
                     "LOCALHOST", "127.0.0.2"):
            answers = await every_api_call(client, {"Host": host}, run_id)
            for what, r in answers.items():
                expected = SUCCESS.get(what, 200)
                if what == "POST /api/runs/{id}/cancel" and host != "localhost":
                    expected = 409  # already cancelled by the first host's round
                assert r.status_code == expected, (host, what, r.status_code, r.text)


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "192.168.1.20:8000",
                                  "10.0.0.1", "localhost.evil.example", "127.0.0.1.nip.io",
                                  "0.0.0.0:8000"])
async def test_without_token_non_loopback_host_is_401(host: str) -> None:
    async with client_for() as client:
        run_id = await queued_run(client, {})
        answers = await every_api_call(client, {"Host": host}, run_id)
        for what, r in answers.items():
            assert_401(r, f"{what} with Host {host}")
        runs = (await client.get("/api/runs")).json()
        assert [(r["run_id"], r["status"]) for r in runs] == [(run_id, "queued")]


@pytest.mark.parametrize("origin", ["https://evil.example", "http://attacker.test:8000",
                                    "http://localhost.evil.example", "http://192.168.1.20",
                                    "null", "NULL", "file://", "chrome-extension://abc", "",
                                    "http://[::1",
                                    # another origin on this machine: another local web app
                                    "http://localhost:9999", "http://evil.localhost",
                                    "http://127.0.0.2:80", "https://localhost:8000"])
async def test_without_token_cross_site_origin_is_401(origin: str) -> None:
    async with client_for(host="localhost") as client:
        run_id = await queued_run(client, {})
        answers = await every_api_call(client, {"Origin": origin}, run_id)
        for what, r in answers.items():
            assert_401(r, f"{what} with Origin {origin}")
        # No CSRF: the refused POSTs created and cancelled nothing.
        runs = (await client.get("/api/runs")).json()
        assert [(r["run_id"], r["status"]) for r in runs] == [(run_id, "queued")]


async def test_without_token_only_the_servers_own_pages_may_act() -> None:
    """A page of this server acts; a page of another port or name on the same machine (another
    local web app) is another origin and cannot start runs with nobody's consent."""
    async with client_for(host="localhost") as client:
        r = await client.post("/api/workflows/guarded/runs", json={"body": "ok"},
                              headers={"Origin": "http://localhost"})
        assert r.status_code == 202, r.text
        for other in ("http://localhost:5173", "http://127.0.0.1:8000", "http://[::1]:3000"):
            r = await client.post("/api/workflows/guarded/runs", json={"body": "no"},
                                  headers={"Origin": other})
            assert_401(r, f"POST with Origin {other}")
        assert len((await client.get("/api/runs")).json()) == 1


@settings(max_examples=500, deadline=None)
@given(origin=st.text(max_size=40) | st.sampled_from(["null", "http://localhost", "https://127.0.0.1:1",
                                                     "http://[::1]:3000", "http://evil.example",
                                                     "http://127.0.0.1:8000", "http://127.0.0.1:8000/",
                                                     "HTTP://127.0.0.1:8000"])
       | st.builds(lambda scheme, host: f"{scheme}://{host}",
                   st.sampled_from(["http", "https", "file", "ftp", "null", ""]),
                   st.text(max_size=20)))
def test_without_token_only_the_servers_own_origin_passes(origin: str) -> None:
    """Any ``Origin`` that passes names this very server (http or https, the asked-for host
    and port); ``null``, other ports, other names and everything else are refused."""
    problem = loopback_problem("127.0.0.1:8000", origin)
    if problem is None:
        assert origin.rstrip("/").lower() in ("http://127.0.0.1:8000", "https://127.0.0.1:8000"), \
            origin
    assert loopback_problem("127.0.0.1:8000", None) is None


@settings(max_examples=500, deadline=None)
@given(host=st.text(max_size=40))
def test_any_host_header_is_judged_or_refused_as_malformed(host: str) -> None:
    """A Host header is loopback, not loopback, or a clear BadHostHeader: nothing else raised."""
    try:
        loopback_problem(host, None)
    except BadHostHeader as exc:
        assert "Host header" in str(exc)


@pytest.mark.parametrize("host", ["[::1", "[::1:8000", "[not-an-address]", "localhost:8000]"])
async def test_malformed_host_header_is_400_not_500(host: str) -> None:
    async with client_for() as client:
        for path in ("/api/workflows", "/"):
            r = await client.get(path, headers={"Host": host})
            assert r.status_code in (400, 401), (host, path, r.status_code, r.text)
            data = r.json()
            assert data["status_code"] == r.status_code
            assert "Traceback" not in r.text
            if r.status_code == 400:
                assert "Host header" in data["detail"], data
        r = await client.get("/api/workflows", headers={"Host": "[::1"})
        assert r.status_code == 400, r.text
