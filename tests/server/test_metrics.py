"""``GET /metrics`` (SPEC §14): the Prometheus text format, parsed by prometheus_client's own
parser, with the counts of what was really run and delivered."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from prometheus_client.parser import text_string_to_metric_families

from brain import every, shell, webhook, workflow
from brain.server import create_app
from brain.server.webhooks import sign

pytestmark = pytest.mark.usefixtures("collect_garbage_first")
SECRET = "metrics-webhook-secret"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


async def test_metrics_count_runs_steps_deliveries_and_fires(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METRICS_HOOK_SECRET", SECRET)

    @workflow(name="good")
    def good() -> None:
        shell("one", argv=["echo", "one"])
        shell("two", argv=["echo", "two"])

    @workflow(name="bad")
    def bad() -> None:
        shell("boom", command="exit 3")

    @workflow(name="hooked", triggers=[webhook(secret_env="METRICS_HOOK_SECRET")])
    def hooked() -> None:
        shell("got", argv=["echo", "got"])

    @workflow(name="ticking", triggers=[every(seconds=1)])
    def ticking() -> None:
        shell("tick", argv=["echo", "tick"])

    app = create_app([good, bad, hooked, ticking])
    async with AsyncTestClient(app, base_url="http://127.0.0.1", timeout=60) as client:
        for name in ("good", "good", "bad"):
            r = await client.post(f"/api/workflows/{name}/runs", json={"wait": True})
            assert r.status_code == 200, r.text
        body = b'{"n": 1}'
        signed = {"X-Brain-Signature": sign(SECRET, body), "X-GitHub-Delivery": "d-1"}
        assert (await client.post("/hooks/hooked", content=body, headers=signed)).status_code == 202
        assert (await client.post("/hooks/hooked", content=body, headers=signed)).status_code == 202
        assert (await client.post("/hooks/hooked", content=body,
                                  headers={"X-Brain-Signature": "sha256=00"})).status_code == 401
        huge = b"x" * (1024 * 1024 + 1)
        assert (await client.post("/hooks/hooked", content=huge,
                                  headers={"X-Brain-Signature": sign(SECRET, huge)})
                ).status_code == 413
        # Until the every(seconds=1) schedule has fired and the webhook's run has ended
        # (bounded: a busy machine is slow, an idle one need not wait a fixed time).
        lateness = ("brain_schedule_lateness_seconds_count", (("workflow", "ticking"),))
        succeeded = ("brain_step_duration_seconds_count", (("kind", "shell"), ("status", "succeeded")))
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            r = await client.get("/metrics")
            assert r.status_code == 200, r.text
            got: dict[Any, float] = samples(r.text)
            if got.get(lateness, 0) >= 1 and got.get(succeeded, 0) >= 4:
                break
            assert asyncio.get_running_loop().time() < deadline, r.text
            await asyncio.sleep(0.1)
        assert r.headers["content-type"].startswith("text/plain")

    assert got[("brain_runs_started_total", (("workflow", "good"),))] == 2
    assert got[("brain_runs_ended_total", (("status", "succeeded"), ("workflow", "good")))] == 2
    assert got[("brain_runs_ended_total", (("status", "failed"), ("workflow", "bad")))] == 1
    assert got[("brain_step_duration_seconds_count",
                (("kind", "shell"), ("status", "succeeded")))] >= 4
    assert got[("brain_step_duration_seconds_count",
                (("kind", "shell"), ("status", "failed")))] == 1
    assert got[("brain_webhook_deliveries_total", (("outcome", "accepted"),
                                                   ("workflow", "hooked")))] == 1
    assert got[("brain_webhook_deliveries_total", (("outcome", "duplicate"),
                                                   ("workflow", "hooked")))] == 1
    assert got[("brain_webhook_deliveries_total", (("outcome", "refused"),
                                                   ("workflow", "hooked")))] == 1
    assert got[("brain_webhook_deliveries_total", (("outcome", "too_large"),
                                                   ("workflow", "hooked")))] == 1
    assert got[("brain_schedule_lateness_seconds_count", (("workflow", "ticking"),))] >= 1
    assert ("brain_runs_queued", ()) in got and ("brain_runs_executing", ()) in got


async def test_a_signed_delivery_the_workflow_rejects_counts_invalid_not_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Signed deliveries that are not UTF-8 (400) or whose parameters do not validate
    (422) count ``invalid``; a bad signature still counts ``refused``; nothing is queued."""
    monkeypatch.setenv("METRICS_HOOK_SECRET", SECRET)

    @workflow(name="typed_hook", triggers=[webhook(secret_env="METRICS_HOOK_SECRET")])
    def typed_hook(count: int) -> None:
        shell("got", argv=["echo", "{params.count}"])

    app = create_app([typed_hook], execute=False, triggers=False)
    async with AsyncTestClient(app, base_url="http://127.0.0.1", timeout=60) as client:
        for body, status in [(b"\xff\xfe not text", 400), (b'{"count": "many"}', 422)]:
            r = await client.post("/hooks/typed_hook", content=body,
                                  headers={"X-Brain-Signature": sign(SECRET, body)})
            assert r.status_code == status, r.text
        r = await client.post("/hooks/typed_hook", content=b'{"count": 1}',
                              headers={"X-Brain-Signature": "sha256=00"})
        assert r.status_code == 401, r.text
        got = samples((await client.get("/metrics")).text)
        listed = await client.get("/api/runs")
        assert listed.status_code == 200 and listed.json() == [], listed.text
    deliveries = {dict(labels)["outcome"]: value for (name, labels), value in got.items()
                  if name == "brain_webhook_deliveries_total"}
    assert deliveries == {"invalid": 2, "refused": 1}


async def test_metrics_need_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAIN_API_TOKEN", "metrics-token-000")

    @workflow(name="quiet")
    def quiet() -> None:
        shell("q", argv=["echo", "q"])

    app = create_app([quiet], execute=False, triggers=False)
    async with AsyncTestClient(app, base_url="http://127.0.0.1", timeout=60) as client:
        assert (await client.get("/metrics")).status_code == 401
        # Not in the URL, where proxies and access logs keep it (only a console page's
        # login link takes it there).
        assert (await client.get("/metrics?token=metrics-token-000")).status_code == 401
        r = await client.get("/metrics", headers={"Authorization": "Bearer metrics-token-000"})
        assert r.status_code == 200 and "brain_runs_queued" in r.text
