"""Cached steps on the server (SPEC §26): the run page marks a step answered from the cache
and says what it saved; the run's JSON says it too; ``/metrics`` counts hits, misses and the
tokens hits saved."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from prometheus_client.parser import text_string_to_metric_families

from brain import llm, workflow
from brain.server import create_app
from brain.testing import FakeChatServer, completion

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_a_cached_step_is_marked_and_counted(fake_llm: FakeChatServer) -> None:
    @workflow(name="cached_ask")
    def cached_ask() -> None:
        llm("ask", prompt="hello", cache="1d")

    fake_llm.respond(json={**completion("hi", model="fake-model"),
                           "usage": {"prompt_tokens": 40, "completion_tokens": 2}})
    app = create_app([cached_ask], triggers=False)
    async with AsyncTestClient(app, base_url="http://127.0.0.1", timeout=60) as client:
        runs: list[Any] = []
        for _ in range(3):
            r = await client.post("/api/workflows/cached_ask/runs", json={"wait": True})
            assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
            r = await client.get(f"/api/runs/{r.json()['run_id']}")
            runs.append(r.json())
        assert len(fake_llm.requests) == 1
        first, hit = runs[0]["steps"][0], runs[2]["steps"][0]
        assert first["cached"] is False and first["usage"] == {"prompt_tokens": 40,
                                                                "completion_tokens": 2}
        assert hit["cached"] is True and hit["usage"] is None
        assert hit["saved_usage"] == {"prompt_tokens": 40, "completion_tokens": 2}
        page = (await client.get(f"/runs/{runs[2]['run_id']}")).text
        step = re.search(r'<details class="step[^"]*" id="step-ask".*?</details>', page, re.S)
        assert step is not None
        assert '<span class="cached"' in step.group(0).split("</summary>")[0]
        assert "answered from the cache: saved 40 prompt + 2 completion tokens" in step.group(0)
        assert '<span class="cached"' not in (await client.get(f"/runs/{runs[0]['run_id']}")).text

        deadline = asyncio.get_running_loop().time() + 30
        while True:
            got = _samples((await client.get("/metrics")).text)
            if got.get(("brain_cache_hits_total", (("kind", "llm"), ("workflow", "cached_ask")))) == 2:
                break
            assert asyncio.get_running_loop().time() < deadline, got
            await asyncio.sleep(0.05)
    labels = (("kind", "llm"), ("workflow", "cached_ask"))
    assert got[("brain_cache_misses_total", labels)] == 1
    saved = (("kind", "prompt"), ("model", "fake-model"), ("workflow", "cached_ask"))
    assert got[("brain_llm_tokens_saved_total", saved)] == 80
