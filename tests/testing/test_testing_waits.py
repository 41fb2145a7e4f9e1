"""``brain.testing`` and the steps that wait (SPEC §16, §10): sleeps end at once with the
wake time they would have had, approvals and ``wait_for`` steps take mocks by name (or
kind), unmocked ones take their default or fail naming the step."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from brain import approval, for_each, parallel, shell, sleep, trigger, wait_for, when, workflow
from brain.results import RunStatus, StepStatus
from brain.testing import MockCall, arun_workflow, run_workflow


@workflow(name="t_deploy")
def deploy():
    plan = shell("plan", argv=["terraform", "plan", "-no-color"])
    ok = approval("go", prompt=f"Apply this plan?\n\n{plan}", timeout="4h")
    with when(ok):
        shell("apply", argv=["terraform", "apply", "-auto-approve"])
        sleep("settle", "1h")
        shell("check", argv=["curl", "-fsS", "https://example.com/health"])
    shell("rollback", argv=["echo", "rolled back"], when=~ok)
    ci = wait_for("ci", signal="ci-finished", key=trigger.body, timeout="1h")
    shell("report", argv=["tee", "ci.json"], stdin=f"{ci}")


SHELL_MOCKS = {"plan": "3 to add", "apply": "", "check": "ok", "rollback": "rb", "report": ""}


def statuses(result) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {name: str(s.status) for name, s in result.steps.items()}


@pytest.mark.parametrize("go", ["true", True, " Yes\n", lambda call: "true"])
def test_an_approval_mocked_true_runs_its_when_branch(go: object) -> None:
    r = run_workflow(deploy, trigger={"body": "abc"},
                     mocks={**SHELL_MOCKS, "go": go, "ci": {"passed": True}}, strict=True)
    assert r.succeeded, r.error
    assert statuses(r) == {"plan": "succeeded", "go": "succeeded", "apply": "succeeded",
                           "settle": "succeeded", "check": "succeeded", "rollback": "skipped",
                           "ci": "succeeded", "report": "succeeded"}
    assert r.steps["report"].inputs["stdin"] == '{"passed":true}'


@pytest.mark.parametrize("go", ["false", False, "no"])
def test_an_approval_mocked_false_skips_its_when_branch(go: object) -> None:
    r = run_workflow(deploy, trigger={"body": "abc"},
                     mocks={**SHELL_MOCKS, "go": go, "ci": "done"})
    assert r.succeeded, r.error
    assert [r.steps[n].status for n in ("apply", "settle", "check")] == [StepStatus.SKIPPED] * 3
    assert r.steps["rollback"].output == "rb"
    assert "apply" not in r.calls and "check" not in r.calls
    assert r.steps["report"].inputs["stdin"] == "done"


def test_the_mock_call_of_an_approval_has_the_resolved_prompt() -> None:
    r = run_workflow(deploy, trigger={"body": "abc"},
                     mocks={**SHELL_MOCKS, "go": "false", "ci": "done"})
    [call] = r.calls["go"]
    assert isinstance(call, MockCall)
    assert (call.name, call.kind, call.try_number, call.index) == ("go", "approval", 1, None)
    assert call.inputs == {"prompt": "Apply this plan?\n\n3 to add"}
    assert r.steps["go"].inputs == {"prompt": "Apply this plan?\n\n3 to add"}
    [ci] = r.calls["ci"]
    assert ci.kind == "wait_for"
    assert ci.inputs == {"signal": "ci-finished", "key": "abc"}


def test_a_callable_mock_decides_from_the_step_it_gets() -> None:
    seen: list[MockCall] = []

    def decide(call: MockCall) -> bool:
        seen.append(call)
        return "3 to add" in call.inputs["prompt"]

    r = run_workflow(deploy, trigger={"body": "abc"},
                     mocks={**SHELL_MOCKS, "go": decide, "ci": lambda call: call.inputs["key"]})
    assert r.succeeded, r.error
    assert r.steps["go"].output == "true"
    assert r.steps["ci"].output == "abc"
    assert [c.name for c in seen] == ["go"]


def test_sleeps_end_at_once_with_the_wake_time_they_would_have_had() -> None:
    @workflow(name="t_sleepy")
    def sleepy():
        nap = sleep("nap", "1h")
        long = sleep("long", "30d")
        at = sleep("at", until="2099-01-01T12:00:00+02:00")
        past = sleep("past", until=trigger.body)
        shell("after", argv=["echo", f"{nap} {long} {at} {past}"])

    before = datetime.now(UTC)
    r = run_workflow(sleepy, trigger={"body": "2001-02-03T04:05:06-01:00"},
                     mocks={"after": lambda call: " ".join(call.inputs["argv"][1:])})
    after = datetime.now(UTC)
    assert r.succeeded, r.error
    nap = datetime.fromisoformat(r.steps["nap"].output)
    assert after < nap  # the run was back before the first wake time: nothing was waited for
    assert nap.utcoffset() == timedelta(0)
    assert before + timedelta(hours=1) - timedelta(seconds=1) <= nap
    assert nap <= after + timedelta(hours=1) + timedelta(seconds=1)
    long = datetime.fromisoformat(r.steps["long"].output)
    assert before + timedelta(days=30) - timedelta(seconds=1) <= long
    assert long <= after + timedelta(days=30) + timedelta(seconds=1)
    assert r.steps["at"].output == "2099-01-01T10:00:00+00:00"
    assert r.steps["past"].output == "2001-02-03T05:05:06+00:00"
    assert r.steps["after"].output == " ".join(r.steps[n].output for n in
                                               ("nap", "long", "at", "past"))
    assert all(r.steps[n].tries == 1 for n in ("nap", "long", "at", "past"))
    assert "nap" not in r.calls  # unmocked: the sleep itself ended at once


def test_a_bad_resolved_until_fails_the_sleep_as_in_a_real_run() -> None:
    @workflow(name="t_bad_until")
    def bad_until():
        sleep("at", until=trigger.body)

    r = run_workflow(bad_until, trigger={"body": "someday"})
    assert r.status == RunStatus.FAILED
    assert "until='someday' is not an ISO 8601 time" in (r.steps["at"].error or "")


def test_a_sleep_can_be_mocked_by_name_too() -> None:
    @workflow(name="t_mocked_sleep")
    def mocked_sleep():
        nap = sleep("nap", "2h")
        shell("after", argv=["echo", f"{nap}"])

    r = run_workflow(mocked_sleep, mocks={"nap": "2030-01-01T00:00:00+00:00", "after": "x"})
    assert r.steps["nap"].output == "2030-01-01T00:00:00+00:00"
    assert r.calls["after"][0].inputs["argv"] == ["echo", "2030-01-01T00:00:00+00:00"]


@pytest.mark.parametrize("strict", [False, True])
def test_unmocked_waits_with_a_default_take_it(strict: bool) -> None:
    @workflow(name="t_defaults")
    def defaults():
        yes = approval("yes", "ok?", timeout="1h", default=True)
        no = approval("no", "ok?", timeout="1h", default=False)
        ci = wait_for("ci", signal="ci", timeout="10m", default={"ok": None, "n": [1, 2]})
        text = wait_for("text", signal="ci", timeout="10m", default="nothing came")
        shell("yes_branch", argv=["echo", "y"], when=yes)
        shell("no_branch", argv=["echo", "n"], when=no)
        sleep("nap", "1h")
        shell("report", argv=["echo", f"{ci} / {text}"])

    r = run_workflow(defaults, mocks={"shell": "mocked"}, strict=strict)
    assert r.succeeded, r.error
    assert (r.steps["yes"].output, r.steps["no"].output) == ("true", "false")
    assert r.steps["ci"].output == '{"ok":null,"n":[1,2]}'
    assert r.steps["text"].output == "nothing came"
    assert r.steps["yes_branch"].status == StepStatus.SUCCEEDED
    assert r.steps["no_branch"].status == StepStatus.SKIPPED
    assert r.steps["nap"].status == StepStatus.SUCCEEDED  # strict does not fail a sleep
    assert r.calls["report"][0].inputs["argv"] == ["echo", '{"ok":null,"n":[1,2]} / nothing came']
    assert not {"yes", "no", "ci", "text", "nap"} & set(r.calls)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize(("make", "what"), [
    (lambda: approval("gate", "ok?"), "a decision"),
    (lambda: approval("gate", "ok?", timeout="1h"), "a decision"),
    (lambda: wait_for("gate", signal="ci-finished", timeout="1h"), "signal 'ci-finished'"),
])
def test_unmocked_waits_without_a_default_fail_naming_the_step(
        strict: bool, make: object, what: str) -> None:
    @workflow(name="t_no_default")
    def no_default():
        make()  # type: ignore[operator]
        shell("after", argv=["echo", "never"])

    r = run_workflow(no_default, mocks={"after": "x"}, strict=strict)
    assert r.status == RunStatus.FAILED
    gate = r.steps["gate"]
    assert gate.status == StepStatus.FAILED
    assert gate.error is not None
    assert "'gate'" in gate.error and what in gate.error
    assert "mocks={'gate': ...}" in gate.error
    assert gate.tries == 1
    assert r.steps["after"].status != StepStatus.SUCCEEDED
    assert "'gate'" in (r.error or "")


def test_strict_still_fails_other_unmocked_steps_beside_waits() -> None:
    @workflow(name="t_strict")
    def strict_flow():
        sleep("nap", "1h")
        shell("real", argv=["echo", "would run"])

    r = run_workflow(strict_flow, strict=True)
    assert r.status == RunStatus.FAILED
    assert r.steps["nap"].status == StepStatus.SUCCEEDED
    assert "step 'real' (shell) is not mocked and strict=True" in (r.steps["real"].error or "")


def test_wait_for_mocked_with_data_gives_compact_json() -> None:
    @workflow(name="t_wait_data")
    def wait_data():
        ci = wait_for("ci", signal="ci", key=trigger.body)
        shell("report", argv=["echo", f"{ci}"])

    r = run_workflow(wait_data, trigger={"body": "k1"},
                     mocks={"ci": {"status": "green", "jobs": [1, 2], "é": None},
                            "report": lambda call: call.inputs["argv"][1]})
    assert r.succeeded, r.error
    assert r.steps["ci"].output == '{"status":"green","jobs":[1,2],"é":null}'
    assert r.steps["report"].output == r.steps["ci"].output
    assert r.calls["ci"][0].inputs == {"signal": "ci", "key": "k1"}


def test_waits_mocked_by_kind_and_per_for_each_instance() -> None:
    @workflow(name="t_kinds")
    def kinds():
        with for_each(["eu", "us", "ap"], name="region") as region:
            ok = approval("ok", prompt=f"Deploy to {region}?")
            shell("deploy", argv=["echo", f"{region}"], when=ok)
        with parallel():
            wait_for("a", signal="s1")
            wait_for("b", signal="s2")

    def per_region(call: MockCall) -> bool:
        return call.index != 1

    r = run_workflow(kinds, mocks={"approval": per_region, "wait_for": "signalled",
                                   "deploy": "done"})
    assert r.succeeded, r.error
    assert [c.inputs["prompt"] for c in sorted(r.calls["ok"], key=lambda c: c.index or 0)] == [
        "Deploy to eu?", "Deploy to us?", "Deploy to ap?"]
    assert [r.steps[f"ok[{i}]"].output for i in range(3)] == ["true", "false", "true"]
    assert [r.steps[f"deploy[{i}]"].status for i in range(3)] == [
        StepStatus.SUCCEEDED, StepStatus.SKIPPED, StepStatus.SUCCEEDED]
    assert (r.steps["a"].output, r.steps["b"].output) == ("signalled", "signalled")


def test_a_mock_that_raises_fails_the_wait() -> None:
    @workflow(name="t_raises")
    def raises():
        approval("go", "ok?")

    def refuse(call: MockCall) -> str:
        raise RuntimeError("nobody home")

    r = run_workflow(raises, mocks={"go": refuse})
    assert r.status == RunStatus.FAILED
    assert "nobody home" in (r.steps["go"].error or "")


def test_a_mock_key_naming_no_step_or_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="'nope'"):
        run_workflow(deploy, mocks={"nope": "true"})


async def test_the_async_form_ends_sleeps_at_once_too() -> None:
    @workflow(name="t_async")
    def async_flow():
        sleep("nap", "1d")
        approval("go", "ok?")

    r = await arun_workflow(async_flow, mocks={"go": True})
    assert r.succeeded, r.error
    assert r.steps["go"].output == "true"
    assert datetime.fromisoformat(r.steps["nap"].output) > datetime.now(UTC) + timedelta(hours=23)
