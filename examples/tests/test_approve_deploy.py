"""Tests for examples/approve_deploy.py: an approval, a sleep and a signal, with mocks.

``brain.testing.run_workflow`` runs the example with the real runner. The shell steps
(``printf``, ``echo``) run for real; the approval ``go`` and the CI signal ``ci`` are
mocked by name, as a person and a CI job would answer them; the ``settle`` sleep ends at
once, its output the time it would have woken. Nothing waits on a clock or a person.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from approve_deploy import SETTLE, approve_deploy

from brain.testing import run_workflow

TRIGGER = {"event": "webhook", "body": '{"ref": "refs/heads/main"}',
           "headers": {"X-Commit": "4f2a9c1"}}
PLAN = "~ service.web: image 1.4.2 -> 1.5.0\nPlan: 0 to add, 1 to change, 0 to destroy."
CI_PASSED = {"passed": True, "tests": 412}
SETTLE_SECONDS = float(SETTLE.removesuffix("s"))      # the example's "5s"


@pytest.fixture(autouse=True)
def _clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """None of the caller's Brain settings; run_workflow keeps its runs in memory."""
    for key in list(os.environ):
        if key.startswith(("BRAIN_", "THE_BRAIN_", "LLM_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("BRAIN_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}")
    yield
    assert not (tmp_path / "brain.db").exists()


def test_approved_the_plan_is_applied_settled_checked_and_ci_reported() -> None:
    r = run_workflow(approve_deploy, TRIGGER, mocks={"go": "true", "ci": CI_PASSED})
    assert r.succeeded, r.error
    assert r.steps["plan"].output == PLAN
    # The person deciding sees the plan in the prompt, as the run resolved it.
    assert r.steps["go"].inputs == {"prompt": f"Apply this plan?\n\n{PLAN}"}
    assert r.steps["go"].output == "true"
    assert r.steps["apply"].output == "Apply complete! Resources: 0 added, 1 changed, 0 destroyed."
    assert r.steps["settle"].status == "succeeded"
    assert r.steps["check"].output == "GET https://example.com/health: 200 OK"
    # The signal is waited for with the commit the webhook named as its key.
    assert r.steps["ci"].inputs == {"signal": "ci-finished", "key": "4f2a9c1"}
    assert r.steps["ci"].output == '{"passed":true,"tests":412}'      # JSON data, kept compact
    assert r.steps["report"].output == 'plan applied; CI said: {"passed":true,"tests":412}'
    assert [c.kind for c in r.calls["go"]] == ["approval"]
    assert set(r.calls) == {"go", "ci"}


def test_rejected_nothing_is_applied_but_ci_is_still_reported() -> None:
    r = run_workflow(approve_deploy, TRIGGER, mocks={"go": "false", "ci": "build 7 green"})
    assert r.succeeded, r.error                         # skipping is not failing
    assert r.steps["go"].output == "false"
    for name in ("apply", "settle", "check"):
        assert r.steps[name].status == "skipped"
        assert r.steps[name].error == "condition {go} is false"
    assert r.steps["report"].output == ("plan not applied (rejected or no decision); "
                                        "CI said: build 7 green")


def test_nobody_deciding_takes_the_default_no() -> None:
    """Unmocked, the approval takes its default (False) as though its 4h ran out."""
    r = run_workflow(approve_deploy, TRIGGER, mocks={"ci": CI_PASSED})
    assert r.succeeded, r.error
    assert r.steps["go"].output == "false"
    assert (r.steps["apply"].status, r.steps["settle"].status,
            r.steps["check"].status) == ("skipped", "skipped", "skipped")
    assert "go" not in r.calls


def test_no_ci_signal_fails_the_run_naming_the_step() -> None:
    """The CI wait has a timeout but no default: unmocked, it fails, saying how to mock it."""
    r = run_workflow(approve_deploy, TRIGGER, mocks={"go": "true"})
    assert r.status == "failed"
    assert r.error == ("step 'ci' failed: step 'ci' waits for signal 'ci-finished': mock it "
                       "(mocks={'ci': ...}) or give it a timeout and a default")
    assert r.steps["check"].status == "succeeded"        # everything before it ran
    assert r.steps["report"].status == "skipped"


def test_the_settle_sleep_ends_at_once_with_its_would_be_wake_time() -> None:
    r = run_workflow(approve_deploy, TRIGGER, mocks={"go": "true", "ci": CI_PASSED})
    assert r.succeeded, r.error
    settle = r.steps["settle"]
    wake = datetime.fromisoformat(settle.output or "")
    assert settle.ended_at is not None and settle.ended_at < wake  # no wall-clock wait
    assert settle.inputs == {"until": settle.output}
    assert wake.utcoffset() == timedelta(0)              # UTC, ISO 8601
    assert settle.started_at is not None
    assert (wake - settle.started_at).total_seconds() == pytest.approx(SETTLE_SECONDS, abs=1)


def test_a_run_without_the_commit_header_fails_at_the_ci_step() -> None:
    """A manual run has no headers: give it one (brain run --header 'X-Commit: ...')."""
    r = run_workflow(approve_deploy, mocks={"go": "true", "ci": CI_PASSED})
    assert r.status == "failed"
    assert r.error == ("step 'ci' failed: {trigger.headers.x-commit}: this run's trigger has no "
                       "header 'x-commit'")
    assert r.steps["check"].status == "succeeded"
