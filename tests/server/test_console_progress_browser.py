"""A step's progress and tokens in the console, in a real headless Chromium (Debian's
package, driven by Playwright) on a phone's screen (SPEC §13, §17, §18): the bar and words
of a running step's latest progress appear and move while it runs, without reloading the
page; once it ends, its tokens and the run's show; nothing is wider than 390 px; the script
words progress as the server does.

A ``@step`` function reports progress and counts tokens through its step's log, as the
MCP and LLM executors do.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import CHROMIUM, BrainServer, brain_argv, clean_env
from support import write_source

from brain.results import StepResult, StepStatus
from brain.server.console.usage import progress

SHOTS = Path(os.environ["CONSOLE_SCREENSHOTS"]) if os.environ.get("CONSOLE_SCREENSHOTS") else None
TOKEN = "console-progress-token-4321"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PHONE = {"width": 390, "height": 844}

if not os.path.exists(CHROMIUM):  # .ci/run installs it; a developer machine may lack it
    if os.environ.get("CI"):
        raise RuntimeError("CI must install Debian's chromium package for the console tests")
    pytest.skip("no chromium installed", allow_module_level=True)

from playwright.sync_api import expect  # noqa: E402  (after the skip: no chromium, no import)

LONG_WORD = "x" * 150  # no place to break: the words must wrap anyway on a phone
FLOWS = """
    import pathlib, time
    from brain import step, trigger, workflow
    from brain.executors.capture import current_log

    MARKS = pathlib.Path("MARKS_DIR")

    def until(name: str) -> None:
        deadline = time.monotonic() + 60
        while not (MARKS / name).exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    @step
    def copy(tag: str) -> str:
        log = current_log.get()
        log.progress(3, 10, "copying <b>files</b> LONG_WORD")
        until(tag + "-one")
        log.progress(7, 10, "almost")
        until(tag + "-two")
        log.count_usage(1200, 34)
        return "copied"

    @workflow
    def copying():
        copy(trigger.body)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    root = tmp_path_factory.mktemp("console-progress")
    marks = root / "marks"
    marks.mkdir()
    folder = root / "flows"
    folder.mkdir()
    write_source(folder, "flows.py",
                 FLOWS.replace("MARKS_DIR", str(marks)).replace("LONG_WORD", LONG_WORD))
    srv = BrainServer(brain_argv(), folder, root, clean_env(root / "brain.db",
                                                             {"BRAIN_API_TOKEN": TOKEN}))
    srv.marks = marks  # type: ignore[attr-defined]
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def page(browser: Any, server: BrainServer) -> Iterator[Any]:
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    page.set_default_timeout(20_000)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(f"{server.url}/?token={TOKEN}")  # logs in: the cookie is kept
    try:
        yield page
    finally:
        context.close()
    elsewhere = [u for u in requested if not u.startswith(server.url)]
    assert not elsewhere, f"the console fetched from elsewhere: {elsewhere}"


def shot(page: Any, name: str) -> None:
    """Save the page as ``NAME.png`` when screenshots are asked for (never in a test run)."""
    if SHOTS is not None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def width(page: Any) -> int:
    """The page's width with every step open."""
    page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    return int(page.evaluate("document.documentElement.scrollWidth"))


def test_a_running_steps_progress_moves_live_then_its_tokens_show(
        page: Any, server: BrainServer) -> None:
    marks: Path = server.marks  # type: ignore[attr-defined]
    r = httpx.post(f"{server.url}/api/workflows/copying/runs", json={"body": "live"},
                   headers=AUTH, timeout=30)
    assert r.status_code == 202, r.text
    page.goto(f"{server.url}/runs/{r.json()['run_id']}")
    page.evaluate("window.__sameDocument = true")
    summary = page.locator("#step-copy > summary")
    bar = summary.locator(".progress progress")
    expect(bar).to_have_attribute("value", "3")
    expect(bar).to_have_attribute("max", "10")
    expect(summary.locator(".progress-text")).to_have_text(
        f"3/10: copying <b>files</b> {LONG_WORD}")  # the text as sent, never markup
    assert summary.locator(".progress b").count() == 0
    assert width(page) <= PHONE["width"]
    # What a progress event does: move the bar the server drew, in place (a step with none
    # drawn yet is left to the server: the page is fetched again).
    moved = page.evaluate("""() => {
      const moved = showProgress({step: "copy", progress: 5, total: 10, message: "<i>5</i>"});
      const shown = document.querySelector("#step-copy > summary .progress");
      return [moved, shown.querySelector("progress").value,
              shown.querySelector(".progress-text").textContent,
              showProgress({step: "nowhere", progress: 1, total: 2, message: null})];
    }""")
    assert moved == [True, 5, "5/10: <i>5</i>", False]
    shot(page, "run-progress")

    (marks / "live-one").touch()
    expect(bar).to_have_attribute("value", "7")
    expect(summary.locator(".progress-text")).to_have_text("7/10: almost")
    (marks / "live-two").touch()
    page.locator("#run-status.st-succeeded").wait_for(timeout=30_000)
    expect(page.locator("#run-tokens")).to_have_text("tokens 1,200 prompt + 34 completion")
    expect(summary.locator(".tokens")).to_have_text("1,234 tokens")
    expect(summary.locator(".progress")).to_have_count(0)  # no bar once the step has ended
    fields = page.locator("#step-copy > .fields")
    expect(fields.locator('[data-field="progress"] p')).to_have_text("7/10: almost")
    expect(fields.locator('[data-field="usage"] p')).to_have_text("1,200 prompt + 34 completion")
    assert width(page) <= PHONE["width"]
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    shot(page, "run-tokens")


CASES: list[dict[str, Any]] = [{"progress": 3, "total": 10, "message": "copying"},
         {"progress": 2.5, "total": None, "message": None},
         {"progress": 1 / 3, "total": 3, "message": ""},
         {"progress": 9.999, "total": 10.5, "message": "nearly"},
         {"progress": "x", "total": None, "message": "only words"},
         {"progress": 0.001, "total": 1e6, "message": "<i>small</i>"}]


def test_the_script_words_progress_as_the_server_does(page: Any, server: BrainServer) -> None:
    page.goto(f"{server.url}/runs")
    words = page.evaluate("(cases) => cases.map(progressText)", CASES)
    expected = []
    for case in CASES:
        shown = progress(StepResult(name="s", kind="mcp_tool", status=StepStatus.RUNNING,
                                    progress=case))
        assert shown is not None
        expected.append(shown.text)
    assert words == expected
