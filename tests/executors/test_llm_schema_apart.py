"""Checking a model's answer against a JSON Schema dict never holds the event loop, and a
failed structured step keeps the model's answer (SPEC §18, §20, §2 "Failure").

Answers come over real HTTP from a :class:`brain.testing.FakeChatServer` on 127.0.0.1; the
check runs in a real child process (``brain.executors.llm_schema_check``). The loop's
responsiveness is measured by a heartbeat task beside the run: the longest gap between its
beats (a generous bound, 5 s, so a busy machine cannot fail it; on the code as it was, one
gap is the whole backtracking, minutes).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import wait_for

from brain import llm, workflow
from brain.executors import llm_schema_check
from brain.executors.llm_schema_check import CheckTookTooLong, check_apart
from brain.testing import FakeChatServer

pytestmark = pytest.mark.usefixtures("collect_garbage_first")

#: Seconds without a heartbeat that would mean the loop was held: far past any stall of a busy
#: machine, far short of the checks below, which backtrack or compare for minutes in-process.
SLOW_GAP = 60.0


async def run_beside_heartbeat(wf: Any, url: str) -> tuple[Any, float]:
    """Run ``wf`` while a task beats every 20 ms; the run and the longest gap seen. A run of
    a quick structured step comes first, untimed: a first run imports modules and creates
    the database, which is not what is measured."""
    @workflow(name="quick_schema")
    def quick_schema() -> None:
        llm("ask", prompt="p", model="m", provider_url=url, schema={"type": "array"})

    assert (await quick_schema.arun()).succeeded
    gaps = [0.0]
    stop = asyncio.Event()

    async def beat() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.02)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    beating = asyncio.create_task(beat())
    try:
        result = await wf.arun()
    finally:
        stop.set()
        await beating
    return result, max(gaps)


def checking_children() -> set[int]:
    """Pids of this process's children that run the schema check."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"llm_schema_check" in cmdline:
            found.add(int(entry.name))
    return found


def idle_children() -> set[int]:
    return {child.proc.pid for child in llm_schema_check._idle}


#: Answers that make a backtracking engine (or jsonschema's pairwise ``uniqueItems``) work
#: for minutes or more: the schema's keyword, the answer.
PATTERNS = st.sampled_from(["^({c}+)+$", "^({c}|{c})+$", "^({c}|{c}{c})+$", "^({c}*)*$",
                            "^(({c}+)+)+$"])
PATHOLOGICAL = st.one_of(
    st.tuples(PATTERNS, st.sampled_from("ab7_"), st.integers(min_value=32, max_value=40)).map(
        lambda t: ({"type": "object", "properties": {"a": {
            "type": "string", "pattern": t[0].format(c=t[1])}}},
            json.dumps({"a": t[1] * t[2] + "!"}))),
    st.tuples(PATTERNS, st.sampled_from("xy"), st.integers(min_value=32, max_value=40)).map(
        lambda t: ({"type": "object", "patternProperties": {t[0].format(c=t[1]): {}},
                    "additionalProperties": False},
                   json.dumps({t[1] * t[2] + "!": 1}))),
    st.integers(min_value=60_000, max_value=90_000).map(
        lambda n: ({"type": "array", "uniqueItems": True},
                   json.dumps([{"n": i} for i in range(n)], separators=(",", ":")))),
)


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=PATHOLOGICAL)
def test_a_pathological_check_fails_the_step_at_its_timeout_and_never_holds_the_loop(
        case: tuple[dict[str, Any], str]) -> None:
    """Catastrophic patterns (in ``pattern`` and ``patternProperties``) and a long
    ``uniqueItems`` array: the step fails "timed out after 1 s", keeping the answer and
    saying in its log what it was doing; the loop beside it kept beating; the checking
    child was killed (only idle ones are left)."""
    schema, answer = case
    with FakeChatServer(reply=answer) as server, FakeChatServer(reply="[]") as quick:
        url = server.url

        @workflow(name="pathological_schema")
        def pathological_schema() -> None:
            llm("ask", prompt="p", model="m", provider_url=url, schema=schema,
                timeout_seconds=1, max_output_bytes=4 << 20)

        result, gap = asyncio.run(run_beside_heartbeat(pathological_schema, quick.url))
    print(f"longest gap of the loop: {gap * 1000:.0f} ms ({json.dumps(schema)[:60]})")
    step = result.steps["ask"]
    assert step.status == "failed"
    assert step.error == "timed out after 1 s"
    assert step.output == answer
    assert gap < SLOW_GAP
    wait_for(lambda: checking_children() <= idle_children(), 10, "the checking child to end")


def test_a_child_past_its_seconds_ends_itself_and_says_so() -> None:
    """Nobody cancels the check: the child's own alarm ends it."""
    schema = {"type": "string", "pattern": "^(a+)+$"}

    async def check() -> None:
        with pytest.raises(CheckTookTooLong, match="took over 1 s"):
            await check_apart(schema, json.dumps("a" * 40 + "!"), 0.5)

    asyncio.run(check())
    wait_for(lambda: checking_children() <= idle_children(), 10, "the checking child to end")


def test_a_check_gives_the_verdict_and_the_child_serves_the_next() -> None:
    """The rule is the one of before (Python's patterns, lookahead included) and a child
    serves check after check."""
    schema = {"type": "object", "properties": {"pin": {"type": "string",
                                                       "pattern": r"^(?=.*\d)\w{4}$"}}}

    async def checks() -> list[tuple[Any, ...]]:
        return [await check_apart(schema, text, 5)
                for text in ('{"pin": "ab1c"}', '{"pin": "abcd"}', "[1,")]

    good, bad, broken_json = asyncio.run(checks())
    assert good == ('{"pin":"ab1c"}', "", False, False)
    assert bad[0] is None and "does not match" in bad[1] and bad[2:] == (False, False)
    assert broken_json[0] is None and "not JSON" in broken_json[1]
    assert len(llm_schema_check._idle) >= 1


# --- a failed structured step keeps the answer ------------------------------------------------


WORKFLOW = """\
from brain import llm, workflow

VERDICT = {"type": "object", "properties": {"urgent": {"type": "boolean"}},
           "required": ["urgent"]}


@workflow
def judged():
    llm("judge", prompt="Is it urgent?", model="m", schema=VERDICT)
"""


def test_a_step_whose_answers_do_not_match_keeps_the_last_one_scrubbed(
        tmp_path: Path, brain_cmd: list[str]) -> None:
    """``brain run --json``: both answers miss the schema; the step fails at once and its
    output is the model's last answer, with the API key it echoed scrubbed."""
    key = "sk-echoed-key-0123456789"
    with FakeChatServer() as server:
        server.respond(content="I think it is urgent")
        server.respond(content=f'{{"urgent": "very", "note": "key {key}"}}')
        (tmp_path / "judged.py").write_text(WORKFLOW)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("BRAIN_", "THE_BRAIN_", "LLM_"))}
        env.update(BRAIN_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}",
                   LLM_BASE_URL=server.url, LLM_API_KEY=key)
        done = subprocess.run([*brain_cmd, "run", str(tmp_path / "judged.py"), "--json"],
                              env=env, capture_output=True, text=True, timeout=120)
        assert len(server.requests) == 2
    run = json.loads(done.stdout)
    [step] = run["steps"]
    assert run["status"] == "failed" and step["status"] == "failed"
    assert step["error"].startswith("answer does not match the schema: ")
    assert step["output"] == '{"urgent": "very", "note": "key ***"}'
    assert key not in done.stdout + done.stderr
    assert key not in (tmp_path / "brain.db").read_bytes().decode(errors="replace")


@settings(max_examples=80, deadline=None)
@given(limit=st.integers(min_value=1, max_value=300), before=st.integers(min_value=0, max_value=400),
       secret=st.text(alphabet="abcdefghijklmnopqrstuvw0123456789", min_size=8, max_size=40),
       filler=st.sampled_from(["x", "é", "😀"]))
def test_a_kept_answer_fits_max_output_bytes_and_holds_no_piece_of_a_secret(
        limit: int, before: int, secret: str, filler: str) -> None:
    """However the cut at ``max_output_bytes`` falls on a secret (or on a character of
    several bytes), no piece of the secret is kept, and the rest is the answer's start."""
    from brain import _secrets
    from brain.executors.llm import _kept

    _secrets.remember(secret)
    answer = filler * before + secret + "y" * 500
    kept = _kept(answer, limit)
    assert len(kept.encode()) <= limit
    assert all(secret[i:i + 6] not in kept for i in range(len(secret) - 5))
    assert (_secrets.scrub(answer) or "").startswith(kept)
