"""The console in a real headless Chromium (Debian's package, driven by Playwright): log in,
start a run, watch it live, read a failure, cancel, retry; nothing fetched from elsewhere.

The tests write nothing outside their temporary folders: the screenshots in docs/console/
(shown by docs/console.md) are taken by the same tests run as ``python -m tests.server.screenshots``,
which names the folder in ``CONSOLE_SCREENSHOTS``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_support import BrainServer, brain_argv, clean_env
from support import write_source

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Where shot() saves each page: only when the screenshots command asks (tests.server.screenshots).
SHOTS = Path(os.environ["CONSOLE_SCREENSHOTS"]) if os.environ.get("CONSOLE_SCREENSHOTS") else None
TOKEN = "console-e2e-token-9876"

if not os.path.exists(CHROMIUM):  # .ci/run installs it; a developer machine may lack it
    if os.environ.get("CI"):
        raise RuntimeError("CI must install Debian's chromium package for the console tests")
    pytest.skip("no chromium installed", allow_module_level=True)

FLOWS = """
    from brain import for_each, shell, step, when, workflow

    @workflow
    def greet():
        \"\"\"Greets whoever the body names, slowly enough to watch.\"\"\"
        who = shell("who", argv=["echo", "{trigger.body}"])
        shell("wait", command="sleep 1.5; echo waited")
        shell("hello", argv=["echo", f"hello {who}"])

    @workflow
    def slow():
        \"\"\"Sleeps for a minute (to be cancelled).\"\"\"
        shell("nap", command="sleep 60", timeout_seconds=120)
        shell("after", argv=["echo", "after"])

    @workflow
    def flaky():
        \"\"\"Fails until the marker file exists.\"\"\"
        shell("count", command="echo x >> MARKS/count.txt; echo counted")
        shell("check", command="echo 'checking the marker' >&2; test -e MARKS/fixed && echo fixed")

    @step
    def yes() -> bool:
        return True

    @workflow
    def fifty():
        \"\"\"Fifty steps, a condition and a fan-out, for the run page's weight.\"\"\"
        node = shell("s0", argv=["echo", "0"])
        for i in range(1, 47):
            node = shell(f"s{i}", argv=["echo", f"{node}-{i}"])
        flag = yes()
        with when(flag), for_each(["a", "b", "c"]) as x:
            shell("each", argv=["echo", f"{x}"])
        shell("never", argv=["echo", "no"], when=~flag)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    root = tmp_path_factory.mktemp("console")
    marks = root / "marks"
    marks.mkdir()
    folder = root / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS.replace("MARKS", str(marks)))
    env = clean_env(root / "brain.db", {"BRAIN_API_TOKEN": TOKEN})
    srv = BrainServer(brain_argv(), folder, root, env)
    srv.marks = marks  # type: ignore[attr-defined]
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, server: BrainServer) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.requested = requested
    try:
        yield page
    finally:
        context.close()
    elsewhere = [u for u in requested if not u.startswith(server.url)]
    assert not elsewhere, f"the console fetched from elsewhere: {elsewhere}"


def log_in(page: Any, server: BrainServer, then: str = "/") -> None:
    page.goto(server.url + then)
    assert "/login" in page.url
    page.fill("#token", TOKEN)
    page.click("form.login button")
    page.wait_for_url(server.url + then)


def shot(page: Any, name: str) -> None:
    """Save the page as ``NAME.png`` when screenshots are asked for (never in a test run)."""
    if SHOTS is not None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_a_wrong_token_is_refused_and_the_right_one_logs_in(page: Any,
                                                              server: BrainServer) -> None:
    page.goto(server.url + "/runs")
    page.fill("#token", "not-the-token")
    page.click("form.login button")
    assert page.locator(".notice.failed").is_visible()
    shot(page, "login")
    page.fill("#token", TOKEN)
    page.click("form.login button")
    page.wait_for_url(server.url + "/runs")


def test_run_now_with_a_body_then_watch_it_finish_without_reloading(
        page: Any, server: BrainServer) -> None:
    log_in(page, server)
    shot(page, "workflows")
    card = page.locator("#wf-greet")
    card.locator("textarea").fill("Ada")
    card.locator("button[type=submit]").click()
    page.wait_for_url(f"{server.url}/runs/*")
    page.evaluate("window.__sameDocument = true")
    page.locator('svg .node.st-running[data-step="wait"]').wait_for()
    shot(page, "run-live")
    page.locator("#run-status.st-succeeded").wait_for(timeout=30_000)
    page.locator('svg .node.st-succeeded[data-step="hello"]').wait_for()
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    hello = page.locator("#step-hello")
    hello.locator("summary").click()
    assert hello.locator('[data-field="output"] pre').inner_text() == "hello Ada"
    shot(page, "run")
    page.goto(server.url + "/runs?workflow=greet")
    assert page.locator("table.runs tbody tr").count() == 1
    assert page.locator("table.runs .status").first.inner_text() == "succeeded"
    shot(page, "runs")


def test_a_failed_step_shows_its_error_and_stderr_then_retry_runs_only_it(
        page: Any, server: BrainServer) -> None:
    marks: Path = server.marks  # type: ignore[attr-defined]
    log_in(page, server)
    page.locator("#wf-flaky button[type=submit]").click()
    page.wait_for_url(f"{server.url}/runs/*")
    page.locator("#run-status.st-failed").wait_for(timeout=30_000)
    failed_url = page.url
    check = page.locator("#step-check")
    assert check.get_attribute("open") is not None, "a failed step opens by itself"
    assert "exit" in check.locator('[data-field="error"] pre').inner_text()
    assert "checking the marker" in check.locator('[data-field="stderr"] pre').inner_text()
    shot(page, "run-failed")
    (marks / "fixed").touch()
    page.locator('[data-action="retry"]').click()
    page.wait_for_url(lambda url: url.startswith(f"{server.url}/runs/") and url != failed_url)
    page.locator("#run-status.st-succeeded").wait_for(timeout=30_000)
    assert "retry of" in page.locator("main").inner_text()
    assert (marks / "count.txt").read_text().splitlines() == ["x"], "count ran again"


def test_cancel_a_long_run(page: Any, server: BrainServer) -> None:
    log_in(page, server)
    page.locator("#wf-slow button[type=submit]").click()
    page.wait_for_url(f"{server.url}/runs/*")
    page.locator('svg .node.st-running[data-step="nap"]').wait_for()
    page.locator('[data-action="cancel"]').click()
    page.locator("#run-status.st-cancelled").wait_for(timeout=30_000)
    assert page.locator('[data-action="cancel"]').is_hidden()
    assert page.locator('[data-action="retry"]').is_visible()


FIRST_RENDER_MS = (
    "performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint')"
    "?.startTime ?? performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")


def test_the_page_of_a_fifty_step_run_is_light_and_quick(page: Any, server: BrainServer) -> None:
    import httpx

    r = httpx.post(f"{server.url}/api/workflows/fifty/runs", json={"wait": True},
                   headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
    log_in(page, server)
    # The baseline: a page of few lines (the runs list), its first render in this browser on
    # this machine now, so a busy machine slows both alike.
    page.goto(f"{server.url}/runs?workflow=fifty")
    page.wait_for_load_state("load")
    baseline_ms = page.evaluate(FIRST_RENDER_MS)
    sizes: list[int] = []
    page.on("response", lambda response: sizes.append(len(response.body())))
    page.goto(f"{server.url}/runs/{r.json()['run_id']}")
    page.wait_for_load_state("load")
    steps = page.locator(".step").count()
    assert steps >= 50
    render_ms = page.evaluate(FIRST_RENDER_MS)
    total = sum(sizes)
    print(f"run page of a {steps}-step run: {total / 1024:.1f} KB, first render {render_ms:.0f} ms "
          f"(the runs list: {baseline_ms:.0f} ms)")
    assert total < 200 * 1024, total
    # Quick: about as fast to show as a short page (300 ms is quick enough whatever the baseline).
    assert render_ms < max(300, 4 * baseline_ms), (render_ms, baseline_ms)
    assert page.locator('svg .node.st-skipped[data-step="never"]').count() == 1
    assert (page.locator("svg .group text").text_content() or "").startswith("for_each")
    shot(page, "run-fifty")
    page.set_viewport_size({"width": 390, "height": 844})
    page.emulate_media(color_scheme="dark")
    shot(page, "run-phone-dark")
