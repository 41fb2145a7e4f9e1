"""The console's side of waiting steps (SPEC §16), as the server writes it (no browser): what a
waiting step waits for and how to end the wait, how a step was decided, the Approve / Reject
route (stored ``by: "console"``, refused from another origin, a clear 409), the workflows
page's list of runs waiting for a decision, and the runs list's ``waiting`` filter."""

from __future__ import annotations

import asyncio
import html
import json
import re
import shlex
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from serve_support import wait_run

from brain import approval, for_each, parallel, shell, sleep, wait_for, when, workflow
from brain.results import StepResult
from brain.server import create_app
from brain.server.console.waits import decision_view, preview, wait_view, waiting_decisions

pytestmark = pytest.mark.usefixtures("collect_garbage_first")
HOST = "http://127.0.0.1"
TOKEN = "waiting-console-token-2468"
PROMPT_BODY = '<script>alert("x")</script>\nsecond line'


@workflow(name="ship")
def ship() -> None:
    plan = shell("plan", argv=["echo", "{trigger.body}"])
    ok = approval("go", prompt=f"Ship this?\n\n{plan}")
    with when(ok):
        shell("apply", argv=["echo", "applied"])


@workflow(name="later")
def later() -> None:
    with parallel():
        sleep("nap", "1h")
        wait_for("ci", signal="ci-done", key="{trigger.body}")


@workflow(name="each")
def each() -> None:
    with for_each(["eu", "us"]) as region:
        approval("go", prompt=f"Deploy to {region}?")


# --- the views, pure ---------------------------------------------------------------------------


def waiting(step_kind: str, **fields: Any) -> StepResult:
    """A step of kind ``step_kind`` waiting, its ``waiting_for`` the fields given."""
    return StepResult(name="go", kind=step_kind, status="waiting", waiting_for=fields)


def test_a_waiting_step_says_what_ends_its_wait() -> None:
    asked = wait_view("r1", waiting("approval", kind="approval", prompt="Ship?\n\n<b>plan</b>",
                                    timeout_at="2026-01-05T13:00:00+00:00"),
                      base_url="http://h:1/", token=False)
    assert asked is not None and asked.kind == "approval"
    assert asked.prompt == "Ship?\n\n<b>plan</b>" and asked.timeout_at == "2026-01-05 13:00:00"
    assert asked.commands == ["brain approve r1 go [--reject] [--comment TEXT]"]
    napping = wait_view("r1", waiting("sleep", kind="sleep", until="2026-01-05T10:00:00+01:00"),
                        base_url="http://h:1/", token=False)
    assert napping is not None and napping.until == "2026-01-05 09:00:00"  # in UTC
    assert napping.commands == [] and napping.timeout_at is None
    done = StepResult(name="go", kind="approval", status="succeeded",
                      waiting_for={"kind": "approval", "prompt": "?"})
    assert wait_view("r1", done, base_url="http://h:1/", token=False) is None


def test_a_signals_commands_send_exactly_its_name_and_key() -> None:
    step = waiting("wait_for", kind="signal", signal="ci-done", key="it's <k>")
    view = wait_view("r1", step, base_url="http://h:8/", token=True)
    assert view is not None and (view.signal, view.key) == ("ci-done", "it's <k>")
    cli, curl = view.commands
    assert shlex.split(cli) == ["brain", "signal", "ci-done", "--key", "it's <k>", "--body", "TEXT"]
    words = shlex.split(curl)
    assert words[:4] == ["curl", "-X", "POST", "http://h:8/api/signals/ci-done"]
    assert "Authorization: Bearer $BRAIN_API_TOKEN" in words
    assert json.loads(words[words.index("-d") + 1]) == {"key": "it's <k>", "body": "TEXT"}
    keyless = wait_view("r1", waiting("wait_for", kind="signal", signal="go", key=None),
                        base_url="http://h:8", token=False)
    assert keyless is not None
    cli, curl = keyless.commands
    assert shlex.split(cli) == ["brain", "signal", "go", "--body", "TEXT"]
    assert "Authorization" not in curl
    words = shlex.split(curl)
    assert json.loads(words[words.index("-d") + 1]) == {"body": "TEXT"}


def decided(decision: dict[str, Any]) -> Any:
    return decision_view(StepResult(name="go", kind="approval", status="succeeded",
                                    decision=decision))


def test_a_decision_reads_as_what_was_decided_by_whom() -> None:
    at = "2026-01-05T09:30:00+00:00"
    yes = decided({"approved": True, "comment": "fine", "by": "console", "at": at})
    assert (yes.verdict, yes.comment, yes.by, yes.at) == ("approved", "fine", "console",
                                                          "2026-01-05 09:30:00")
    assert decided({"approved": False, "comment": None, "by": "cli", "at": at}).verdict == "rejected"
    assert decided({"approved": False, "comment": None, "by": "timeout", "at": at}).verdict == \
        "rejected"  # a timeout's default
    assert decided({"by": "timeout", "at": at}).verdict == "timed out"
    signal = decided({"signal": "ci-done", "key": "abc", "by": "api", "at": at})
    assert (signal.verdict, signal.signal, signal.key, signal.by) == ("signal", "ci-done", "abc", "api")
    assert decision_view(StepResult(name="go", kind="shell", status="succeeded")) is None


def test_the_list_of_waiting_decisions_previews_prompts_on_one_line() -> None:
    assert preview("Ship\n\nthis   now?") == "Ship this now?"
    long = preview("x" * 500)
    assert len(long) == 120 and long.endswith("…")
    since = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    rows = waiting_decisions([{"run_id": "r", "workflow": "w", "step": "go", "prompt": "a\nb",
                               "since": since, "timeout_at": None}])
    assert rows == [{"run_id": "r", "workflow": "w", "step": "go", "prompt": "a b",
                     "since": "2026-01-05 09:00:00", "timeout_at": ""}]


# --- a served app --------------------------------------------------------------------------------


@pytest.fixture
async def client() -> AsyncIterator[Any]:
    app = create_app([ship, later, each])
    async with AsyncTestClient(app, base_url=HOST, timeout=60) as c:
        yield c


async def until(client: Any, run_id: str, ready: Any, seconds: float = 20.0) -> dict[str, Any]:
    """Poll the run's JSON (bounded) until ``ready(run)`` holds."""
    deadline = time.monotonic() + seconds
    while True:
        run = (await client.get(f"/api/runs/{run_id}")).json()
        if ready(run):
            return dict(run)
        assert time.monotonic() < deadline, f"run {run_id} never got there: {run}"
        await asyncio.sleep(0.05)


def steps(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in run["steps"]}


async def start_waiting(client: Any, workflow: str, body: str, **headers: str) -> str:
    r = await client.post(f"/api/workflows/{workflow}/runs", json={"body": body}, headers=headers)
    assert r.status_code == 202, r.text
    run_id = str(r.json()["run_id"])
    await until(client, run_id, lambda run: run["status"] == "waiting")
    return run_id


async def decide(client: Any, run_id: str, approve: bool, comment: str = "",
                 origin: str | None = HOST, **headers: str) -> Any:
    if origin is not None:
        headers["Origin"] = origin
    return await client.post(f"/runs/{run_id}/steps/go/decision", headers=headers,
                             follow_redirects=False,
                             data={"approve": "true" if approve else "false", "comment": comment})


async def test_an_approval_is_shown_as_text_and_approved_from_the_console(client: Any) -> None:
    run_id = await start_waiting(client, "ship", PROMPT_BODY)
    page = (await client.get(f"/runs/{run_id}")).text
    assert "<script>alert" not in page
    prompt = re.search(r'<pre class="prompt">(.*?)</pre>', page, re.S)
    assert prompt and prompt.group(1) == \
        "Ship this?\n\n&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;\nsecond line"
    assert f'<form class="decide" method="post" action="/runs/{run_id}/steps/go/decision">' in page
    assert 'id="run-waits"' in page and '<span class="status st-waiting">waiting</span>' in page
    listed = (await client.get("/")).text.split('id="decisions"')[1]
    row = re.search(rf'<tr data-run="{run_id}" data-step="go">(.*?)</tr>', listed, re.S)
    assert row and '<td class="prompt">Ship this? &lt;script&gt;' in row.group(1)
    assert f'href="/runs/{run_id}#step-go"' in row.group(1) and "never" in row.group(1)
    runs = (await client.get("/runs?status=waiting")).text
    assert "<option selected>waiting</option>" in runs and f'data-run="{run_id}"' in runs

    answer = await decide(client, run_id, True, "Ship it <b>now</b>")
    assert answer.status_code == 303 and answer.headers["location"] == f"/runs/{run_id}#step-go"
    run = await wait_run(client, run_id)
    assert run["status"] == "succeeded" and steps(run)["apply"]["status"] == "succeeded"
    decision = steps(run)["go"]["decision"]
    assert (decision["approved"], decision["by"], decision["comment"]) == \
        (True, "console", "Ship it <b>now</b>")
    page = (await client.get(f"/runs/{run_id}")).text
    assert 'data-verdict="approved"' in page and '<span class="by">console</span>' in page
    assert '<pre class="comment">Ship it &lt;b&gt;now&lt;/b&gt;</pre>' in page
    assert 'id="run-waits"' not in page and 'form class="decide"' not in page
    assert f'data-run="{run_id}"' not in (await client.get("/")).text


async def test_a_second_decision_is_refused_with_a_clear_message(client: Any) -> None:
    run_id = await start_waiting(client, "ship", "plan")
    assert (await decide(client, run_id, True, Accept="application/json")).status_code == 200
    again = await decide(client, run_id, False, Accept="application/json")
    assert again.status_code == 409
    assert again.json()["detail"] == f"step 'go' of run {run_id[:12]}: already decided"
    page = await decide(client, run_id, False)  # a form posted without the page's script
    assert page.status_code == 409 and page.headers["content-type"].startswith("text/html")
    assert re.search(r'id="decision-refused">step &#39;go&#39; of run \w+: already decided<',
                     page.text)
    assert "Traceback" not in page.text and f'href="/runs/{run_id}#step-go"' in page.text
    bad = await decide(client, run_id, True, Accept="application/json")
    wrong = await client.post(f"/runs/{run_id}/steps/go/decision", data={"approve": "maybe"},
                              headers={"Origin": HOST, "Accept": "application/json"})
    assert bad.status_code == 409 and wrong.status_code == 400
    missing = await client.post(f"/runs/{run_id}/steps/nope/decision", data={"approve": "true"},
                                headers={"Origin": HOST, "Accept": "application/json"})
    assert missing.status_code == 404
    run = await wait_run(client, run_id)
    assert steps(run)["go"]["decision"]["approved"] is True


async def test_reject_skips_the_when_branch(client: Any) -> None:
    run_id = await start_waiting(client, "ship", "plan")
    answer = await decide(client, run_id, False, "not today", Accept="application/json")
    assert answer.status_code == 200, answer.text
    assert (answer.json()["approved"], answer.json()["by"]) == (False, "console")
    run = await wait_run(client, run_id)
    assert run["status"] == "succeeded" and steps(run)["go"]["output"] == "false"
    assert steps(run)["apply"]["status"] == "skipped"
    assert 'data-verdict="rejected"' in (await client.get(f"/runs/{run_id}")).text


@pytest.mark.parametrize("origin", ["http://evil.example", "http://127.0.0.1:8001", "null",
                                    "http://localhost"])
async def test_a_decision_from_another_origin_is_refused(client: Any, origin: str) -> None:
    run_id = await start_waiting(client, "ship", "plan")
    refused = await decide(client, run_id, True, origin=origin)
    assert refused.status_code == 401, refused.text
    run = (await client.get(f"/api/runs/{run_id}")).json()
    assert run["status"] == "waiting" and steps(run)["go"]["decision"] is None
    await client.post(f"/api/runs/{run_id}/cancel", json={})


async def test_a_sleep_and_a_signal_show_what_ends_them(client: Any) -> None:
    key = "build 'abc'"
    r = await client.post("/api/workflows/later/runs", json={"body": key})
    run_id = r.json()["run_id"]
    await until(client, run_id, lambda run: all(s["status"] == "waiting" for s in run["steps"]))
    page = (await client.get(f"/runs/{run_id}")).text
    assert re.search(r'data-wait="sleep">\s*<p>Sleeps until <strong class="until">'
                     r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</strong>', page)
    assert '<code class="signal">ci-done</code>' in page
    assert '<code class="key">build &#39;abc&#39;</code>' in page
    commands = re.findall(r'<div class="field" data-field="(?:command|curl)">.*?'
                          r'<pre class="full">(.*?)</pre>', page, re.S)
    cli, curl = (html.unescape(c) for c in commands)
    assert shlex.split(cli)[2:] == ["ci-done", "--key", key, "--body", "TEXT"]
    assert f"{HOST}/api/signals/ci-done" in curl
    sent = await client.post("/api/signals/ci-done", json={"key": key, "body": "green"})
    assert sent.json()["resumed"] == [{"run_id": run_id, "step": "ci"}]
    await until(client, run_id, lambda run: steps(run)["ci"]["status"] == "succeeded")
    page = (await client.get(f"/runs/{run_id}")).text
    assert 'data-verdict="signal"' in page and "<code>ci-done</code>" in page
    assert "sent by <span class=\"by\">api</span>" in page
    await client.post(f"/api/runs/{run_id}/cancel", json={})
    assert (await wait_run(client, run_id))["status"] == "cancelled"


async def test_with_a_token_the_cookie_decides_only_from_the_consoles_own_origin(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_API_TOKEN", TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with AsyncTestClient(create_app([ship]), base_url=HOST, timeout=60) as client:
        client.headers.update(auth)
        run_id = await start_waiting(client, "ship", "plan")
        del client.headers["Authorization"]
        client.cookies.set("brain_token", TOKEN)
        assert (await decide(client, run_id, True, origin=None)).status_code == 401
        assert (await decide(client, run_id, True, origin="http://127.0.0.1:9")).status_code == 401
        client.cookies.clear()
        assert (await decide(client, run_id, True)).status_code == 401  # no cookie, no token
        client.cookies.set("brain_token", TOKEN)
        assert (await decide(client, run_id, True, "from the page")).status_code == 303
        # A script with the token itself needs no page: the header counts from anywhere.
        client.cookies.clear()
        again = await decide(client, run_id, True, origin=None, Accept="application/json",
                             **auth)
        assert again.status_code == 409
        client.headers.update(auth)
        run = await wait_run(client, run_id)
        assert steps(run)["go"]["decision"]["comment"] == "from the page"


async def test_each_instance_of_an_approval_is_decided_on_its_own(client: Any) -> None:
    r = await client.post("/api/workflows/each/runs", json={})
    run_id = r.json()["run_id"]
    await until(client, run_id, lambda run: [s["status"] for s in run["steps"]] ==
                ["pending", "waiting", "waiting"])
    page = (await client.get(f"/runs/{run_id}")).text
    forms = re.findall(r'<form class="decide" method="post" action="([^"]+)">', page)
    assert forms == [f"/runs/{run_id}/steps/go%5B{i}%5D/decision" for i in (0, 1)]
    answer = await client.post(forms[1], data={"approve": "true"}, follow_redirects=False,
                               headers={"Origin": HOST})
    assert answer.status_code == 303, answer.text
    run = await until(client, run_id, lambda run: steps(run)["go[1]"]["status"] == "succeeded")
    assert steps(run)["go[1]"]["decision"]["by"] == "console"
    assert steps(run)["go[0]"]["status"] == "waiting"
    listed = (await client.get("/")).text
    assert f'href="/runs/{run_id}#step-go[0]"' in listed and "step-go[1]" not in listed
    await client.post(f"/api/runs/{run_id}/cancel", json={})
