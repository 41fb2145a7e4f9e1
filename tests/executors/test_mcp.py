"""MCP tool steps (SPEC §2 "MCP" and "Failure", §3 string-only rules): real servers on stdio.

Every server here is a real process: the small SDK servers in ``tests/mcp_servers/``
(``tools_server.py`` has one tool per behaviour; ``slow_server.py`` and
``stubborn_server.py`` differ at the process level), the third-party
``mcp-server-time``, and plain ``sh`` commands standing in for servers that crash or
never answer. Nothing is mocked.

An SDK server costs about a second of CPU to start. The workflows whose outcome
does not depend on timing therefore run once, all at the same time, in the
module fixture :func:`batch` (on its own SQLite file), and each test asserts on its
own run. Tests about timeouts, retries, the environment and leaks run their own
workflows. Where a bug could make a run wait for a server that never exits, the
run is bounded (:func:`run_bounded`): the test kills the leftovers and fails
instead of hanging.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import os
import re
import shlex
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support import sql_rows

from brain import (
    RunResult,
    WorkflowDefinitionError,
    mcp_tool,
    parallel,
    secret,
    shell,
    trigger,
    workflow,
)

PY = sys.executable
SERVERS = Path(__file__).resolve().parent.parent / "mcp_servers"
TOOLS = str(SERVERS / "tools_server.py")
SLOW = str(SERVERS / "slow_server.py")
STUBBORN = str(SERVERS / "stubborn_server.py")
TIME_SERVER = os.path.join(os.path.dirname(sys.executable), "mcp-server-time")
STARTED = "tools_server starting pid="  # the tools server's first stderr line
STDERR_TAIL = 8192
# The batch's steps test results, not timeouts: room for twenty servers starting at once.
ROOMY = 120


@pytest.fixture(autouse=True)
def _collect_garbage_first() -> None:
    """Finalise transports left by earlier tests now, under pytest's unraisable hook."""
    gc.collect()


# --- helpers -----------------------------------------------------------------


def tools(*extra: str) -> list[str]:
    """The tools server's command, as a list of words."""
    return [PY, TOOLS, *extra]


def run_all(*runs: tuple[Any, dict[str, Any] | None], store: str | None = None) -> list[RunResult]:
    """Run several ``(workflow, trigger)`` pairs at the same time on one store.

    Concurrent runs, not one run with parallel steps: a failing step halts its run
    and cancels its siblings.
    """
    from brain.store import Store

    async def go() -> list[RunResult]:
        async with Store(store) as st:
            return list(await asyncio.gather(*(wf.arun(trigger=trig, store=st)
                                               for wf, trig in runs)))

    return asyncio.run(go())


def run_bounded(*runs: tuple[Any, dict[str, Any] | None], seconds: float,
                tag: str) -> tuple[bool, list[RunResult]]:
    """:func:`run_all` in a thread; ``(hung, results)``.

    When the runs have not ended after ``seconds`` (they waited for a server that
    never exits on its own), every process carrying ``tag`` in its environment is
    killed so that they can end, and ``hung`` is ``True``.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["results"] = run_all(*runs)
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="bounded-runs", daemon=True)
    thread.start()
    thread.join(seconds)
    hung = thread.is_alive()
    if hung:
        for pid in tagged_processes(tag):
            kill_quietly(pid)
        thread.join(60)
    if "error" in box:
        raise box["error"]
    return hung, box["results"]


def _stat(pid: int | str) -> list[bytes] | None:
    """``/proc/<pid>/stat`` fields after the command name (state, ppid, ...); ``None`` if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2:].split()


def _gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (reaped, or a zombie nobody reaped yet)."""
    fields = _stat(pid)
    return fields is None or fields[0] == b"Z"


def kill_quietly(pid: int) -> None:
    """SIGKILL ``pid`` if it still exists (clean-up after a failing test)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def wait_until(check: Callable[[], bool], seconds: float = 15.0) -> bool:
    """Poll ``check`` (bounded) until it holds; its last answer."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def live_descendants() -> set[int]:
    """Live (non-zombie) processes whose parent chain includes this test process."""
    me = os.getpid()
    parents: dict[int, int] = {}
    for pid in _all_pids():
        fields = _stat(pid)
        if fields is not None and fields[0] != b"Z":
            parents[pid] = int(fields[1])
    found: set[int] = set()
    for pid in parents:
        ancestor, hops = parents[pid], 0
        while ancestor > 1 and hops < 64:
            if ancestor == me:
                found.add(pid)
                break
            ancestor, hops = parents.get(ancestor, 0), hops + 1
    return found


def tagged_processes(tag: str) -> set[int]:
    """Live processes whose environment holds ``tag``: finds servers even after re-parenting."""
    found: set[int] = set()
    needle = tag.encode()
    for pid in _all_pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle in env and not _gone(pid):
            found.add(pid)
    return found


def recorded_pids(folder: Path) -> list[int]:
    """The ids the tools server wrote into ``MCP_PID_DIR`` at start-up."""
    return sorted(int(p.name) for p in folder.iterdir()) if folder.exists() else []


def server_pid(stderr: str | None) -> int:
    """The tools server's process id, from the first line it writes to stderr."""
    match = re.search(r"tools_server starting pid=(\d+)", stderr or "")
    assert match, f"no start-up line in stderr {stderr!r}"
    return int(match.group(1))


def db_bytes(tmp_path: Path) -> bytes:
    """Every byte SQLite wrote for this test's database (main file, WAL, shared memory)."""
    return b"".join(p.read_bytes() for p in sorted(tmp_path.glob("brain.db*")))


def describe(value: Any) -> Any:
    """The same shape ``echo_args`` answers: each scalar with its Python type name."""
    if isinstance(value, dict):
        return {"type": "dict", "items": {k: describe(v) for k, v in value.items()}}
    if isinstance(value, list):
        return {"type": "list", "items": [describe(v) for v in value]}
    return {"type": type(value).__name__, "value": value}


# --- the batch: independent workflows, run once, all at the same time ----------------------------

ARGS_BODY = 'hello "world" {up}'
ARGV_BODY = 'a b "c"'
ARGV_COMMAND = (f"{shlex.quote(PY)} {shlex.quote(TOOLS)} --q {{trigger.body}} "
                f"--opt={{trigger.body}} 'quoted word' --up {{up}}")


@dataclass
class Batch:
    runs: dict[str, RunResult]
    methods_log: Path
    store_url: str


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Batch:
    tmp = tmp_path_factory.mktemp("mcp_batch")
    methods_log = tmp / "methods.log"

    def call(name: str, tool: str, **options: Any) -> Any:
        options.setdefault("server_command", tools())
        return mcp_tool(name, tool=tool, timeout_seconds=ROOMY, **options)

    @workflow(name="mcp_arg_types")
    def arg_types() -> None:
        up = shell("up", command="printf 42")
        call("echo", "echo_args", args={
            "count": 3, "flag": True, "off": False, "ratio": 1.5, "nothing": None,
            "nested": {"inner": "{up}", "body": "{trigger.body}", "n": 1,
                       "deep": {"list": ["{x}", 2, False, None]}},
            "items": ["{up}", 1, 2.5, None, {"k": "{trigger.body}"}],
            "upstream": up,
            "mixed": "up={up} body={trigger.body}",
            "body": trigger.body,
            "literal": '{{up}} and {"a": {"b": 1}} and ${HOME}',
            "{up}": "the value of a braced key",
        })

    @workflow(name="mcp_is_error")
    def is_error() -> None:
        call("fail", "fail_with_error", args={"reason": "the disk is full"})
        shell("after", command="echo never")

    @workflow(name="mcp_rpc_error")
    def rpc_error() -> None:
        call("rpc", "rpc_error", args={"message": "quota exceeded for this key"})

    @workflow(name="mcp_unknown_tool")
    def unknown_tool() -> None:
        call("unknown", "no_such_tool", args={"a": 1})

    @workflow(name="mcp_exit_code")
    def exit_code() -> None:
        call("die", "die", args={"code": 3})

    @workflow(name="mcp_killed")
    def killed() -> None:
        call("killed", "kill_self", args={"signal": 9})

    @workflow(name="mcp_flood")
    def flood() -> None:
        call("flood", "flood_stderr", args={"megabytes": 5})

    @workflow(name="mcp_chatty")
    def chatty() -> None:
        call("chatty", "chatty")

    @workflow(name="mcp_time")
    def time_now() -> None:
        call("now", "get_current_time", server_command=[TIME_SERVER], args={"timezone": "Etc/UTC"})

    @workflow(name="mcp_methods")
    def methods() -> None:
        call("call", "echo", args={"text": "once"}, env={"MCP_METHOD_LOG": str(methods_log)})

    @workflow(name="mcp_server_requests")
    def server_requests() -> None:
        with parallel():
            call("sampling", "ask_sampling")
            call("elicitation", "ask_elicitation")
            call("roots", "ask_roots")

    @workflow(name="mcp_outputs")
    def outputs() -> None:
        with parallel():
            call("two", "two_texts")
            call("text_wins", "text_and_image")
            call("plain", "echo", args={"text": "just text"})
            call("structured", "structured_only")
            call("image", "image_only")

    @workflow(name="mcp_two_pids")
    def two_pids() -> None:
        with parallel():
            call("one", "get_pid")
            call("two", "get_pid")

    @workflow(name="mcp_argv")
    def argv() -> None:
        up = shell("up", command="printf 'x  y'")
        with parallel():
            call("words", "show_argv", server_command=ARGV_COMMAND)
            call("listed", "show_argv", server_command=[PY, TOOLS, "--up", up, trigger.body])

    runs = {
        "arg_types": (arg_types, {"body": ARGS_BODY}), "is_error": (is_error, None),
        "rpc": (rpc_error, None), "unknown": (unknown_tool, None), "die": (exit_code, None),
        "killed": (killed, None), "flood": (flood, None), "chatty": (chatty, None),
        "time": (time_now, None), "methods": (methods, None),
        "requests": (server_requests, None), "outputs": (outputs, None),
        "pids": (two_pids, None), "argv": (argv, {"body": ARGV_BODY}),
    }
    url = f"sqlite+aiosqlite:///{tmp / 'brain.db'}"
    results = run_all(*runs.values(), store=url)
    return Batch(runs=dict(zip(runs, results, strict=True)), methods_log=methods_log,
                 store_url=url)


def step_log(batch: Batch, run: str, step: str) -> list[tuple[str, str]]:
    """``(stream, text)`` of a step's stored log."""
    from brain.store import Store

    async def read() -> list[tuple[str, str]]:
        async with Store(batch.store_url) as store:
            lines = await store.read_log(batch.runs[run].run_id, step)
        return [(line.stream, line.text) for line in lines]

    return asyncio.run(read())


# --- arguments and placeholders ----------------------------------------------


def test_arguments_keep_their_types_and_only_top_level_strings_are_substituted(batch: Batch):
    step = batch.runs["arg_types"].steps["echo"]
    assert step.status == "succeeded", step.error
    assert step.error is None
    sent = {
        "count": 3, "flag": True, "off": False, "ratio": 1.5, "nothing": None,
        # Nested values pass as written, braces and all (even "{x}", which names no step).
        "nested": {"inner": "{up}", "body": "{trigger.body}", "n": 1,
                   "deep": {"list": ["{x}", 2, False, None]}},
        "items": ["{up}", 1, 2.5, None, {"k": "{trigger.body}"}],
        # Top-level strings are substituted and stay strings, even when they look like a
        # number; inserted values are never scanned again.
        "upstream": "42",
        "mixed": f"up=42 body={ARGS_BODY}",
        "body": ARGS_BODY,
        "literal": '{up} and {"a": {"b": 1}} and ${HOME}',
        # Keys are never substituted.
        "{up}": "the value of a braced key",
    }
    assert json.loads(step.output or "") == describe(sent)
    assert step.inputs["args"] == sent
    assert step.inputs["tool"] == "echo_args"
    assert step.inputs["server_command"] == tools()
    assert step.stderr is not None and STARTED in step.stderr
    assert STARTED not in (step.output or "")


def test_placeholder_in_server_command_fills_exactly_one_word(batch: Batch):
    run = batch.runs["argv"]
    assert run.status == "succeeded", run.error
    expected = ["--q", ARGV_BODY, f"--opt={ARGV_BODY}", "quoted word", "--up", "x  y"]
    step = run.steps["words"]
    assert json.loads(step.output or "") == [TOOLS, *expected]
    assert step.inputs["server_command"] == [PY, TOOLS, *expected]
    assert step.stderr is not None and STARTED in step.stderr
    step = run.steps["listed"]
    assert json.loads(step.output or "") == [TOOLS, "--up", "x  y", ARGV_BODY]
    assert step.stderr is not None and STARTED in step.stderr


def _first_word_string() -> None:
    mcp_tool("m", server_command="{trigger.body} --serve", tool="t")


def _first_word_list() -> None:
    mcp_tool("m", server_command=[trigger.body, "--serve"], tool="t")


def _first_word_partial() -> None:
    mcp_tool("m", server_command="/opt/{trigger.body}/server --serve", tool="t")


def _first_word_step_output() -> None:
    up = shell("up", command="echo python")
    mcp_tool("m", server_command=[up, "server.py"], tool="t")


def _tool_name() -> None:
    mcp_tool("m", server_command="python server.py", tool="{trigger.body}")


def _tool_name_lazy() -> None:
    mcp_tool("m", server_command="python server.py", tool=trigger.body)  # type: ignore[arg-type]


def _node_in_nested_dict() -> None:
    up = shell("up", command="echo hi")
    mcp_tool("m", server_command="python server.py", tool="t", args={"outer": {"inner": up}})


def _node_in_nested_list() -> None:
    mcp_tool("m", server_command="python server.py", tool="t", args={"items": [1, trigger.body]})


def _unbalanced_quotes() -> None:
    mcp_tool("m", server_command='python "server.py --name x', tool="t")


@pytest.mark.parametrize("define", [_first_word_string, _first_word_list, _first_word_partial,
                                    _first_word_step_output, _tool_name, _tool_name_lazy,
                                    _node_in_nested_dict, _node_in_nested_list,
                                    _unbalanced_quotes],
                         ids=lambda f: f.__name__.strip("_"))
def test_definition_errors(define: Callable[[], None]):
    name = f"mcp_bad_{define.__name__.strip('_')}"
    with pytest.raises(WorkflowDefinitionError) as info:
        workflow(name=name)(define)
    text = str(info.value)
    assert name in text and "'m'" in text, text


# --- failures ----------------------------------------------------------------


def test_is_error_result_fails_the_step_with_its_first_text_block(batch: Batch):
    run = batch.runs["is_error"]
    step = run.steps["fail"]
    assert step.status == "failed"
    assert step.error == "the disk is full"
    assert step.tries == 1
    assert step.output is None
    assert step.stderr is not None
    assert STARTED in step.stderr and "fail_with_error stderr: the disk is full" in step.stderr
    assert run.status == "failed"
    assert run.error == "step 'fail' failed: the disk is full"
    assert run.steps["after"].status == "skipped"


def test_json_rpc_error_fails_with_the_servers_message(batch: Batch):
    run = batch.runs["rpc"]
    step = run.steps["rpc"]
    assert step.status == "failed"
    assert "quota exceeded for this key" in (step.error or "")
    assert step.output is None
    assert step.stderr is not None and STARTED in step.stderr
    assert run.error == f"step 'rpc' failed: {step.error}"


def test_unknown_tool_fails_with_the_servers_message(batch: Batch):
    run = batch.runs["unknown"]
    step = run.steps["unknown"]
    assert step.status == "failed"
    assert "Unknown tool: no_such_tool" in (step.error or "")
    assert step.output is None
    assert step.stderr is not None and STARTED in step.stderr
    assert run.status == "failed"


def test_server_exiting_mid_call_names_the_exit_code_and_the_stderr_tail(batch: Batch):
    run = batch.runs["die"]
    step = run.steps["die"]
    assert step.status == "failed"
    assert step.tries == 1
    assert "exit code 3" in (step.error or "")
    assert "die: about to exit with 3" in (step.error or "")  # the stderr tail's last line
    assert step.stderr is not None
    assert "die: first stderr line" in step.stderr
    assert step.stderr.rstrip().endswith("die: about to exit with 3")
    assert run.error == f"step 'die' failed: {step.error}"
    pid = server_pid(step.stderr)
    assert wait_until(lambda: _gone(pid))


def test_server_killed_by_a_signal_mid_call_names_the_signal(batch: Batch):
    step = batch.runs["killed"].steps["killed"]
    assert step.status == "failed"
    assert "signal 9" in (step.error or "")
    assert step.stderr is not None and "kill_self: sending signal 9" in step.stderr
    pid = server_pid(step.stderr)
    assert wait_until(lambda: _gone(pid))


def test_stderr_flood_keeps_only_the_last_8_kib_and_never_reaches_the_output(batch: Batch):
    step = batch.runs["flood"].steps["flood"]
    assert step.status == "succeeded", step.error
    assert step.output == "flood done"
    assert step.stderr is not None
    assert 4096 < len(step.stderr.encode("utf-8")) <= STDERR_TAIL
    assert "FLOOD-END" in step.stderr          # the end of the stream is kept...
    assert "FLOOD-START" not in step.stderr    # ...its start is not
    assert STARTED not in step.stderr


def test_the_servers_stderr_is_the_steps_log(batch: Batch):
    """SPEC §20: what the server writes to stderr is its step's log, line by line; a flood
    keeps its first 8 KiB and last 64 KiB, with a line saying what was dropped."""
    died = step_log(batch, "die", "die")
    assert ("stderr", "die: first stderr line") in died
    assert ("stderr", "die: about to exit with 3") in died
    flood = step_log(batch, "flood", "flood")
    texts = [text for _, text in flood]
    assert any("FLOOD-START" in text for text in texts[:5])
    assert any("FLOOD-END" in text for text in texts[-3:])
    notes = [text for stream, text in flood if stream == "brain"]
    assert len(notes) == 1 and notes[0].endswith(" dropped …")
    assert sum(len(text) + 1 for text in texts) <= (8 + 64 + 1) * 1024


def test_log_and_progress_notifications_before_the_answer_are_fine(batch: Batch):
    step = batch.runs["chatty"].steps["chatty"]
    assert step.status == "succeeded", step.error
    assert step.output == "chatty done"
    assert step.stderr is not None and "chatty-log-record" in step.stderr


# --- output ------------------------------------------------------------------


def test_output_rules_text_joined_then_structured_then_content_json(batch: Batch):
    run = batch.runs["outputs"]
    assert run.status == "succeeded", run.error
    assert run.steps["two"].output == "first line\nsecond line"
    assert run.steps["text_wins"].output == "caption"
    # A str tool also sends structuredContent {"result": ...}: the text block wins.
    assert run.steps["plain"].output == "just text"
    # No text block: compact JSON of structuredContent, key order and non-ASCII kept.
    assert run.steps["structured"].output == '{"b":[1,2],"a":"ü","c":null}'
    # Only an image block: compact JSON of the content list.
    image = run.steps["image"].output or ""
    assert json.loads(image) == [{"type": "image", "mimeType": "image/png",
                                  "data": base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()}]
    assert image == json.dumps(json.loads(image), separators=(",", ":"), ensure_ascii=False)
    for step in run.steps.values():
        assert step.error is None
        assert step.stderr is not None and STARTED in step.stderr, step.name


# --- protocol ------------------------------------------------------------------


def test_exactly_one_initialize_and_one_tools_call_and_no_tools_list(batch: Batch):
    step = batch.runs["methods"].steps["call"]
    assert step.status == "succeeded", step.error
    assert step.output == "once"
    assert step.stderr is not None and STARTED in step.stderr
    methods = batch.methods_log.read_text().split()
    counts = Counter(methods)
    assert counts["initialize"] == 1, methods
    assert counts["tools/call"] == 1, methods
    assert "tools/list" not in counts, methods
    assert methods[0] == "initialize"
    assert methods.index("initialize") < methods.index("tools/call")
    assert set(methods) <= {"initialize", "notifications/initialized", "tools/call",
                            "notifications/cancelled"}, methods


def test_server_requests_are_answered_not_supported(batch: Batch):
    run = batch.runs["requests"]
    for name in ("sampling", "elicitation", "roots"):
        step = run.steps[name]
        assert step.status == "succeeded", f"{name}: {step.error}"
        output = step.output or ""
        assert output.startswith(f"{name} failed:"), output
        assert "not supported" in output.lower(), output
        assert step.stderr is not None and STARTED in step.stderr
    assert run.status == "succeeded"


def test_third_party_mcp_server_time(batch: Batch):
    step = batch.runs["time"].steps["now"]
    assert step.status == "succeeded", step.error
    answer = json.loads(step.output or "")
    assert {"timezone", "datetime", "is_dst"} <= set(answer)
    assert answer["timezone"] == "Etc/UTC"
    assert answer["is_dst"] is False
    assert datetime.fromisoformat(answer["datetime"]).utcoffset() == timedelta(0)
    assert step.inputs == {"server_command": [TIME_SERVER], "tool": "get_current_time",
                           "args": {"timezone": "Etc/UTC"}}
    assert not step.stderr or "Traceback" not in step.stderr


# --- process per step and per try ------------------------------------------------


def test_each_step_spawns_its_own_server_process(batch: Batch):
    run = batch.runs["pids"]
    assert run.status == "succeeded", run.error
    one, two = int(run.steps["one"].output or 0), int(run.steps["two"].output or 0)
    assert one and two and one != two
    assert os.getpid() not in (one, two)
    assert server_pid(run.steps["one"].stderr) == one
    assert server_pid(run.steps["two"].stderr) == two
    assert wait_until(lambda: _gone(one) and _gone(two))


def test_each_retry_spawns_a_fresh_process(tmp_path: Path):
    marker, pid_log = tmp_path / "tried", tmp_path / "pids.txt"

    @workflow
    def mcp_retry():
        mcp_tool("flaky", server_command=tools(), tool="flaky", retries=1, retry_delay_seconds=0,
                 args={"marker": str(marker), "pid_log": str(pid_log)})

    r = mcp_retry()
    step = r.steps["flaky"]
    assert step.status == "succeeded", step.error
    assert step.output == "second try worked"
    assert step.tries == 2
    first, second = (int(line) for line in pid_log.read_text().split())
    assert first != second
    # The stored stderr is the last try's.
    assert step.stderr is not None and server_pid(step.stderr) == second
    assert f"pid={first}" not in step.stderr
    assert wait_until(lambda: _gone(first) and _gone(second))


def test_the_servers_process_group_is_recorded_with_its_leaders_start_time(tmp_path: Path):
    """As for shell steps: what a resume on this machine needs to end a server left running."""
    from brain._owners import this_machine

    @workflow
    def mcp_group():
        mcp_tool("group", server_command=tools(), tool="get_group")

    r = mcp_group()
    assert r.steps["group"].status == "succeeded", r.steps["group"].error
    pgid, started = (int(x) for x in (r.steps["group"].output or "").split())
    rows = sql_rows(tmp_path, "SELECT process_group, process_started, process_machine "
                              "FROM brain_steps WHERE run_id = ?", r.run_id)
    assert [tuple(row) for row in rows] == [(pgid, started, this_machine())]


# --- environment and secrets ---------------------------------------------------


def test_server_environment_is_the_sdk_default_plus_step_env(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS

    monkeypatch.setenv("BRAIN_API_TOKEN", "api-token-must-not-leak")
    monkeypatch.setenv("LLM_API_KEY", "llm-key-must-not-leak")
    monkeypatch.setenv("FOO", "foo-must-not-leak")
    monkeypatch.setenv("MCP_TEST_SECRET", "s3cr3t-value-77")
    body = 'body with spaces "and quotes"'

    @workflow
    def mcp_env():
        with parallel():
            mcp_tool("env", server_command=tools(), tool="show_env",
                     env={"STEP_VAR": "step-value", "FROM_BODY": trigger.body,
                          "TOKEN": secret("MCP_TEST_SECRET")})
            mcp_tool("arg_secret", server_command=tools(), tool="echo",
                     args={"text": secret("MCP_TEST_SECRET")})

    r = mcp_env(trigger={"body": body})
    assert r.status == "succeeded", r.error
    step = r.steps["env"]
    seen = json.loads(step.output or "")
    assert seen["PATH"] == os.environ["PATH"]
    if "HOME" in os.environ:
        assert seen["HOME"] == os.environ["HOME"]
    assert seen["STEP_VAR"] == "step-value"
    assert seen["FROM_BODY"] == body
    assert seen["TOKEN"] == "***"  # the server saw the value; the stored output is scrubbed
    for leaked in ("BRAIN_API_TOKEN", "LLM_API_KEY", "FOO", "MCP_TEST_SECRET"):
        assert leaked not in seen, leaked
    # Nothing else of the orchestrator's environment: the SDK's list, the step's env, and
    # what the processes set themselves (PWD: the /bin/sh wrapper; LC_CTYPE: Python's
    # C-locale coercion in the server), and the run's id (BRAIN_RUN_ID, so a resume finds a
    # server a dead executor left).
    allowed = set(DEFAULT_INHERITED_ENV_VARS) | {"STEP_VAR", "FROM_BODY", "TOKEN", "PWD",
                                                 "LC_CTYPE", "BRAIN_RUN_ID"}
    assert seen["BRAIN_RUN_ID"] == r.run_id
    assert set(seen) <= allowed, set(seen) - allowed
    assert step.inputs["env"] == {"STEP_VAR": "step-value", "FROM_BODY": body, "TOKEN": "***"}
    assert step.stderr is not None and "show_env stderr:" in step.stderr
    assert "s3cr3t-value-77" not in step.stderr

    step = r.steps["arg_secret"]
    assert step.output == "***"
    assert step.inputs["args"] == {"text": "***"}
    assert step.stderr is not None and STARTED in step.stderr

    stored = db_bytes(tmp_path)
    for value in ("s3cr3t-value-77", "api-token-must-not-leak", "llm-key-must-not-leak"):
        assert value.encode() not in stored, value


# --- missing programs ------------------------------------------------------------


def test_missing_program_on_path_fails_at_once_without_retrying():
    @workflow
    def mcp_missing():
        mcp_tool("missing", server_command="no-such-mcp-server-zz --flag", tool="t",
                 retries=2, retry_delay_seconds=0)

    r = mcp_missing()
    step = r.steps["missing"]
    assert step.status == "failed"
    assert step.tries == 1
    assert "no-such-mcp-server-zz" in (step.error or "")
    assert "not on PATH" in (step.error or "") or "not found" in (step.error or "")
    assert not step.stderr
    assert r.error == f"step 'missing' failed: {step.error}"


def test_missing_program_by_path_fails_at_once_without_retrying(tmp_path: Path):
    program = str(tmp_path / "no-such-dir" / "mcp-server")

    @workflow
    def mcp_missing_path():
        mcp_tool("missing", server_command=[program, "--flag"], tool="t",
                 retries=2, retry_delay_seconds=0)

    r = mcp_missing_path()
    step = r.steps["missing"]
    assert step.status == "failed"
    error = step.error or ""
    assert program in error
    assert any(words in error for words in ("not found", "No such file", "does not exist")), error
    assert step.tries == 1, f"a missing program was retried: {step.tries} tries, {error!r}"
    assert r.error == f"step 'missing' failed: {error}"


# --- timeouts and slow starts ----------------------------------------------------


def test_hanging_servers_time_out_and_leave_no_process(tmp_path: Path):
    """A tool that never answers, and a server that also ignores SIGTERM and stdin EOF."""
    tag = f"brain-hang-{uuid.uuid4().hex}"
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {"MCP_PID_DIR": str(pids), "LEAK_TAG": tag}
    before = live_descendants()

    # Long enough for both servers to be up (their pids recorded, their first stderr lines
    # written) before the timeout, on a busy machine too: the start-up counts against it.
    @workflow
    def mcp_hang():
        mcp_tool("hang", server_command=tools(), tool="hang", timeout_seconds=5, env=env)

    @workflow
    def mcp_hang_hard():
        mcp_tool("stubborn", server_command=[PY, STUBBORN], tool="hang_hard", timeout_seconds=5,
                 env=env)

    hung, (plain, stubborn) = run_bounded((mcp_hang, None), (mcp_hang_hard, None),
                                          seconds=40, tag=tag)
    assert not hung, "the runs waited for the hung servers (the test killed them after 40 s)"
    for run, name in ((plain, "hang"), (stubborn, "stubborn")):
        step = run.steps[name]
        assert step.status == "failed", name
        assert step.error == "timed out after 5 s", name
        assert step.tries == 1
        assert step.output is None
        assert run.error == f"step '{name}' failed: timed out after 5 s"
    assert len(recorded_pids(pids)) == 2
    assert wait_until(lambda: all(_gone(p) for p in recorded_pids(pids)))
    assert wait_until(lambda: not tagged_processes(tag)), tagged_processes(tag)
    assert wait_until(lambda: not (live_descendants() - before)), live_descendants() - before
    # The server's stderr tail is stored with the step, whatever ended it (SPEC §2 "MCP").
    for run, name, line in ((plain, "hang", STARTED),
                            (stubborn, "stubborn", "stubborn_server: ignoring SIGTERM")):
        stderr = run.steps[name].stderr
        assert stderr is not None and line in stderr, f"{name}: stderr {stderr!r}"


def test_slow_start_succeeds_within_its_timeout_and_times_out_below_it():
    @workflow
    def mcp_slow_ok():
        mcp_tool("slow", server_command=[PY, SLOW], tool="echo", args={"text": "late but fine"},
                 timeout_seconds=30)

    @workflow
    def mcp_slow_timeout():
        # Its start-up alone (a 1 s sleep, then the SDK import) is longer than 1 s.
        mcp_tool("slow", server_command=[PY, SLOW], tool="echo", args={"text": "never"},
                 timeout_seconds=1)

    ok, late = run_all((mcp_slow_ok, None), (mcp_slow_timeout, None))

    step = ok.steps["slow"]
    assert step.status == "succeeded", step.error
    assert step.output == "late but fine"
    assert step.stderr is not None and "slow_server: sleeping 1 s before serving" in step.stderr

    step = late.steps["slow"]
    assert step.status == "failed"
    assert step.error == "timed out after 1 s"
    assert step.output is None
    assert late.error == "step 'slow' failed: timed out after 1 s"
    # Its stderr tail is stored too (SPEC §2 "MCP"): the line it wrote before sleeping.
    assert step.stderr is not None and "slow_server: sleeping" in step.stderr, step.stderr


# --- no leaked processes, no waiting on servers ------------------------------------


def test_sibling_failure_while_a_timed_out_server_shuts_down_leaves_nothing(tmp_path: Path):
    """``stuck`` times out at 1 s; while its server (which ignores its closed stdin) is being
    stopped, ``crash`` fails at 2 s and the run cancels ``stuck``. The run must still end
    without waiting for the server to exit on its own, and leave no process behind."""
    tag = f"brain-cancel-{uuid.uuid4().hex}"
    env = {"LEAK_TAG": tag}
    before = live_descendants()

    @workflow
    def mcp_cancel_in_shutdown():
        with parallel():
            mcp_tool("stuck", server_command=["sh", "-c", "exec sleep 120"], tool="t",
                     timeout_seconds=1, env=env)
            mcp_tool("crash", server_command=["sh", "-c", "sleep 2; echo crash-now >&2; exit 9"],
                     tool="t", env=env)

    hung, (r,) = run_bounded((mcp_cancel_in_shutdown, None), seconds=15, tag=tag)
    leftovers = sorted(tagged_processes(tag))
    assert not hung, ("the run waited for a cancelled step's server that never exits on its own "
                      "(the test killed it after 15 s)")
    assert r.status == "failed"
    stuck, crash = r.steps["stuck"], r.steps["crash"]
    # Which one fails first depends on how long stopping ``stuck``'s server takes
    # (about 2 s while it ignores its closed stdin); the other is cancelled.
    assert {stuck.status, crash.status} <= {"failed", "cancelled"}
    assert "failed" in {stuck.status, crash.status}
    if stuck.status == "failed":
        assert stuck.error == "timed out after 1 s"
    if crash.status == "failed":
        assert "exit code 9" in (crash.error or "") and "crash-now" in (crash.error or "")
        assert crash.stderr is not None and "crash-now" in crash.stderr
    assert r.error in (f"step 'crash' failed: {crash.error}", f"step 'stuck' failed: {stuck.error}")
    assert wait_until(lambda: not tagged_processes(tag)), leftovers
    assert wait_until(lambda: not (live_descendants() - before)), live_descendants() - before


def test_no_process_left_after_fifty_steps_with_timeouts_crashes_and_cancels(tmp_path: Path):
    """Fifty MCP steps in five runs, all at once: successes, timeouts (servers that ignore
    their closed stdin, SIGTERM, or both), crashes before and during the call, servers
    that exit without answering, a missing program, and siblings cancelled when a run
    halts. Afterwards no process of ours remains."""
    tag = f"brain-leak-{uuid.uuid4().hex}"
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {"LEAK_TAG": tag, "MCP_PID_DIR": str(pids)}
    before = live_descendants()
    sleeper = ["sh", "-c", "exec sleep 120"]
    detached = ["sh", "-c", "exec sleep 120 </dev/null >/dev/null 2>&1"]
    no_term = ["sh", "-c", "trap '' TERM; sleep 120"]

    @workflow
    def leak_ok():
        with parallel():
            for i in range(6):
                mcp_tool(f"pid{i}", server_command=tools(), tool="get_pid", env=env)

    @workflow
    def leak_timeouts():
        with parallel():
            mcp_tool("hang", server_command=tools(), tool="hang", env=env, timeout_seconds=2)
            mcp_tool("stubborn", server_command=[PY, STUBBORN], tool="hang_hard", env=env,
                     timeout_seconds=2)
            for i in range(3):
                mcp_tool(f"sleep{i}", server_command=sleeper, tool="t", env=env, timeout_seconds=2)
            for i in range(2):
                mcp_tool(f"detached{i}", server_command=detached, tool="t", env=env,
                         timeout_seconds=2)
            for i in range(3):
                mcp_tool(f"noterm{i}", server_command=no_term, tool="t", env=env,
                         timeout_seconds=2)

    @workflow
    def leak_crash_at_start():
        with parallel():
            for i in range(10):
                mcp_tool(f"crash{i}", server_command=["sh", "-c", f"echo crash-{i} >&2; exit 7"],
                         tool="t", env=env)

    @workflow
    def leak_crash_mid_call():
        with parallel():
            for i in range(2):
                mcp_tool(f"die{i}", server_command=tools(), tool="die", args={"code": 3}, env=env)
            for i in range(4):
                mcp_tool(f"sleep{i}", server_command=sleeper, tool="t", env=env)
            for i in range(2):
                mcp_tool(f"detached{i}", server_command=detached, tool="t", env=env)
            for i in range(2):
                mcp_tool(f"noterm{i}", server_command=no_term, tool="t", env=env)

    @workflow
    def leak_mixed():
        with parallel():
            for i in range(4):
                mcp_tool(f"noterm{i}", server_command=no_term, tool="t", env=env)
            for i in range(4):
                mcp_tool(f"sleep{i}", server_command=sleeper, tool="t", env=env)
            for i in range(4):
                mcp_tool(f"detached{i}", server_command=detached, tool="t", env=env)
            mcp_tool("missing", server_command=[str(tmp_path / "missing-server")], tool="t",
                     env=env)
            mcp_tool("exits", server_command=["sh", "-c", "sleep 1; exit 0"], tool="t", env=env)

    workflows = [leak_ok, leak_timeouts, leak_crash_at_start, leak_crash_mid_call, leak_mixed]
    assert sum(len(wf.graph.nodes) for wf in workflows) == 50
    hung, results = run_bounded(*((wf, None) for wf in workflows), seconds=30, tag=tag)
    runs = dict(zip(["ok", "timeouts", "crash_at_start", "crash_mid_call", "mixed"], results,
                    strict=True))

    def clean() -> bool:
        return (not tagged_processes(tag) and not (live_descendants() - before)
                and all(_gone(p) for p in recorded_pids(pids)))

    is_clean = wait_until(clean, 15.0)
    assert not hung, ("the runs waited for servers that never exit on their own "
                      "(the test killed them after 30 s)")
    assert is_clean, {
        "tagged": sorted(tagged_processes(tag)),
        "descendants": sorted(live_descendants() - before),
        "servers": [p for p in recorded_pids(pids) if not _gone(p)],
    }
    ok = runs["ok"]
    assert ok.status == "succeeded", ok.error
    served = {int(s.output or 0) for s in ok.steps.values()}
    assert len(served) == 6
    assert served <= set(recorded_pids(pids))
    for key in ("timeouts", "crash_at_start", "crash_mid_call", "mixed"):
        run = runs[key]
        assert run.status == "failed", key
        assert {s.status for s in run.steps.values()} <= {"failed", "cancelled"}, key
    assert "timed out after 2 s" in (runs["timeouts"].error or "")
    assert "exit code 7" in (runs["crash_at_start"].error or "")
