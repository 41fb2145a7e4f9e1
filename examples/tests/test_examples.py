"""Tests for the shipped examples, written the way a user tests their own workflows.

``brain.testing.run_workflow`` runs each example with the real runner. Steps that
are local and harmless (``echo``, ``date``, ``df``, ``ls``, the MCP time server)
run for real; steps that need something off this machine (an LLM endpoint,
another host) or write outside the test folder (``daily_digest``'s ``tee -a``
into /tmp) are mocked. The assertions are on resolved inputs and outputs.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from daily_digest import DIGEST_FILE, daily_digest
from fanout import SAMPLE as FANOUT_SAMPLE
from fanout import text_stats
from hello import hello
from mcp_time import TIME_SERVER, TIMEZONE, mcp_time
from notes_digest import notes_digest
from steps import inventory
from two_models import CAREFUL_MODEL, CAREFUL_URL, FAST_MODEL, two_models
from two_models import SAMPLE as NOTES_SAMPLE

from brain import StepFailed
from brain.testing import FakeChatServer, MockCall, run_workflow

EXAMPLES = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """None of the caller's LLM or Brain settings: the examples' own defaults apply."""
    for key in list(os.environ):
        if key.startswith(("BRAIN_", "THE_BRAIN_", "LLM_")) or key == "OTHER_HOST_KEY":
            monkeypatch.delenv(key)
    monkeypatch.setenv("BRAIN_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}")
    yield
    assert not (tmp_path / "brain.db").exists()        # run_workflow keeps runs in memory


# --- hello.py: two local shell steps -------------------------------------------------------------

def test_hello_runs_for_real() -> None:
    r = run_workflow(hello)
    assert r.succeeded, r.error
    assert r.steps["who"].inputs == {"command": "echo world"}
    assert r.steps["who"].output == "world"
    assert r.steps["greet"].inputs == {"argv": ["echo", "hello, world!"]}
    assert r.steps["greet"].output == "hello, world!"
    assert r.calls == {}


def test_hello_greets_whatever_the_first_step_says() -> None:
    r = run_workflow(hello, mocks={"who": "$(echo injected); `echo injected`"})
    assert r.succeeded, r.error
    assert r.steps["greet"].inputs == {"argv": ["echo", "hello, $(echo injected); `echo injected`!"]}
    assert r.steps["greet"].output == "hello, $(echo injected); `echo injected`!"  # no shell: argv


# --- fanout.py: fan-out / fan-in of local shell steps ---------------------------------------------

def test_fanout_counts_the_trigger_body() -> None:
    body = "one two\nthree two\ntwo"
    r = run_workflow(text_stats, body)
    assert r.succeeded, r.error
    out = {name: s.output or "" for name, s in r.steps.items()}
    assert out["text"] == body
    for name in ("lines", "words", "top-words", "longest"):
        assert r.steps[name].inputs["stdin"] == body + "\n"
    assert int(out["lines"]) == 3
    assert int(out["words"]) == 5
    assert out["longest"] == "three two"
    assert out["top-words"].splitlines()[0].split() == ["3", "two"]
    assert out["report"] == (f"lines: {out['lines']}\nwords: {out['words']}\n"
                             f"longest: {out['longest']}\ntop words:\n{out['top-words']}")


def test_fanout_inserts_the_body_shell_quoted() -> None:
    body = "it's $(echo INJECTED) and `echo INJECTED`; exit 7"
    r = run_workflow(text_stats, body)
    assert r.succeeded, r.error
    assert r.steps["text"].output == body
    assert "INJECTED" not in (r.steps["report"].output or "").replace(body, "")


def test_fanout_uses_its_sample_without_a_body() -> None:
    r = run_workflow(text_stats)
    assert r.succeeded, r.error
    assert r.steps["text"].output == FANOUT_SAMPLE.rstrip("\n")
    assert int(r.steps["lines"].output or "") == len(FANOUT_SAMPLE.splitlines())
    assert int(r.steps["words"].output or "") == len(FANOUT_SAMPLE.split())


def test_fanout_siblings_all_read_the_mocked_text() -> None:
    r = run_workflow(text_stats, mocks={"text": "a b\nc"})
    assert r.succeeded, r.error
    assert {name: r.steps[name].inputs["stdin"] for name in ("lines", "words", "top-words",
                                                             "longest")} == dict.fromkeys(
        ("lines", "words", "top-words", "longest"), "a b\nc\n")
    assert (int(r.steps["lines"].output or ""), int(r.steps["words"].output or "")) == (2, 3)
    assert r.steps["longest"].output == "a b"
    # Each value is one shell-quoted word of the report's printf.
    assert r.steps["report"].inputs["command"].endswith(" 2 3 'a b' " + _sh(r.steps["top-words"].output))


def _sh(value: str | None) -> str:
    import shlex

    return shlex.quote(value or "")


# --- steps.py: @step functions fed by shell steps --------------------------------------------------

NAMES = '["a.py", "b.txt", "README"]'


def test_steps_parses_the_shell_json_into_typed_arguments() -> None:
    r = run_workflow(inventory, mocks={"names": NAMES, "total": "3"})
    assert r.succeeded, r.error
    assert json.loads(r.steps["by_extension"].output or "") == {"py": 1, "txt": 1, "(none)": 1}
    assert r.steps["pick"].inputs == {"names": NAMES, "index": 0}
    assert r.steps["pick"].output == "a.py"
    assert r.steps["pick-2"].inputs == {"names": NAMES, "index": -1}
    assert r.steps["pick-2"].output == "README"
    assert r.steps["summary"].inputs == {"counts": r.steps["by_extension"].output, "total": "3",
                                         "first": "a.py", "last": "README"}
    assert r.steps["summary"].output == "3 files (1 .(none), 1 .py, 1 .txt), from a.py to README"


def test_steps_a_mocked_function_step_returning_a_dict_is_stored_as_json() -> None:
    r = run_workflow(inventory, mocks={"names": NAMES, "total": "3",
                                       "by_extension": lambda call: {"py": 2, "md": 1}})
    assert r.succeeded, r.error
    assert r.calls["by_extension"][0].inputs == {"names": NAMES}
    assert r.steps["summary"].inputs["counts"] == '{"py":2,"md":1}'
    assert r.steps["summary"].output == "3 files (1 .md, 2 .py), from a.py to README"


def test_steps_output_that_is_not_a_json_list_fails_the_typed_step() -> None:
    r = run_workflow(inventory, mocks={"names": "a.py b.txt", "total": "2"})
    assert r.status == "failed"
    assert r.steps["by_extension"].status == "failed"
    assert "'names'" in (r.steps["by_extension"].error or "")
    assert r.steps["summary"].status == "skipped"


def test_steps_inventories_the_examples_folder_for_real() -> None:
    r = run_workflow(inventory)
    assert r.succeeded, r.error
    names = json.loads(r.steps["names"].output or "")
    total = int(r.steps["total"].output or "")
    assert len(names) == total
    assert {"hello.py", "steps.py", "tests"} <= set(names)
    assert set(names) <= {p.name for p in EXAMPLES.iterdir()}
    assert sum(json.loads(r.steps["by_extension"].output or "").values()) == total
    assert r.steps["pick"].output == names[0]
    assert r.steps["pick-2"].output == names[-1]
    assert r.steps["summary"].output.startswith(f"{total} files (")      # type: ignore[union-attr]


# --- daily_digest.py: local facts, an LLM, an append to /tmp ---------------------------------------

def _digest_state() -> tuple[bool, int, float]:
    path = Path(DIGEST_FILE)
    if not path.exists():
        return False, 0, 0.0
    stat = path.stat()
    return True, stat.st_size, stat.st_mtime


def test_daily_digest_prompts_with_the_real_facts_and_appends_the_summary() -> None:
    before = _digest_state()
    r = run_workflow(daily_digest, "focus on disk space",
                     mocks={"summary": "- disk: fine\n- load: low", "append": ""})
    assert r.succeeded, r.error
    when = r.steps["when"].output or ""
    facts = r.steps["facts"].output or ""
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", when)
    assert "Filesystem" in facts and "daily_digest.py" in facts     # df -h . and ls -la, for real
    summary = r.steps["summary"].inputs
    assert summary["system"] == "You write short, factual status notes for a system administrator."
    assert summary["prompt"] == ("Summarise this machine's state in at most five bullet points. "
                                 "Mention anything unusual. Extra instructions (may be empty): "
                                 f"focus on disk space\n\n{facts}")
    assert (summary["temperature"], summary["max_tokens"]) == (0.2, 600)
    assert summary["url"] == "http://localhost:1234/v1/chat/completions"   # the default base
    assert r.steps["append"].inputs == {"argv": ["tee", "-a", DIGEST_FILE],
                                        "stdin": f"## {when}\n\n- disk: fine\n- load: low\n\n"}
    assert _digest_state() == before                                # nothing written to /tmp


def test_daily_digest_summary_over_http(fake_llm: FakeChatServer) -> None:
    fake_llm.respond(content="- all good")
    before = _digest_state()
    r = run_workflow(daily_digest, mocks={"append": lambda call: call.inputs["stdin"]})
    assert r.succeeded, r.error
    [request] = fake_llm.requests
    assert request.json == {
        "model": "fake-model", "temperature": 0.2, "max_tokens": 600,
        "messages": [{"role": "system", "content": r.steps["summary"].inputs["system"]},
                     {"role": "user", "content": r.steps["summary"].inputs["prompt"]}]}
    assert r.steps["append"].output == f"## {r.steps['when'].output}\n\n- all good\n\n"
    assert _digest_state() == before


# --- two_models.py: two LLMs, one of them on another host ------------------------------------------

def test_two_models_sends_each_model_its_own_settings() -> None:
    r = run_workflow(two_models, mocks={
        "fast": "Disk filled up\nThe backup slowed down.",
        "careful": lambda call: f"Analysis of {len(call.inputs['prompt'])} characters."})
    assert r.succeeded, r.error
    notes = r.steps["notes"].output
    assert notes == NOTES_SAMPLE.rstrip("\n")                      # the body is empty: the sample
    fast, careful = r.steps["fast"].inputs, r.steps["careful"].inputs
    assert fast["prompt"] == f"Two sentences, the first one a title: {notes}"
    assert (fast["model"], fast["max_tokens"]) == (FAST_MODEL, 400)
    assert fast["url"] == "http://localhost:1234/v1/chat/completions"
    assert "api_key" not in fast
    assert careful["prompt"] == f"Detailed breakdown, causes and next steps: {notes}"
    assert (careful["model"], careful["max_tokens"]) == (CAREFUL_MODEL, 8000)
    assert careful["url"] == CAREFUL_URL + "/chat/completions"
    assert careful["api_key"] == "***"                             # OTHER_HOST_KEY is not even set
    assert r.steps["combine"].inputs == {"quick": "Disk filled up\nThe backup slowed down.",
                                         "detailed": r.steps["careful"].output}
    assert r.steps["combine"].output == (
        "# Disk filled up\n\nDisk filled up\nThe backup slowed down.\n\n## Details\n\n"
        f"Analysis of {len(careful['prompt'])} characters.\n")


def test_two_models_retries_the_careful_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTHER_HOST_KEY", "sk-other-host")

    def careful(call: MockCall) -> str:
        if call.try_number == 1:
            raise StepFailed("HTTP 503 from other-host", retry_after=0)
        return "Careful analysis."

    r = run_workflow(two_models, "02:10 disk full", mocks={"fast": "Quick take", "careful": careful})
    assert r.succeeded, r.error
    assert [c.try_number for c in r.calls["careful"]] == [1, 2]
    assert r.calls["careful"][0].inputs == r.calls["careful"][1].inputs
    assert r.calls["careful"][0].inputs["api_key"] == "***"
    assert "sk-other-host" not in json.dumps(r.steps["careful"].inputs)
    assert r.steps["notes"].output == "02:10 disk full"
    assert r.steps["combine"].output == "# Quick take\n\nQuick take\n\n## Details\n\nCareful analysis.\n"


def test_two_models_a_refused_key_halts_the_run() -> None:
    cancelled: list[str] = []

    async def slow_fast(call: MockCall) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(call.name)
            raise
        return "never"

    def refused(call: MockCall) -> str:
        raise StepFailed("HTTP 401 from other-host: invalid key", retryable=False)

    r = run_workflow(two_models, mocks={"fast": slow_fast, "careful": refused})
    assert r.status == "failed"
    assert r.error == "step 'careful' failed: HTTP 401 from other-host: invalid key"
    assert len(r.calls["careful"]) == 1                            # not retried despite retries=2
    assert (r.steps["fast"].status, r.steps["combine"].status) == ("cancelled", "skipped")
    assert cancelled == ["fast"]


def test_two_models_unmocked_careful_step_needs_its_key() -> None:
    r = run_workflow(two_models, mocks={"fast": "Quick take"})
    assert r.status == "failed"
    assert r.error == "step 'careful' failed: secret OTHER_HOST_KEY is not set in the environment"


# --- mcp_time.py: a real local MCP server, then an LLM ----------------------------------------------

def _time_server_available() -> bool:
    program = TIME_SERVER[0]
    return Path(program).is_file() if os.sep in program else shutil.which(program) is not None


def test_mcp_time_inputs_with_everything_mocked() -> None:
    r = run_workflow(mcp_time, strict=True, mocks={
        "now": '{"timezone": "Europe/Bucharest", "datetime": "2025-01-01T09:00:00+02:00"}',
        "say": "It is 9 o'clock on New Year's Day."})
    assert r.succeeded, r.error
    assert r.steps["now"].inputs == {"server_command": TIME_SERVER, "tool": "get_current_time",
                                     "args": {"timezone": TIMEZONE}}
    assert r.steps["say"].inputs["prompt"] == (
        "Say what time and day it is, from this JSON:\n\n"
        '{"timezone": "Europe/Bucharest", "datetime": "2025-01-01T09:00:00+02:00"}')
    assert r.steps["say"].inputs["system"] == "You answer in exactly one short, friendly sentence."


@pytest.mark.skipif(not _time_server_available(), reason="mcp-server-time is not installed")
def test_mcp_time_asks_the_real_time_server() -> None:
    def say(call: MockCall) -> str:
        now = json.loads(call.inputs["prompt"].split("\n\n", 1)[1])
        return f"It is {now['datetime']} in {now['timezone']}."

    r = run_workflow(mcp_time, mocks={"say": say})
    assert r.succeeded, r.error
    now = json.loads(r.steps["now"].output or "")
    assert now["timezone"] == TIMEZONE
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$", now["datetime"])
    assert r.steps["say"].inputs["prompt"] == (
        f"Say what time and day it is, from this JSON:\n\n{r.steps['now'].output}")
    assert r.steps["say"].output == f"It is {now['datetime']} in {TIMEZONE}."
    assert list(r.calls) == ["say"]


# --- notes_digest.py (the README's first example): the shipped notes server, two LLMs ---------------

def test_notes_digest_recalls_from_the_real_notes_server() -> None:
    r = run_workflow(notes_digest, trigger={"body": "backup job"},
                     mocks={"fast": "Backups moved.\nDetails follow.", "careful": "Long.",
                            "save": ""})
    assert r.succeeded, r.error
    assert r.steps["recall"].output == (
        "The nightly backup job moved from 02:00 to 03:30 UTC so it no longer overlaps the "
        "batch import.")
    assert r.steps["fast"].inputs["prompt"] == f"Two sentences: {r.steps['recall'].output}"
    assert r.steps["headline"].output == "Backups moved."
    assert r.steps["save"].inputs["stdin"] == "# Backups moved.\nBackups moved.\nDetails follow.\n\nLong.\n"
    assert set(r.calls) == {"fast", "careful", "save"}
