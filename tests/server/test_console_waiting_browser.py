"""Approvals in a real headless Chromium (Debian's package, driven by Playwright) against a
real ``brain serve``: a run waits for a decision; on its page the prompt is text (a
``<script>`` in it never runs), a comment and Approve continue the run, which succeeds with
the decision stored ``by: "console"``; Reject skips the ``when`` branch; a decision someone
else took meanwhile is said plainly; a page of another origin cannot decide.

Run as ``python -m tests.server.screenshots``, it also saves the waiting run's page and the
workflows page's list of runs waiting for a decision (``CONSOLE_SCREENSHOTS``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import CHROMIUM, BrainServer, brain_argv, clean_env
from support import write_source

SHOTS = Path(os.environ["CONSOLE_SCREENSHOTS"]) if os.environ.get("CONSOLE_SCREENSHOTS") else None
TOKEN = "waiting-e2e-token-1357"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# A prompt that would set window.__pwned if the page ran it.
BODY = "<script>window.__pwned = true</script>\nline two"

if not os.path.exists(CHROMIUM):  # .ci/run installs it; a developer machine may lack it
    if os.environ.get("CI"):
        raise RuntimeError("CI must install Debian's chromium package for the console tests")
    pytest.skip("no chromium installed", allow_module_level=True)

from playwright.sync_api import expect  # noqa: E402  (after the skip: no chromium, no import)

FLOWS = """
    from brain import approval, shell, when, workflow

    @workflow
    def ship():
        \"\"\"Asks before it applies.\"\"\"
        plan = shell("plan", argv=["echo", "{trigger.body}"])
        ok = approval("go", prompt=f"Ship this?\\n\\n{plan}")
        with when(ok):
            shell("apply", argv=["echo", "applied"])
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    root = tmp_path_factory.mktemp("waiting-console")
    folder = root / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS)
    srv = BrainServer(brain_argv(), folder, root,
                      clean_env(root / "brain.db", {"BRAIN_API_TOKEN": TOKEN}))
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def context(browser: Any, server: BrainServer) -> Iterator[Any]:
    """A browser context logged in to the console (its cookie set by the login form)."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(server.url + "/")
    page.fill("#token", TOKEN)
    page.click("form.login button")
    page.wait_for_url(server.url + "/")
    page.close()
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def page(context: Any, server: BrainServer) -> Iterator[Any]:
    """A page of the logged-in context that fetches nothing from elsewhere."""
    page = context.new_page()
    page.set_default_timeout(20_000)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    yield page
    elsewhere = [u for u in requested if not u.startswith(server.url)]
    assert not elsewhere, f"the console fetched from elsewhere: {elsewhere}"


def shot(page: Any, name: str) -> None:
    """Save the page as ``NAME.png`` when screenshots are asked for (never in a test run)."""
    if SHOTS is not None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def api(server: BrainServer, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, server.url + path, headers=AUTH, timeout=30, **kwargs)


def run_json(server: BrainServer, run_id: str) -> dict[str, Any]:
    r = api(server, "GET", f"/api/runs/{run_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def until(server: BrainServer, run_id: str, status: str, seconds: float = 30.0) -> dict[str, Any]:
    """Poll (bounded) until the run has ``status``; its JSON."""
    deadline = time.monotonic() + seconds
    while True:
        run = run_json(server, run_id)
        if run["status"] == status:
            return run
        assert time.monotonic() < deadline, f"run {run_id} never got {status}: {run}"
        time.sleep(0.05)


def waiting_run(server: BrainServer, body: str = "the plan") -> str:
    r = api(server, "POST", "/api/workflows/ship/runs", json={"body": body})
    assert r.status_code == 202, r.text
    run_id = str(r.json()["run_id"])
    until(server, run_id, "waiting")
    return run_id


def step(run: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in run["steps"] if s["name"] == name)


def test_a_comment_and_approve_continue_the_run(page: Any, server: BrainServer) -> None:
    run_id = waiting_run(server, BODY)
    page.goto(server.url + "/")
    expect(page.locator(f'#decisions tr[data-run="{run_id}"] td.prompt')).to_contain_text(
        "Ship this? <script>window.__pwned = true</script> line two")
    shot(page, "workflows-waiting")
    page.locator(f'#decisions tr[data-run="{run_id}"] a[href$="#step-go"]').click()
    page.wait_for_url(f"{server.url}/runs/{run_id}#step-go")
    page.evaluate("window.__sameDocument = true")
    go = page.locator("#step-go")
    expect(go.locator("pre.prompt")).to_have_text(
        "Ship this?\n\n<script>window.__pwned = true</script>\nline two")
    assert page.evaluate("window.__pwned") is None, "the prompt's script ran"
    expect(page.locator("#run-status")).to_have_class("status st-waiting")
    expect(page.locator('svg .node.st-waiting[data-step="go"]')).to_have_count(1)
    expect(page.locator('#timeline .lane.st-waiting[data-lane="go"] rect')).to_have_count(1)
    shot(page, "run-waiting")
    go.locator("form.decide textarea").fill("Looks <b>right</b> to me")
    go.locator("form.decide button.approve").click()
    page.locator("#run-status.st-succeeded").wait_for(timeout=30_000)
    expect(go.locator(".decision .verdict")).to_have_text("approved")
    expect(go.locator(".decision .by")).to_have_text("console")
    expect(go.locator(".decision pre.comment")).to_have_text("Looks <b>right</b> to me")
    expect(page.locator("#step-apply")).to_have_attribute("data-status", "succeeded")
    expect(go.locator("form.decide")).to_have_count(0)
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    decision = step(run_json(server, run_id), "go")["decision"]
    assert (decision["approved"], decision["by"], decision["comment"]) == \
        (True, "console", "Looks <b>right</b> to me")


def test_reject_skips_the_when_branch(page: Any, server: BrainServer) -> None:
    run_id = waiting_run(server)
    page.goto(f"{server.url}/runs/{run_id}")
    page.locator("#step-go form.decide button.reject").click()
    page.locator("#run-status.st-succeeded").wait_for(timeout=30_000)
    expect(page.locator("#step-go .decision .verdict")).to_have_text("rejected")
    expect(page.locator("#step-apply")).to_have_attribute("data-status", "skipped")
    expect(page.locator('svg .node.st-skipped[data-step="apply"]')).to_have_count(1)
    run = run_json(server, run_id)
    assert step(run, "go")["output"] == "false" and step(run, "go")["decision"]["by"] == "console"


def test_a_decision_taken_elsewhere_meanwhile_is_said_plainly(
        page: Any, server: BrainServer) -> None:
    run_id = waiting_run(server)
    page.goto(f"{server.url}/runs/{run_id}")
    expect(page.locator("#step-go form.decide")).to_have_count(1)
    # This page hears of no change from now on, as if someone else decided a moment ago.
    page.route("**/api/events**", lambda route: route.abort())
    page.route(f"{server.url}/runs/{run_id}",
               lambda route: route.abort() if route.request.resource_type == "fetch"
               else route.continue_())
    elsewhere = httpx.post(f"{server.url}/runs/{run_id}/steps/go/decision", timeout=30,
                           data={"approve": "true", "comment": "first"},
                           headers={**AUTH, "Accept": "application/json"})
    assert elsewhere.status_code == 200, elsewhere.text
    page.locator("#step-go form.decide button.reject").click()
    said = page.locator("#step-go output.decide-result")
    expect(said).to_have_text(f"Not decided: step 'go' of run {run_id[:12]}: already decided")
    expect(said).to_have_class("decide-result failed")
    page.unroute_all()
    page.goto(f"{server.url}/runs/{run_id}")
    expect(page.locator("#step-go .decision .verdict")).to_have_text("approved")
    assert step(until(server, run_id, "succeeded"), "go")["decision"]["comment"] == "first"


def test_a_page_of_another_origin_cannot_decide(context: Any, server: BrainServer) -> None:
    run_id = waiting_run(server)
    # A page on another port of the same host: the console's cookie goes with its posts.
    other = f"http://127.0.0.1:{server.port + 1 if server.port < 65535 else 1}/"
    form = (f'<form method="post" action="{server.url}/runs/{run_id}/steps/go/decision">'
            f'<input name="approve" value="true"><input name="comment" value="csrf"></form>'
            f"<script>document.forms[0].submit()</script>")
    page = context.new_page()
    page.route(other, lambda route: route.fulfill(content_type="text/html", body=form))
    with page.expect_response(f"{server.url}/runs/{run_id}/steps/go/decision") as answer:
        page.goto(other)
    assert answer.value.status == 401
    sent = answer.value.request.all_headers()
    assert "brain_token=" in sent.get("cookie", ""), "the cookie went along: the origin refused it"
    assert sent.get("origin") == other.rstrip("/")
    run = run_json(server, run_id)
    assert run["status"] == "waiting" and step(run, "go")["decision"] is None
    api(server, "POST", f"/api/runs/{run_id}/cancel", json={})
    until(server, run_id, "cancelled")
