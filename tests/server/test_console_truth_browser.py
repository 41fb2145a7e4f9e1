"""The run page keeps itself true while open (SPEC §20), in a real headless Chromium
(Debian's package, driven by Playwright) against a real ``brain serve``:

- the notice "Approved: the run goes on." goes once the step has gone on; the run's end
  shows, not a stale notice;
- a step's log panel says "ended" only once the page shows the step ended, even when the
  log's end reaches the panel before the page hears of it (a slow or refused redraw);
- a retry's timeline draws the steps it kept from the run it retries apart ("kept from
  run X", no bar), and its axis spans the retry's own work.

Run with ``CONSOLE_SCREENSHOTS=DIR``, it saves each page state there, wide and 390 px.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from serve_support import CHROMIUM, BrainServer, brain_argv, clean_env, step_of
from support import write_source

from brain.server.console.timeline import ticks

SHOTS = Path(os.environ["CONSOLE_SCREENSHOTS"]) if os.environ.get("CONSOLE_SCREENSHOTS") else None
ENDED = {"succeeded", "failed", "cancelled", "skipped"}

if not os.path.exists(CHROMIUM):  # .ci/run installs it; a developer machine may lack it
    if os.environ.get("CI"):
        raise RuntimeError("CI must install Debian's chromium package for the console tests")
    pytest.skip("no chromium installed", allow_module_level=True)

from playwright.sync_api import expect  # noqa: E402  (after the skip: no chromium, no import)

FLOWS = """
    from brain import approval, shell, when, workflow

    @workflow
    def ship():
        ok = approval("go", prompt="Ship it?")
        with when(ok):
            shell("apply", command="sleep 0.5; echo applied")

    @workflow
    def later():
        shell("first", command="sleep 1.5; echo first")
        # Fails its first try, then writes a few lines on its second.
        shell("talk", command="echo try; test -e MARKS/talked || { touch MARKS/talked; exit 1; }; "
                              "for i in 1 2 3; do echo line$i; sleep 0.3; done",
              retries=1, retry_delay_seconds=0.5)

    @workflow
    def flaky():
        shell("fetch", command="sleep 1; echo fetched")
        shell("check", command="sleep 0.5; test -e MARKS/fixed && echo fixed")
"""

# Each change of a step's log-state, with the step's status as the page showed it then.
WATCH_LOG_STATE = """(name) => {
  window.__states = [];
  const step = document.getElementById("step-" + name);
  const state = step.querySelector(".log-state");
  new MutationObserver(() => window.__states.push([step.dataset.status, state.textContent]))
    .observe(state, {childList: true, characterData: true, subtree: true});
}"""


# Whether a ?follow=true stream of the step's log has ended (its timing entry is written
# once its answer is complete).
STREAM_ENDED = """(name) => performance.getEntriesByType("resource").some(
  (e) => e.name.includes("/steps/" + name + "/log?follow=true"))"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    root = tmp_path_factory.mktemp("console-truth")
    marks = root / "marks"
    marks.mkdir()
    folder = root / "flows"
    folder.mkdir()
    write_source(folder, "flows.py", FLOWS.replace("MARKS", str(marks)))
    srv = BrainServer(brain_argv(), folder, root, clean_env(root / "brain.db"))
    srv.marks = marks  # type: ignore[attr-defined]
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def page(browser: Any, server: BrainServer) -> Iterator[Any]:
    """A page (no token is set: the loopback server needs no login) that fetches nothing
    from elsewhere."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    try:
        yield page
    finally:
        context.close()
    elsewhere = [u for u in requested if not u.startswith(server.url)]
    assert not elsewhere, f"the console fetched from elsewhere: {elsewhere}"


def shot(page: Any, name: str) -> None:
    """Save the page as ``NAME.png`` and ``NAME-390.png`` when screenshots are asked for
    (never in a test run); the 390 px one must not be wider than the screen."""
    if SHOTS is None:
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    size = page.viewport_size
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(SHOTS / f"{name}-390.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.set_viewport_size(size)


def until(page: Any, check: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    """Poll (bounded) until ``check()`` holds, letting the page's events in meanwhile
    (Playwright delivers them only while it is called)."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        page.wait_for_timeout(50)


def test_the_approval_notice_gives_way_to_the_runs_end(page: Any, server: BrainServer) -> None:
    run_id = server.start_run("ship")
    server.wait_waiting(run_id)
    page.goto(f"{server.url}/runs/{run_id}")
    go = page.locator("#step-go")
    go.locator("form.decide button.approve").click()
    page.locator("#run-status.st-succeeded").wait_for()
    expect(page.locator("#step-apply")).to_have_attribute("data-status", "succeeded")
    expect(go.locator(".decision .verdict")).to_have_text("approved")
    # The run has ended: the page says so, and no longer that it goes on.
    expect(go.locator("output.decide-result")).to_have_text("")
    assert step_of(server.wait_run(run_id), "go")["decision"]["by"] == "console"
    go.scroll_into_view_if_needed()
    shot(page, "approved-ended")


def test_a_log_panel_says_ended_only_once_the_page_shows_its_step_ended(
        page: Any, server: BrainServer) -> None:
    run_id = server.start_run("later")
    page.goto(f"{server.url}/runs/{run_id}")
    # Opened before the step began.
    talk = page.locator("#step-talk")
    page.evaluate(WATCH_LOG_STATE, "talk")
    talk.locator("summary").click()
    expect(talk.locator(".log-state")).to_have_text("not started yet")
    expect(talk.locator(".log-state")).to_have_text("live")
    # From now on the page's redraws are refused (a busy server, a proxy): the page keeps
    # showing the step running while its log goes on to its end.
    refused: list[str] = []

    def refuse(route: Any) -> None:
        if route.request.resource_type == "fetch":
            refused.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    page.route(f"{server.url}/runs/{run_id}", refuse)
    server.wait_run(run_id)
    # The log's stream has ended (the server closes it after its "end" event).
    until(page, lambda: page.evaluate(STREAM_ENDED, "talk"), "the log's stream ended")
    seen = len(refused)
    until(page, lambda: len(refused) > seen, "the page tried to redraw since")
    expect(talk).to_have_attribute("data-status", "running")
    page.unroute_all()
    expect(talk).to_have_attribute("data-status", "succeeded")
    expect(talk.locator(".log-state")).to_have_text("ended (succeeded)")
    expect(talk.locator(".lines .ln.stdout")).to_have_text(["try", "try", "line1", "line2",
                                                           "line3"])
    states = page.evaluate("window.__states")
    wrong = [s for s in states if s[1].startswith("ended") and s[0] not in ENDED]
    assert not wrong, f"the panel said ended while the page showed its step not ended: {states}"
    assert server.run(run_id)["status"] == "succeeded"
    talk.scroll_into_view_if_needed()
    shot(page, "log-ended")


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_a_retrys_timeline_shows_kept_steps_apart_on_its_own_axis(
        page: Any, server: BrainServer) -> None:
    marks: Path = server.marks  # type: ignore[attr-defined]
    first = server.start_run("flaky")
    assert server.wait_run(first)["status"] == "failed"
    (marks / "fixed").touch()
    r = server.client.post(f"/api/runs/{first}/retry")
    assert r.status_code in (200, 202), r.text
    retry_id = str(r.json()["run_id"])
    page.goto(f"{server.url}/runs/{retry_id}")
    page.locator("#run-status.st-succeeded").wait_for()
    retry = server.wait_run(retry_id)
    assert retry["retry_of"] == first
    kept = page.locator('#timeline .lane.kept[data-lane="fetch"]')
    expect(kept).to_have_count(1)
    expect(kept.locator("rect")).to_have_count(0)
    expect(kept.locator(".track text")).to_have_text(f"kept from run {first[:12]}")
    expect(kept.locator(".lane-note")).to_have_text(
        f"kept · {step_took(step_of(retry, 'fetch'))}")
    expect(page.locator("#step-fetch > summary .kept")).to_have_text(f"kept from {first[:12]}")
    expect(page.locator("#step-check > summary .kept")).to_have_count(0)
    ran = page.locator('#timeline .lane[data-lane="check"]')
    expect(ran).not_to_have_class("kept")
    expect(ran.locator("rect")).to_have_count(1)
    # The axis spans the retry's own work: its start to its end, nothing of the run before.
    check = step_of(retry, "check")
    start = min(_at(retry["started_at"]), _at(check["started_at"]))
    span = (_at(retry["ended_at"]) - start).total_seconds()
    expect(page.locator("#timeline .lane.axis text")).to_have_text(
        [t.label for t in ticks(max(span, 0.001))])
    shot(page, "retry-timeline")


def step_took(step: dict[str, Any]) -> str:
    """A step's duration as the console words it."""
    from brain.server.console.timeline import took

    return took((_at(step["ended_at"]) - _at(step["started_at"])).total_seconds())
