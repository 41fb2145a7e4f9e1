"""The console's pages as the server writes them (no browser, no JavaScript): the timeline's
lanes and axis, durations and triggers as people write them, a webhook run's headers, the
links between a failed run and its handler runs, the favicon."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from litestar.testing import AsyncTestClient
from serve_support import wait_run

from brain import cron, every, shell, watch, webhook, workflow
from brain.results import RunResult, StepResult, TriggerData
from brain.server import create_app
from brain.server.bodies import trigger_summary
from brain.server.console.labels import failure_of, handler_runs, trigger_label, webhook_facts
from brain.server.console.timeline import ticks, timeline, took

pytestmark = pytest.mark.usefixtures("collect_garbage_first")
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def label(trig: Any) -> str:
    return trigger_label(msgspec.to_builtins(trigger_summary(trig, "deploy", T0)))


def test_triggers_read_as_people_write_them() -> None:
    assert label(every(seconds=10)) == "every 10 s"
    assert label(every(seconds=90)) == "every 90 s"
    assert label(every(seconds=300)) == "every 5 min"
    assert label(every(seconds=7200)) == "every 2 h"
    assert label(cron("0 9 * * *", timezone="Europe/Bucharest")) == \
        "cron 0 9 * * * (Europe/Bucharest)"
    assert label(cron("*/5 * * * *")) == "cron */5 * * * * (UTC)"
    assert label(webhook(secret_env="S")) == "webhook /hooks/deploy"
    assert label(webhook(secret_env="S", path="gh/push")) == "webhook /hooks/gh/push"
    assert label(watch("/srv/in", patterns=["*.csv"])) == "watch /srv/in *.csv"


def test_durations_read_as_people_say_them() -> None:
    assert [took(s) for s in (0.004, 0.021, 1.51, 12.3, 125, 3725)] == \
        ["4 ms", "0.02 s", "1.5 s", "12 s", "2 min 5 s", "1 h 2 min"]
    assert took(None) == ""


def test_the_time_axis_marks_round_times() -> None:
    assert [t.label for t in ticks(3.2)] == ["0 s", "1 s", "2 s", "3 s", "4 s"]
    assert [t.at for t in ticks(3.2)] == [0, 25, 50, 75, 100]
    assert [t.label for t in ticks(0.012)] == ["0 s", "5 ms", "10 ms", "15 ms"]
    assert [t.label for t in ticks(1.5)] == ["0 s", "0.5 s", "1 s", "1.5 s"]
    assert [t.label for t in ticks(600)] == ["0 s", "2 min", "4 min", "6 min", "8 min", "10 min"]
    for span in (0.001, 7, 4000, 86400 * 3, 86400 * 400):
        marks = ticks(span)
        assert 2 <= len(marks) <= 6 and marks[-1].at == 100, (span, marks)


def run_of(steps: dict[str, tuple[str, float | None, float | None]], **fields: Any) -> RunResult:
    """A run started at T0 whose steps started and ended the given seconds after it."""
    at = {name: (T0 + timedelta(seconds=a) if a is not None else None,
                 T0 + timedelta(seconds=b) if b is not None else None)
          for name, (_, a, b) in steps.items()}
    return RunResult(run_id="r1", workflow="w", status=fields.pop("status", "running"),
                     created_at=T0, started_at=T0, steps={
                         name: StepResult(name=name, kind="shell", status=status,
                                          started_at=at[name][0], ended_at=at[name][1])
                         for name, (status, _, _) in steps.items()}, **fields)


def test_every_step_has_a_lane_and_its_state_reads_apart() -> None:
    run = run_of({"fetch": ("succeeded", 0, 2), "each": ("running", 2, None),
                  "each[0]": ("running", 3, None), "report": ("pending", None, None)})
    lanes = {lane.name: lane for lane in timeline(run, T0 + timedelta(seconds=4)).lanes}
    assert list(lanes) == ["fetch", "each", "each[0]", "report"]
    assert (lanes["fetch"].left, lanes["fetch"].width, lanes["fetch"].note) == (0, 50, "2.0 s")
    assert (lanes["each"].left, lanes["each"].width, lanes["each"].note) == (50, 50, "running 2.0 s")
    assert lanes["each[0]"].instance and lanes["each[0]"].note == "running 1.0 s"
    assert (lanes["report"].left, lanes["report"].note) == (None, "pending")


def test_a_handler_run_names_the_run_that_failed() -> None:
    body = json.dumps({"run_id": "f00d", "workflow": "backup", "error": "x", "failed_step": "dump"})
    handler = RunResult(run_id="h1", workflow="tell", status="queued",
                        trigger=TriggerData(event="failure", body=body))
    other = RunResult(run_id="h2", workflow="tell", status="queued",
                      trigger=TriggerData(event="failure", body='{"run_id": "beef"}'))
    manual = RunResult(run_id="m", workflow="tell", status="queued", trigger=TriggerData(body=body))
    failed = failure_of(handler)
    assert failed is not None and (failed.run_id, failed.workflow, failed.step) == \
        ("f00d", "backup", "dump")
    assert failure_of(manual) is None
    assert handler_runs("f00d", [handler, other, manual]) == [handler]
    assert webhook_facts({"x-github-event": "push", "x-github-delivery": "d-1"}) == \
        {"event": "push", "delivery": "d-1"}


@workflow(name="notify")
def notify() -> None:
    shell("say", argv=["echo", "{trigger.body}"])


@workflow(name="backup", on_failure=[notify], triggers=[webhook(secret_env="PAGES_HOOK")])
def backup() -> None:
    shell("dump", command="echo dumped; echo disk full >&2; exit 3")
    shell("upload", argv=["echo", "never"])


async def test_the_pages_of_a_failed_run_and_its_handler_link_each_other(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from brain.server.webhooks import sign

    monkeypatch.setenv("PAGES_HOOK", "pages-secret")
    body = b'{"why": "nightly"}'
    app = create_app([backup, notify])
    async with AsyncTestClient(app, base_url="http://127.0.0.1", timeout=60) as client:
        r = await client.post("/hooks/backup", content=body, headers={
            "X-GitHub-Event": "push", "X-GitHub-Delivery": "d-77",
            "X-Brain-Signature": sign("pages-secret", body)})
        failed_id = r.json()["run_id"]
        assert (await wait_run(client, failed_id))["status"] == "failed"
        handler_id = (await client.get("/api/runs?workflow=notify")).json()[0]["run_id"]
        await wait_run(client, handler_id)
        page = (await client.get(f"/runs/{failed_id}")).text
        assert re.search(r'class="event">push<', page) and 'class="delivery">d-77<' in page
        assert "x-github-delivery" in page and "signature" not in page
        assert f'href="/runs/{handler_id}"' in page.split('id="handlers"')[1]
        lanes = re.findall(r'<div class="lane st-(\w+)[^"]*" data-lane="(\w+)"', page)
        assert lanes == [("failed", "dump"), ("skipped", "upload")], lanes
        assert 'id="run-ended"' in page and "No step has started" not in page
        handler_page = (await client.get(f"/runs/{handler_id}")).text
        assert f'href="/runs/{failed_id}"' in handler_page.split('id="failure-of"')[1]
        listing = (await client.get("/runs")).text
        assert re.search(r'<td class="duration">\d', listing), listing
        assert f'failure of <a href="/runs/{failed_id}">' in listing
        icon = await client.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
