"""``brain.testing.run_workflow`` / ``arun_workflow`` and the pytest plugin, against SPEC §10.

Every claim is checked against something real: the isolation of mocked steps
with audit hooks in a child process (and a control run that does spawn and
connect), the recorded inputs against a real run of the same workflow (real
shell, a FakeChatServer, a tiny MCP server: tests/testing/mcp_echo_server.py),
halting against a real failing run, and the plugin from a plain ``pytest``
run in an empty folder.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from brain import (
    StepFailed,
    cron,
    llm,
    mcp_tool,
    parallel,
    secret,
    shell,
    step,
    trigger,
    webhook,
    workflow,
)
from brain.store import Store
from brain.testing import FakeChatServer, MockCall, MockedRunResult, arun_workflow, run_workflow

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ECHO_SERVER = str(HERE / "mcp_echo_server.py")


def statuses(result: MockedRunResult | Any) -> dict[str, str]:
    return {name: str(s.status) for name, s in result.steps.items()}


def stored_runs(store: Store, workflow_name: str | None = None) -> list[Any]:
    return asyncio.run(store.list_runs(workflow=workflow_name, limit=100))


# --- a mocked step opens nothing: audit hooks in a child process -------------------------------

CHILD = r'''
import json, sys

mode, mark_dir, echo_server = sys.argv[1:4]

from brain import llm, mcp_tool, shell, step, workflow
from brain.testing import FakeChatServer, run_workflow

chat = FakeChatServer(reply="from the fake server").start()


@step
def shout(text: str) -> str:
    return text.upper()


@workflow
def isolation():
    said = shell("say", command="touch shell-ran; echo said")
    shell("touch", argv=["touch", "argv-ran"])
    asked = llm("ask", prompt=f"Repeat: {said}", model="m", provider_url=chat.url)
    tool = mcp_tool("tool", server_command=[sys.executable, echo_server], tool="echo_args",
                    args={"text": f"{asked}"}, env={"ECHO_MARK_DIR": mark_dir})
    shout(tool)


SPAWN = ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
         "os.system", "os.startfile", "pty.spawn")
NET = ("socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto",
       "socket.sendmsg")
events = []


def audit(name, args):
    if name.startswith(SPAWN):
        events.append({"event": name, "detail": repr(args[:2])[:500]})
    elif name in NET:
        if name == "socket.__new__":
            frame = sys._getframe(1)
            while frame is not None:  # the event loop's own wake-up socketpair is not I/O
                if frame.f_code.co_name == "_make_self_pipe":
                    return
                frame = frame.f_back
            events.append({"event": name, "detail": f"family={args[1]}"})
        else:
            events.append({"event": name, "detail": repr(args[1:])[:500]})


sys.addaudithook(audit)
mocks = ({"shell": "mocked shell", "llm": "mocked llm", "mcp_tool": "mocked tool"}
         if mode == "mocked" else {})
result = run_workflow(isolation, mocks=mocks)
print("REPORT " + json.dumps({
    "status": str(result.status), "error": result.error,
    "outputs": {n: s.output for n, s in result.steps.items()},
    "calls": sorted(result.calls), "chat_requests": len(chat.requests), "events": events}))
'''


def run_isolation_child(tmp_path: Path, mode: str) -> dict[str, Any]:
    script = tmp_path / "isolation_wf.py"
    script.write_text(CHILD)
    proc = subprocess.run([sys.executable, str(script), mode, str(tmp_path), ECHO_SERVER],
                          cwd=tmp_path, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr
    report = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert len(report) == 1, proc.stdout
    return json.loads(report[0][len("REPORT "):])  # type: ignore[no-any-return]


def test_mocked_shell_llm_and_mcp_steps_spawn_no_process_and_open_no_socket(tmp_path: Path) -> None:
    report = run_isolation_child(tmp_path, "mocked")
    assert report["status"] == "succeeded", report["error"]
    assert report["events"] == []
    assert report["chat_requests"] == 0
    assert report["calls"] == ["ask", "say", "tool", "touch"]
    # The unmocked @step still ran for real, on the mocked MCP output.
    assert report["outputs"]["shout"] == "MOCKED TOOL"
    assert report["outputs"]["tool"] == "mocked tool"
    # Nothing the real steps would have left behind exists.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["isolation_wf.py"]


def test_control_the_same_audit_sees_the_real_steps_spawn_and_connect(tmp_path: Path) -> None:
    report = run_isolation_child(tmp_path, "real")
    assert report["status"] == "succeeded", report["error"]
    assert report["outputs"]["say"] == "said"
    assert report["outputs"]["ask"] == "from the fake server"
    assert json.loads(report["outputs"]["tool"])["args"] == {"text": "from the fake server"}
    spawned = [e["detail"] for e in report["events"] if e["event"] == "subprocess.Popen"]
    assert any("/bin/sh" in d and "touch shell-ran" in d for d in spawned), spawned
    assert any("'touch'" in d and "argv-ran" in d for d in spawned), spawned
    assert any(ECHO_SERVER in d for d in spawned), spawned
    connects = [e["detail"] for e in report["events"] if e["event"] == "socket.connect"]
    assert any("127.0.0.1" in d for d in connects), report["events"]
    assert report["chat_requests"] == 1
    names = {p.name for p in tmp_path.iterdir()}
    assert {"shell-ran", "argv-ran"} <= names
    assert any(n.startswith("mcp-") for n in names)


# --- resolved inputs are exactly what a real run sends ------------------------------------------

COMBINED: list[dict[str, Any]] = []


@step
def combine(tool_out: dict, note: str, bits: list) -> dict:
    COMBINED.append({"tool_out": tool_out, "note": note, "bits": bits})
    return {"args": tool_out["args"], "note": note, "bits": bits}


def parity_workflow(chat_url: str) -> Any:
    @workflow(name="parity")
    def parity() -> None:
        seed = shell("seed", command=f"printf '%s' {trigger.body}")
        listed = shell("listed",
                       argv=["sh", "-c", 'printf "%s|%s|%s|%s" "$1" "$2" "$(cat)" "$SEED"', "sh",
                             f"{seed}", "{trigger.headers.x-kind}"],
                       stdin=f"in:{seed}", env={"SEED": f"seed={seed}", "TOKEN": secret("PARITY_TOKEN")})
        asked = llm("ask", system=f"You are an {trigger.headers['X-Kind']}.",
                    prompt=f"Summarise: {listed}", model="m-1", provider_url=chat_url + "/",
                    api_key=secret("PARITY_KEY"), temperature=0.1, max_tokens=50)
        tool = mcp_tool("tool", server_command=[sys.executable, ECHO_SERVER, "--seed", f"{seed}"],
                        tool="echo_args",
                        args={"text": f"{asked}", "count": 3, "nested": {"kept": "{seed}"},
                              "flag": True},
                        env={"ECHO_TAG": f"tag-{seed}"})
        combine(tool, f"seed={seed}", ["{listed}", {"deep": f"{asked}"}, 7])

    return parity


BODY = "it's $HOME & `uname` {seed}"
PARITY_TRIGGER = {"body": BODY, "headers": {"X-Kind": "analyst"}}


def test_mocked_inputs_are_exactly_what_the_real_run_sent(brain_db: Store,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARITY_TOKEN", "tok-123-long-enough")
    monkeypatch.setenv("PARITY_KEY", "key-456-long-enough")
    COMBINED.clear()
    with FakeChatServer(reply="a careful summary") as chat:
        wf = parity_workflow(chat.url)
        real = wf.run(PARITY_TRIGGER, store=brain_db)   # the plain runner: nothing mocked
        assert real.succeeded, real.error
        steps = real.steps

        # What the real run sent is what it recorded.
        assert steps["seed"].output == BODY                      # the quoted command, run by sh
        assert steps["listed"].inputs == {
            "argv": ["sh", "-c", 'printf "%s|%s|%s|%s" "$1" "$2" "$(cat)" "$SEED"', "sh", BODY,
                     "analyst"],
            "stdin": f"in:{BODY}", "env": {"SEED": f"seed={BODY}", "TOKEN": "***"}}
        assert steps["listed"].output == f"{BODY}|analyst|in:{BODY}|seed={BODY}"
        [request] = chat.requests
        ask = steps["ask"].inputs
        assert ask["url"] == chat.url + "/chat/completions"
        assert ask["api_key"] == "***"
        assert request.path == "/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer key-456-long-enough"
        assert request.json == {"model": ask["model"], "temperature": ask["temperature"],
                                "max_tokens": ask["max_tokens"],
                                "messages": [{"role": "system", "content": ask["system"]},
                                             {"role": "user", "content": ask["prompt"]}]}
        assert ask["system"] == "You are an analyst."
        assert ask["prompt"] == f"Summarise: {steps['listed'].output}"
        tool = steps["tool"].inputs
        echoed = json.loads(steps["tool"].output)
        assert echoed["args"] == tool["args"] == {"text": "a careful summary", "count": 3,
                                                  "nested": {"kept": "{seed}"}, "flag": True}
        assert tool["server_command"] == [sys.executable, ECHO_SERVER, "--seed", BODY]
        assert echoed["argv"] == ["--seed", BODY]
        assert echoed["tag"] == tool["env"]["ECHO_TAG"] == f"tag-{BODY}"
        assert steps["combine"].inputs == {"tool_out": steps["tool"].output, "note": f"seed={BODY}",
                                           "bits": [steps["listed"].output,
                                                    {"deep": "a careful summary"}, 7]}
        assert COMBINED == [{"tool_out": echoed, "note": f"seed={BODY}",
                             "bits": [steps["listed"].output, {"deep": "a careful summary"}, 7]}]

        # The same workflow, every step mocked with the real outputs, secrets unset.
        monkeypatch.delenv("PARITY_TOKEN")
        monkeypatch.delenv("PARITY_KEY")
        mocks = {name: (lambda call, out=s.output: out) for name, s in steps.items()}
        mocked = run_workflow(wf, PARITY_TRIGGER, mocks=mocks)
        assert len(chat.requests) == 1                           # the mocked llm sent nothing

    assert mocked.succeeded, mocked.error
    assert len(COMBINED) == 1                                    # the mocked @step did not run
    assert list(mocked.steps) == list(steps)
    for name, real_step in steps.items():
        assert mocked.steps[name].inputs == real_step.inputs, name
        assert mocked.calls[name] == [MockCall(name, real_step.kind, real_step.inputs, 1)], name
        assert mocked.steps[name].output == real_step.output, name


def test_missing_secrets_and_model_are_tolerated_only_for_mocked_steps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LLM_MODEL", "LLM_API_KEY", "UNSET_KEY_FOR_TEST", "UNSET_TOKEN_FOR_TEST"):
        monkeypatch.delenv(name, raising=False)

    @workflow(name="needs_setup")
    def needs_setup() -> None:
        llm("ask", prompt="hi", api_key=secret("UNSET_KEY_FOR_TEST"))     # no model anywhere
        shell("use", argv=["true"], env={"T": secret("UNSET_TOKEN_FOR_TEST")})

    mocked = run_workflow(needs_setup, mocks={"llm": "hello", "shell": ""})
    assert mocked.succeeded, mocked.error
    assert mocked.steps["ask"].inputs["api_key"] == "***"
    assert mocked.steps["ask"].inputs["model"] is None
    assert mocked.steps["use"].inputs["env"] == {"T": "***"}

    real_llm = run_workflow(needs_setup, mocks={"use": ""})
    assert real_llm.status == "failed"
    assert real_llm.steps["ask"].status == "failed"
    assert "no model given" in (real_llm.steps["ask"].error or "")
    assert "ask" not in real_llm.calls

    real_shell = run_workflow(needs_setup, mocks={"ask": "hello"})
    assert real_shell.status == "failed"
    assert real_shell.error == ("step 'use' failed: secret UNSET_TOKEN_FOR_TEST is not set in the "
                                "environment")


# --- retries and failures -----------------------------------------------------------------------

@workflow(name="retrying")
def retrying() -> None:
    shell("flaky", argv=["echo", "{trigger.body}"], retries=2, retry_delay_seconds=0)
    shell("after", argv=["echo", "after ran"])


def test_retries_call_the_mock_again_until_it_answers() -> None:
    def third_time_lucky(call: MockCall) -> str:
        if call.try_number < 3:
            raise ConnectionError(f"try {call.try_number} failed")
        return f"answered on try {call.try_number}"

    r = run_workflow(retrying, "x", mocks={"flaky": third_time_lucky})
    assert r.succeeded, r.error
    assert [c.try_number for c in r.calls["flaky"]] == [1, 2, 3]
    assert all(c.inputs == {"argv": ["echo", "x"]} for c in r.calls["flaky"])
    assert r.steps["flaky"].tries == 3
    assert r.steps["flaky"].output == "answered on try 3"
    assert r.steps["after"].output == "after ran"


def test_a_mock_that_keeps_failing_fails_the_step_after_its_last_try() -> None:
    def always(call: MockCall) -> str:
        raise ConnectionError(f"down on try {call.try_number}")

    r = run_workflow(retrying, "x", mocks={"flaky": always})
    assert r.status == "failed"
    assert [c.try_number for c in r.calls["flaky"]] == [1, 2, 3]
    assert r.steps["flaky"].status == "failed"
    assert r.steps["flaky"].tries == 3
    assert "down on try 3" in (r.steps["flaky"].error or "")
    assert r.error == f"step 'flaky' failed: {r.steps['flaky'].error}"
    assert r.steps["after"].status == "skipped"
    assert r.steps["after"].output is None


def test_a_non_retryable_step_failed_from_a_mock_is_not_retried() -> None:
    def refuse(call: MockCall) -> str:
        raise StepFailed("HTTP 401: bad key", retryable=False)

    r = run_workflow(retrying, "x", mocks={"flaky": refuse})
    assert len(r.calls["flaky"]) == 1
    assert r.steps["flaky"].error == "HTTP 401: bad key"
    assert r.error == "step 'flaky' failed: HTTP 401: bad key"


@workflow(name="halting")
def halting() -> None:
    first = shell("first", argv=["echo", "one"])
    with parallel():
        shell("slow", command="sleep 30")
        shell("bad", command="echo 'it broke' >&2; exit 3")
    shell("last", argv=["echo", f"{first}"])


def test_a_raising_mock_fails_and_halts_the_run_as_a_real_failure_does(brain_db: Store) -> None:
    real = halting.run(store=brain_db)
    assert real.status == "failed"
    assert real.error == "step 'bad' failed: command failed with exit code 3: it broke"

    seen: list[str] = []

    async def slow(call: MockCall) -> str:
        seen.append("started")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "never"

    def bad(call: MockCall) -> str:
        raise RuntimeError("it broke")

    mocked = run_workflow(halting, mocks={"slow": slow, "bad": bad})
    assert mocked.status == "failed"
    assert statuses(mocked) == statuses(real) == {
        "first": "succeeded", "slow": "cancelled", "bad": "failed", "last": "skipped"}
    assert mocked.steps["bad"].error is not None
    assert mocked.steps["bad"].error.endswith("it broke")
    assert mocked.error == f"step 'bad' failed: {mocked.steps['bad'].error}"
    assert seen == ["started", "cancelled"]
    assert "last" not in mocked.calls
    assert mocked.steps["last"].output is None


# --- strict mode --------------------------------------------------------------------------------

def test_strict_fails_an_unmocked_step_naming_it(tmp_path: Path) -> None:
    marker = tmp_path / "fetched"
    judged: list[str] = []

    @step
    def record(verdict: str) -> str:
        judged.append(verdict)
        return verdict

    @workflow(name="strictly")
    def strictly() -> None:
        fetched = shell("fetch", argv=["touch", str(marker)], retries=2, retry_delay_seconds=0)
        verdict = llm("judge", prompt=f"Judge: {fetched}", model="m")
        record(verdict)

    r = run_workflow(strictly, mocks={"judge": "fine", "step": "x"}, strict=True)
    assert r.status == "failed"
    assert r.steps["fetch"].status == "failed"
    assert r.steps["fetch"].tries == 1                     # not retried: mocking is missing
    assert "'fetch'" in (r.steps["fetch"].error or "")
    assert "strict" in (r.steps["fetch"].error or "")
    assert r.error == f"step 'fetch' failed: {r.steps['fetch'].error}"
    assert not marker.exists()
    assert statuses(r)["judge"] == statuses(r)["record"] == "skipped"

    everything = run_workflow(strictly, mocks={"fetch": "data", "judge": "fine", "record": "ok"},
                              strict=True)
    assert everything.succeeded, everything.error
    assert everything.steps["judge"].inputs["prompt"] == "Judge: data"
    assert not marker.exists()
    assert judged == []


def test_strict_names_an_unmocked_llm_step_even_when_it_has_no_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In strict mode the problem is the missing mock, not the missing model or secret."""
    monkeypatch.delenv("LLM_MODEL", raising=False)

    @workflow(name="strict_llm")
    def strict_llm() -> None:
        llm("summary", prompt="hi", api_key=secret("UNSET_KEY_FOR_TEST"))

    r = run_workflow(strict_llm, strict=True)
    assert r.status == "failed"
    assert "not mocked" in (r.steps["summary"].error or ""), r.steps["summary"].error


# --- previous -----------------------------------------------------------------------------------

@step
def bump(last: str) -> str:
    return str(int(last or 0) + 1)


@workflow(name="counter")
def counter() -> None:
    count = bump.with_options(name="count")("{previous.count}")
    shell("say", argv=["echo", f"was {{previous.count}}, now {count}"])


def test_previous_seeds_previous_placeholders() -> None:
    r = run_workflow(counter, previous={"count": "41"})
    assert r.succeeded, r.error
    assert r.steps["count"].inputs == {"last": "41"}
    assert r.steps["count"].output == "42"
    assert r.steps["say"].inputs["argv"] == ["echo", "was 41, now 42"]
    assert r.steps["say"].output == "was 41, now 42"

    fresh = run_workflow(counter)
    assert fresh.steps["count"].inputs == {"last": ""}
    assert fresh.steps["say"].output == "was , now 1"

    mocked = run_workflow(counter, previous={"count": "9"},
                          mocks={"say": lambda call: call.inputs["argv"][1].upper()})
    assert mocked.steps["say"].output == "WAS 9, NOW 10"


# --- mocks by kind, by name, and mistakes -------------------------------------------------------

RAN: list[str] = []


@step
def first_fn(x: str) -> str:
    RAN.append("first_fn")
    return x


@step
def second_fn(x: str) -> str:
    RAN.append("second_fn")
    return x


@workflow(name="kinds")
def kinds() -> None:
    s1 = shell("s1", argv=["false"])                              # would fail for real
    s2 = shell("s2", argv=["false"])
    l1 = llm("l1", prompt=f"about {s1}", model="m", provider_url="http://192.0.2.1:9/v1")
    m1 = mcp_tool("m1", server_command="no-such-mcp-server --flag", tool="t", args={"q": f"{l1}"})
    first_fn(m1)
    second_fn(s2)


def test_kind_keys_mock_every_step_of_the_kind_and_a_step_name_wins() -> None:
    RAN.clear()
    r = run_workflow(kinds, mocks={
        "shell": "S", "llm": lambda call: f"L({call.inputs['prompt']})", "mcp_tool": "M",
        "step": lambda call: f"F[{call.name}:{call.inputs['x']}]", "s2": "specific"})
    assert r.succeeded, r.error
    assert {n: s.output for n, s in r.steps.items()} == {
        "s1": "S", "s2": "specific", "l1": "L(about S)", "m1": "M",
        "first_fn": "F[first_fn:M]", "second_fn": "F[second_fn:specific]"}
    assert {n: [(c.kind, c.try_number) for c in calls] for n, calls in r.calls.items()} == {
        "s1": [("shell", 1)], "s2": [("shell", 1)], "l1": [("llm", 1)], "m1": [("mcp_tool", 1)],
        "first_fn": [("step", 1)], "second_fn": [("step", 1)]}
    assert r.steps["m1"].inputs == {"server_command": ["no-such-mcp-server", "--flag"], "tool": "t",
                                    "args": {"q": "L(about S)"}}
    assert RAN == []


def test_a_key_that_names_a_step_called_like_a_kind_mocks_only_that_step() -> None:
    @workflow(name="named_like_a_kind")
    def named_like_a_kind() -> None:
        shell("shell", argv=["echo", "real one"])
        shell("other", argv=["echo", "real two"])

    r = run_workflow(named_like_a_kind, mocks={"shell": "mocked"})
    assert r.steps["shell"].output == "mocked"
    assert r.steps["other"].output == "real two"
    assert list(r.calls) == ["shell"]


def test_an_unknown_mock_key_is_a_clear_error_before_anything_runs(brain_db: Store) -> None:
    with pytest.raises(ValueError, match="'sl'") as info:
        run_workflow(kinds, mocks={"s1": "ok", "sl": "typo"}, store=brain_db)
    message = str(info.value)
    assert "kinds" in message
    for name in ("s1", "s2", "l1", "m1", "first_fn", "second_fn"):
        assert name in message
    assert stored_runs(brain_db) == []

    with pytest.raises(TypeError, match=r"'s1'.*JSON-serialisable.*not object"):
        run_workflow(kinds, mocks={"s1": object()}, store=brain_db)
    assert stored_runs(brain_db) == []


# --- what a callable mock may return ------------------------------------------------------------

@step
def count_items(data: dict) -> int:
    return len(data["items"])


@workflow(name="json_outputs")
def json_outputs() -> None:
    fetched = shell("fetch", argv=["cat", "data.json"])
    count_items(fetched)
    shell("nothing", argv=["true"])
    shell("number", argv=["true"])


def test_a_callable_returning_a_dict_stores_json_and_typed_steps_parse_it() -> None:
    r = run_workflow(json_outputs, mocks={
        "fetch": lambda call: {"items": ["a", "b", "c"], "ok": True, "name": "ü"},
        "nothing": lambda call: None, "number": lambda call: 3})
    assert r.succeeded, r.error
    assert json.loads(r.steps["fetch"].output or "") == {"items": ["a", "b", "c"], "ok": True,
                                                          "name": "ü"}
    assert r.steps["count_items"].output == "3"
    assert r.steps["nothing"].output == ""
    assert r.steps["number"].output == "3"


def test_a_mock_value_is_stored_as_a_step_return_value_is() -> None:
    """Not only text: a list or dict becomes its JSON text, None "", a number its digits."""
    r = run_workflow(json_outputs, mocks={"fetch": {"items": ["a", "b"], "name": "ü"},
                                          "nothing": None, "number": 2.5})
    assert r.succeeded, r.error
    assert r.steps["fetch"].output == '{"items":["a","b"],"name":"ü"}'
    assert r.steps["count_items"].output == "2"          # the typed @step parsed it
    assert (r.steps["nothing"].output, r.steps["number"].output) == ("", "2.5")
    assert [c.try_number for c in r.calls["fetch"]] == [1]
    listed = run_workflow(json_outputs, mocks={"shell": ["x", 1, True, None],
                                               "fetch": {"items": []}, "step": 0})
    assert listed.succeeded, listed.error
    assert {listed.steps[n].output for n in ("nothing", "number")} == {'["x",1,true,null]'}
    assert listed.steps["count_items"].output == "0"


def test_a_callable_returning_something_that_is_not_json_fails_the_step() -> None:
    r = run_workflow(json_outputs, mocks={"fetch": lambda call: object()})
    assert r.status == "failed"
    assert "cannot be stored as JSON" in (r.steps["fetch"].error or "")
    assert r.steps["count_items"].status == "skipped"


def test_async_callable_mocks_are_awaited_on_the_runs_loop() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def answer(call: MockCall) -> str:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        return f"async {call.name} got {call.inputs['argv'][1]}"

    r = run_workflow(retrying, "ping", mocks={"shell": answer})
    assert r.succeeded, r.error
    assert r.steps["flaky"].output == "async flaky got ping"
    assert r.steps["after"].output == "async after got after ran"
    assert len(loops) == 2


def test_an_async_mock_that_outlives_the_timeout_times_the_step_out() -> None:
    @workflow(name="timing_out")
    def timing_out() -> None:
        shell("slow", argv=["true"], timeout_seconds=0.2)
        shell("next", argv=["true"])

    async def sleepy(call: MockCall) -> str:
        await asyncio.sleep(30)
        return "too late"

    r = run_workflow(timing_out, mocks={"slow": sleepy})
    assert r.status == "failed"
    assert r.steps["slow"].error == "timed out after 0.2 s"
    assert r.steps["next"].status == "skipped"


# --- async tests and event loops ----------------------------------------------------------------

THREADS: list[str] = []


@step
async def where() -> str:
    THREADS.append(threading.current_thread().name)
    return str(id(asyncio.get_running_loop()))


@workflow(name="looping")
def looping() -> None:
    greeting = shell("greet", argv=["echo", "hi {trigger.body}"])
    where.with_options(after=[greeting])()


@pytest.mark.asyncio
async def test_arun_workflow_in_an_async_test_runs_on_the_tests_loop() -> None:
    r = await arun_workflow(looping, "async", mocks={"greet": "mocked"})
    assert isinstance(r, MockedRunResult)
    assert r.succeeded, r.error
    assert r.steps["greet"].inputs == {"argv": ["echo", "hi async"]}
    assert r.steps["where"].output == str(id(asyncio.get_running_loop()))


@pytest.mark.asyncio
async def test_run_workflow_inside_a_running_event_loop_uses_a_private_one() -> None:
    THREADS.clear()
    r = run_workflow(looping, "sync", mocks={"greet": lambda call: call.inputs["argv"][1]})
    assert r.succeeded, r.error
    assert r.steps["greet"].output == "hi sync"
    assert r.steps["where"].output != str(id(asyncio.get_running_loop()))
    assert THREADS and THREADS[0] != threading.current_thread().name
    await asyncio.sleep(0)                                   # this test's loop is still fine


# --- the fixtures -------------------------------------------------------------------------------

def test_brain_db_keeps_runs_and_feeds_previous(brain_db: Store, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    database = tmp_path / "not-used.db"
    monkeypatch.setenv("BRAIN_DATABASE_URL", f"sqlite+aiosqlite:///{database}")
    assert stored_runs(brain_db) == []

    first = run_workflow(counter, store=brain_db)
    second = run_workflow(counter, store=brain_db)
    assert first.steps["count"].output == "1"
    assert second.steps["count"].inputs == {"last": "1"}
    assert second.steps["count"].output == "2"
    assert second.previous_run_id == first.run_id

    seeded = run_workflow(counter, store=brain_db, previous={"count": "10"})
    assert seeded.steps["count"].output == "11"

    runs = stored_runs(brain_db, "counter")
    assert {r.run_id for r in runs} == {first.run_id, second.run_id, seeded.run_id}
    stored = asyncio.run(brain_db.get_run(first.run_id))
    assert stored.status == "succeeded"
    assert stored.steps["say"].output == "was , now 1"
    assert stored.steps["count"].inputs == {"last": ""}
    assert not database.exists()                              # only the store in memory was used


def test_brain_db_is_the_real_store_on_sqlite_in_memory(brain_db: Store) -> None:
    assert type(brain_db) is Store and brain_db.is_open
    assert (brain_db.dialect, brain_db.shown_url) == ("sqlite", "sqlite:///:memory:")


def test_a_mocked_run_starts_no_thread() -> None:
    """The in-memory database runs its statements in the run's own thread: a mocked run
    adds no thread of its own (what it costs is the runner's work, not hand-offs)."""
    before = set(threading.enumerate())
    during: list[set[threading.Thread]] = []

    def look(call: MockCall) -> str:
        during.append(set(threading.enumerate()))
        return "looked"

    r = run_workflow(counter, mocks={"say": look, "count": "1"})
    assert r.succeeded, r.error
    assert during == [before]


def test_run_workflow_without_a_store_touches_no_database(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    database = tmp_path / "brain.db"
    monkeypatch.setenv("BRAIN_DATABASE_URL", f"sqlite+aiosqlite:///{database}")
    r = run_workflow(counter)
    assert r.succeeded, r.error
    assert not database.exists()


@workflow(name="asking")
def asking() -> None:
    llm("ask", prompt="Hello {trigger.body}", retries=1, retry_delay_seconds=0)


def test_fake_llm_serves_an_unmocked_llm_step(fake_llm: FakeChatServer) -> None:
    r = run_workflow(asking, "there")
    assert r.succeeded, r.error
    assert r.steps["ask"].output == "ok"
    assert r.steps["ask"].inputs["url"] == fake_llm.url + "/chat/completions"
    [request] = fake_llm.requests
    assert request.json["model"] == "fake-model"
    assert request.json["messages"] == [{"role": "user", "content": "Hello there"}]

    fake_llm.respond(status=503, headers={"Retry-After": "0"})
    fake_llm.respond(content="second answer")
    again = run_workflow(asking, "again")
    assert again.steps["ask"].output == "second answer"
    assert again.steps["ask"].tries == 2
    assert len(fake_llm.requests) == 3


# --- SPEC §10, verbatim -------------------------------------------------------------------------

@step
def headline(text: str) -> str:              # a plain function becomes a step
    return text.splitlines()[0]


@workflow(name="spec_daily_digest",
          triggers=[cron("0 9 * * *", timezone="Europe/Bucharest"),
                    webhook(secret_env="DIGEST_SECRET")])
def daily_digest():
    recall = mcp_tool("recall", server_command="python -m memory_vault.mcp",
                      tool="recall", args={"query": trigger.body, "limit": 10},
                      timeout_seconds=30)
    with parallel():
        fast = llm("fast", prompt=f"Two sentences: {recall}", model="ministral-3b",
                   max_tokens=400, timeout_seconds=60)
        slow = llm("careful", prompt=f"Detailed breakdown: {recall}",
                   provider_url="http://other-host:1234/v1",
                   api_key=secret("OTHER_HOST_KEY"),
                   timeout_seconds=600, max_tokens=8000, retries=2)
    title = headline(fast)
    shell("save", argv=["tee", "-a", "digest.md"], stdin=f"# {title}\n{fast}\n\n{slow}\n")


def test_digest():
    r = run_workflow(daily_digest, trigger={"body": "db outage"},
                     mocks={"recall": "memo A", "fast": lambda step: "short",
                            "careful": "long", "save": ""})
    assert r.succeeded
    assert r.steps["fast"].inputs["prompt"] == "Two sentences: memo A"


def test_digest_details_of_the_spec_example(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTHER_HOST_KEY", raising=False)
    r = run_workflow(daily_digest, trigger={"body": "db outage"},
                     mocks={"recall": "memo A", "fast": lambda step: "short",
                            "careful": "long", "save": ""})
    assert r.succeeded, r.error
    assert r.steps["recall"].inputs == {"server_command": ["python", "-m", "memory_vault.mcp"],
                                        "tool": "recall",
                                        "args": {"query": "db outage", "limit": 10}}
    assert r.steps["careful"].inputs["api_key"] == "***"
    assert r.steps["careful"].inputs["url"] == "http://other-host:1234/v1/chat/completions"
    assert r.steps["headline"].output == "short"                  # the @step ran for real
    assert r.steps["save"].inputs == {"argv": ["tee", "-a", "digest.md"],
                                      "stdin": "# short\nshort\n\nlong\n"}
    assert [c.try_number for c in r.calls["fast"]] == [1]
    assert not (HERE / "digest.md").exists()


# --- plain pytest, no configuration -------------------------------------------------------------

USER_TEST = '''
import asyncio

from brain import llm, shell, step, workflow
from brain.testing import run_workflow


@step
def shout(text: str) -> str:
    return text.upper() + "!"


@workflow
def greet():
    name = shell("name", command="echo from-the-shell")
    shout(name)


@workflow
def ask():
    llm("answer", prompt="Say hi to {trigger.body}")


def test_mocked_with_brain_db(brain_db):
    r = run_workflow(greet, mocks={"name": "mocked"}, store=brain_db)
    assert r.succeeded
    assert r.steps["shout"].output == "MOCKED!"
    assert [c.try_number for c in r.calls["name"]] == [1]
    assert [run.run_id for run in asyncio.run(brain_db.list_runs())] == [r.run_id]


def test_real_shell_step():
    assert run_workflow(greet).steps["shout"].output == "FROM-THE-SHELL!"


def test_fake_llm(fake_llm):
    fake_llm.reply = "hi, Ana"
    r = run_workflow(ask, "Ana")
    assert r.steps["answer"].output == "hi, Ana"
    assert fake_llm.requests[0].json["messages"][-1]["content"] == "Say hi to Ana"
'''


def plain_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LLM_"))}
    env["BRAIN_DATABASE_URL"] = f"sqlite+aiosqlite:///{folder / 'must-not-exist.db'}"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=folder, capture_output=True, text=True, timeout=120, env=env)


def test_plain_pytest_in_an_empty_folder_finds_the_plugin(tmp_path: Path) -> None:
    (tmp_path / "test_user_workflow.py").write_text(USER_TEST)
    proc = plain_pytest(tmp_path, "-q", "test_user_workflow.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"\b3 passed\b", proc.stdout), proc.stdout
    assert {p.name for p in tmp_path.iterdir()} - {"__pycache__"} == {"test_user_workflow.py"}


def test_the_plugin_raises_no_deprecation_warning_in_a_users_run(tmp_path: Path) -> None:
    """Warnings made errors: the plugin alone (pytest-asyncio off) passes, and so does a
    project with pytest-asyncio that sets its loop scope, as docs/testing.md says to
    (unset, pytest-asyncio warns by itself, with or without this plugin)."""
    (tmp_path / "test_user_workflow.py").write_text(USER_TEST)
    strict = ["-W", "error::pytest.PytestDeprecationWarning", "-q", "test_user_workflow.py"]
    alone = plain_pytest(tmp_path, "-p", "no:asyncio", *strict)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert re.search(r"\b3 passed\b", alone.stdout), alone.stdout
    assert "warning" not in alone.stdout.lower()
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    with_asyncio = plain_pytest(tmp_path, *strict)
    assert with_asyncio.returncode == 0, with_asyncio.stdout + with_asyncio.stderr
    assert "warning" not in with_asyncio.stdout.lower()


def doc_files(markdown: str) -> dict[str, str]:
    """The fenced python blocks of a doc whose first line is ``# file: NAME``, by NAME."""
    files: dict[str, str] = {}
    for block in re.findall(r"```python\n(.*?)```", markdown, flags=re.S):
        first, _, rest = block.partition("\n")
        match = re.fullmatch(r"# file: (\S+)", first.strip())
        if match:
            files[match.group(1)] = files.get(match.group(1), "") + rest + "\n"
    return files


def test_docs_testing_md_examples_pass_under_plain_pytest(tmp_path: Path) -> None:
    files = doc_files((REPO / "docs" / "testing.md").read_text())
    assert "incident.py" in files
    assert any(name.startswith("test_") for name in files)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    proc = plain_pytest(tmp_path, "-q", "-rA")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not re.search(r"\b\d+ (failed|errors?|skipped)\b", proc.stdout), proc.stdout
    expected = sum(len(re.findall(r"^(?:async )?def test_", text, flags=re.M))
                   for name, text in files.items() if name.startswith("test_"))
    assert expected >= 10
    assert re.search(rf"\b{expected} passed\b", proc.stdout), proc.stdout
    assert not (tmp_path / "incidents.md").exists()
