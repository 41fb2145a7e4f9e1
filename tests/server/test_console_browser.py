"""The console in a real headless Chromium (Debian's package, driven by Playwright): log in,
start a run, watch it live (statuses, timeline, end time, new for_each instances, a step's
log), read a failure and its handler run, cancel, retry, a webhook's headers, a phone's
width; nothing fetched from elsewhere.

The tests write nothing outside their temporary folders: the screenshots in docs/console/
(shown by docs/console.md) are taken by the same tests run as ``python -m tests.server.screenshots``,
which names the folder in ``CONSOLE_SCREENSHOTS``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import CHROMIUM, BrainServer, brain_argv, clean_env
from support import write_source

from brain.server.webhooks import sign

# The log panel's browser test waits for the step log endpoint (docs/logs.md).
# Where shot() saves each page: only when the screenshots command asks (tests.server.screenshots).
SHOTS = Path(os.environ["CONSOLE_SCREENSHOTS"]) if os.environ.get("CONSOLE_SCREENSHOTS") else None
TOKEN = "console-e2e-token-9876"
HOOK_SECRET = "console-hook-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

if not os.path.exists(CHROMIUM):  # .ci/run installs it; a developer machine may lack it
    if os.environ.get("CI"):
        raise RuntimeError("CI must install Debian's chromium package for the console tests")
    pytest.skip("no chromium installed", allow_module_level=True)

from playwright.sync_api import expect  # noqa: E402  (after the skip: no chromium, no import)

FLOWS = """
    from brain import cron, every, for_each, shell, step, webhook, when, workflow

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
    def tell():
        \"\"\"Says which run failed (a failure handler).\"\"\"
        shell("say", argv=["echo", "{trigger.body}"])

    @workflow(on_failure=[tell])
    def flaky():
        \"\"\"Fails until the marker file exists.\"\"\"
        shell("count", command="echo x >> MARKS/count.txt; echo counted")
        shell("check", command="echo 'checking the marker' >&2; test -e MARKS/fixed && echo fixed")

    @workflow
    def fan():
        \"\"\"Twenty instances of one step, made once the list is known.\"\"\"
        items = shell("items", command='sleep 2; echo "[$(seq -s, 0 19)]"')
        with for_each(items) as x:
            shell("each", command=f"sleep 0.2; echo {x}")
        shell("done", argv=["echo", "done"])

    @workflow
    def chatty():
        \"\"\"Writes a line a second, to both streams.\"\"\"
        shell("talk", command="for i in 1 2 3 4 5; do echo line$i; echo oops$i >&2; sleep 1; done")

    @workflow(triggers=[every(seconds=3600), cron("0 9 * * *", timezone="Europe/Bucharest")])
    def scheduled():
        shell("tick", argv=["echo", "tick"])

    @workflow(triggers=[webhook(secret_env="HOOK_SECRET")])
    def hooked():
        shell("got", argv=["echo", "{trigger.headers.x-github-event}"])

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
    env = clean_env(root / "brain.db", {"BRAIN_API_TOKEN": TOKEN, "HOOK_SECRET": HOOK_SECRET})
    srv = BrainServer(brain_argv(), folder, root, env)
    srv.marks = marks  # type: ignore[attr-defined]
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


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


# While the wait step runs, one look at the timeline (one swap draws it all at once).
LANES_WHILE_WAITING = """() => {
  const lane = (name) => document.querySelector('#timeline .lane[data-lane="' + name + '"]');
  if (!lane("wait") || !lane("wait").classList.contains("st-running")) return null;
  return {wait: lane("wait").querySelector(".lane-note").textContent,
          hello: lane("hello").className, helloBar: !!lane("hello").querySelector("rect")};
}"""


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
    lanes = page.wait_for_function(LANES_WHILE_WAITING).json_value()
    assert lanes["wait"].startswith("running") and "st-pending" in lanes["hello"], lanes
    assert not lanes["helloBar"], "a step that has not started has no bar"
    shot(page, "run-live")
    page.locator("#run-status.st-succeeded").wait_for(timeout=30_000)
    page.locator('svg .node.st-succeeded[data-step="hello"]').wait_for()
    expect(page.locator("#run-ended")).to_be_visible()
    expect(page.locator("#timeline .lane[data-lane] rect")).to_have_count(3)
    assert page.locator("#timeline .lane[data-lane] .lane-name").all_inner_texts() == ["who", "wait", "hello"]
    assert page.locator("#timeline .axis text").count() >= 2
    assert "No step has started" not in page.locator("main").inner_text()
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    hello = page.locator("#step-hello")
    hello.locator("summary").click()
    assert hello.locator('[data-field="output"] pre').inner_text() == "hello Ada"
    shot(page, "run")
    page.goto(server.url + "/runs?workflow=greet")
    assert page.locator("table.runs tbody tr").count() == 1
    assert page.locator("table.runs .status").first.inner_text() == "succeeded"
    assert re.fullmatch(r"\d+(\.\d+)? s", page.locator("table.runs td.duration").inner_text())
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
    # its log, fetched once: the stderr line marked as such
    expect(check.locator(".lines .ln.stderr")).to_contain_text("checking the marker")
    # The failure queued the handler's run; each page links to the other.
    handler = page.locator("#handlers a")
    expect(handler).to_contain_text("tell")
    shot(page, "run-failed")
    handler.click()
    page.wait_for_url(lambda url: url != failed_url)
    page.locator("#failure-of a").click()
    page.wait_for_url(failed_url)
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
    page.evaluate("window.__sameDocument = true")
    page.locator('svg .node.st-running[data-step="nap"]').wait_for()
    expect(page.locator("#run-ended")).to_have_count(0)
    page.locator('[data-action="cancel"]').click()
    page.locator("#run-status.st-cancelled").wait_for(timeout=30_000)
    expect(page.locator("#run-ended")).to_be_visible()
    expect(page.locator(".actions output")).to_have_text("")
    expect(page.locator('#timeline .lane.st-cancelled[data-lane="nap"] rect')).to_have_count(1)
    assert page.locator('[data-action="cancel"]').is_hidden()
    assert page.locator('[data-action="retry"]').is_visible()
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"


def test_a_for_each_block_grows_its_instances_on_the_open_page(
        page: Any, server: BrainServer) -> None:
    log_in(page, server)
    page.locator("#wf-fan button[type=submit]").click()
    page.wait_for_url(f"{server.url}/runs/*")
    page.evaluate("window.__sameDocument = true")
    assert page.locator("details.step.instance").count() == 0, "items sleeps 2 s first"
    page.locator("#run-status.st-succeeded").wait_for(timeout=30_000)
    expect(page.locator("#timeline .lane.instance rect")).to_have_count(20)
    names = page.locator("#steps > details.step").evaluate_all("els => els.map(e => e.dataset.step)")
    assert names == ["items", "each", *[f"each[{i}]" for i in range(20)], "done"]
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    shot(page, "run-fan")


def test_a_running_steps_log_fills_its_panel_as_it_writes(page: Any, server: BrainServer) -> None:
    log_in(page, server)
    page.locator("#wf-chatty button[type=submit]").click()
    page.wait_for_url(f"{server.url}/runs/*")
    talk = page.locator("#step-talk")
    talk.locator("summary").click()
    # Two lines shown while the step still runs (it writes one a second, five in all).
    page.wait_for_function("""() => {
      const step = document.getElementById("step-talk");
      return step.dataset.status === "running" && step.querySelectorAll(".ln.stdout").length >= 2;
    }""", timeout=20_000)
    state = talk.locator(".log-state").inner_text()
    expect(talk.locator(".lines .ln.stderr").first).to_have_text("oops1")
    shot(page, "run-log")
    page.locator("#run-status.st-succeeded").wait_for(timeout=30_000)
    expect(talk.locator(".lines .ln.stdout")).to_have_text([f"line{i}" for i in range(1, 6)])
    # The panel followed the step's stream (?follow=true), unless the browser refused it and
    # the panel fell back to asking every 2 s.
    url = f"{server.url}/api/runs/{page.url.rsplit('/', 1)[1]}/steps/talk/log?follow=true"
    with httpx.stream("GET", url, headers=AUTH, timeout=30) as answer:
        streamed = answer.headers["content-type"].startswith("text/event-stream")
    assert streamed
    assert state == "live", state


def test_a_webhook_run_shows_its_event_and_delivery(page: Any, server: BrainServer) -> None:
    body = b'{"ref": "refs/heads/main"}'
    r = httpx.post(f"{server.url}/hooks/hooked?wait=true", content=body, timeout=30,
                   headers={"X-GitHub-Event": "push", "X-GitHub-Delivery": "d-4711",
                            "X-Brain-Signature": sign(HOOK_SECRET, body)})
    assert r.status_code == 200, r.text
    log_in(page, server, then=f"/runs/{r.json()['run_id']}")
    meta = page.locator(".meta")
    expect(meta.locator("code.event")).to_have_text("push")
    expect(meta.locator("code.delivery")).to_have_text("d-4711")
    page.locator("details.headers summary").click()
    headers = page.locator("details.headers table").inner_text()
    assert "x-github-delivery" in headers and "signature" not in headers


def test_triggers_read_as_written_and_the_favicon_is_served(page: Any, server: BrainServer) -> None:
    log_in(page, server)
    expect(page.locator("#wf-scheduled .triggers li")).to_contain_text(
        [re.compile(r"^every 1 h"), re.compile(r"^cron 0 9 \* \* \* \(Europe/Bucharest\)")])
    expect(page.locator("#wf-hooked .triggers li")).to_have_text("webhook /hooks/hooked")
    icon = page.locator("link[rel=icon]").get_attribute("href")
    for path in (icon, "/favicon.ico"):
        answer = page.request.get(f"{server.url}{path}")
        assert answer.status == 200, path
        assert answer.headers["content-type"].startswith("image/svg+xml")
        assert b"<svg" in answer.body()


FIRST_RENDER_MS = (
    "performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint')"
    "?.startTime ?? performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")


def test_the_page_of_a_fifty_step_run_is_light_and_quick(page: Any, server: BrainServer) -> None:
    r = httpx.post(f"{server.url}/api/workflows/fifty/runs", json={"wait": True},
                   headers=AUTH, timeout=60)
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


def test_nothing_overflows_a_phone_screen(page: Any, server: BrainServer) -> None:
    r = httpx.post(f"{server.url}/api/workflows/greet/runs", timeout=60, headers=AUTH,
                   json={"wait": True, "body": "a-long-name-without-spaces-" * 6})
    assert r.status_code == 200, r.text
    runs = httpx.get(f"{server.url}/api/runs?limit=8", headers=AUTH).json()
    log_in(page, server)
    page.set_viewport_size({"width": 390, "height": 844})
    for path in ["/", "/runs", *(f"/runs/{run['run_id']}" for run in runs)]:
        page.goto(server.url + path)
        page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width} px wide"
