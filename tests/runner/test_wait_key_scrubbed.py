"""A ``wait_for`` key the run has only scrubbed (``deploy-***``: a served run reads its trigger
from the store with secrets replaced, and step outputs are passed on scrubbed) can be matched
to no signal safely: the step fails at once, saying so, instead of waiting for a key nobody
knows. A key with the real secret in it (an in-process run holds its trigger whole) waits."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brain import trigger, wait_for, workflow
from brain._secrets import REDACTED, remember
from brain.store import Store

MESSAGE = "holds a secret this run has only as ***: no signal can be matched to it safely"


@workflow
def keyed():
    wait_for("ci", signal="ci-done", key=trigger.body, timeout="1h")


TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00*"),
               max_size=20)


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=TEXT, after=TEXT)
def test_a_key_holding_the_redaction_mark_fails_the_step_at_once(tmp_path: Path, before: str,
                                                                after: str) -> None:
    key = f"{before}{REDACTED}{after}"
    result = asyncio.run(keyed.arun({"body": key}, store="sqlite+aiosqlite://"))
    assert result.status == "failed", result
    error = result.steps["ci"].error or ""
    assert MESSAGE in error, error
    assert result.steps["ci"].tries == 1


def test_a_key_with_the_secret_itself_waits(tmp_path: Path) -> None:
    """The in-process run holds the real key: it waits (and is cut short here by a cancel,
    the step never having failed)."""
    remember("the-real-secret-value")

    async def run_a_little() -> str:
        url = f"sqlite+aiosqlite:///{tmp_path}/b.db"
        task = asyncio.ensure_future(keyed.arun({"body": "deploy-the-real-secret-value"},
                                                store=url))
        try:
            async with Store(url) as store:
                for _ in range(600):
                    runs = await store.list_runs(limit=1)
                    if runs:
                        step = (await store.get_run(runs[0].run_id)).steps["ci"]
                        if step.status == "waiting":
                            return "waiting"
                        assert step.status in ("pending", "running"), step
                    await asyncio.sleep(0.1)
            return "never waited"
        finally:
            task.cancel()

    assert asyncio.run(run_a_little()) == "waiting"
