"""The console's cookie on /api: reads from anywhere it is sent, writes only from a page of
the server's own origin (a page elsewhere on the same site cannot use it to start runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient

from brain import shell, workflow
from brain.server import create_app

TOKEN = "console-token-4567"


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    monkeypatch.setenv("BRAIN_API_TOKEN", TOKEN)

    @workflow(name="hello")
    def hello() -> None:
        shell("hi", argv=["echo", "hi"])

    app = create_app([hello], execute=False, triggers=False)
    with TestClient(app, base_url="http://127.0.0.1:8000") as c:
        c.cookies.set("brain_token", TOKEN)
        yield c


def test_the_cookie_reads_the_api_and_writes_from_the_same_origin(client: Any) -> None:
    assert client.get("/api/runs").status_code == 200
    same = client.post("/api/workflows/hello/runs", json={},
                       headers={"Origin": "http://127.0.0.1:8000"})
    assert same.status_code == 202, same.text
    assert client.post("/api/workflows/hello/runs", json={}).status_code == 401  # no Origin
    client.cookies.clear()
    assert client.get("/api/runs").status_code == 401
    assert client.post("/api/workflows/hello/runs", json={},
                       headers={"Origin": "http://127.0.0.1:8000"}).status_code == 401


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(origin=st.one_of(
    st.sampled_from(["http://127.0.0.1:8001", "https://127.0.0.1:8000.evil", "null",
                     "http://localhost:8000", "http://127.0.0.1", "http://127.0.0.1:8000.",
                     "http://127.0.0.1:8000@evil", " http://127.0.0.1:8000"]),
    st.text(max_size=40)))
def test_a_write_from_any_other_origin_is_refused(client: Any, origin: str) -> None:
    if origin.rstrip("/").lower() in ("http://127.0.0.1:8000", "https://127.0.0.1:8000"):
        return
    try:
        r = client.post("/api/workflows/hello/runs", json={}, headers={"Origin": origin})
    except (ValueError, UnicodeEncodeError):  # not sendable as a header at all
        return
    assert r.status_code == 401, (origin, r.status_code, r.text)
    assert client.get("/api/runs").status_code == 200
