"""Attack (SPEC §11, §18): a hostile LLM endpoint answers ``llm(..., schema=...)`` steps with
the API key it was sent, in answers built to fail validation — the validation error is
sent back to the model in the re-ask *and* stored with the failed step.

Promised: secrets never appear in what is stored (inputs, outputs, errors, logs) in
their common encodings (base64, hex, URL-quoted, JSON-escaped); an answer that does not
match is asked once more, then fails ``answer does not match the schema: …``, not retried
further; a malformed LLM answer fails at once.

Holds (hypothesis-generated keys, a pydantic model and a JSON Schema dict): the key as a
value, as an unexpected property name, as a nested key, as the whole answer, behind 400
characters of padding, in an answer that is no JSON, or in a valid answer — JSON-escaped,
URL-quoted, base64 or hex — never reaches the stored run or the re-ask; the ``Basic``
header of a ``user:password@`` provider URL echoed back neither.

Found (``xfail(strict=True)`` below):

1. The key URL-encoded the way Java's ``URLEncoder`` / JavaScript's ``URLSearchParams``
   write it (``~`` → ``%7E``), or JSON-escaped the way .NET writes it (``+`` →
   ``\\u002B``), is stored in the validation error and sent in the re-ask
   (``brain/_secrets.py::remember``: only Python's spellings are known).
2. An answer body nested deeper than Python's recursion limit fails with
   ``RecursionError: maximum recursion depth exceeded ...`` and is retried, where a
   malformed answer must fail at once (``brain/executors/llm.py::_json_of`` catches
   ``JSONDecodeError``/``UnicodeDecodeError`` only).
3. A JSON Schema ``pattern`` is matched with Python's backtracking ``re`` on the event
   loop: an answer built for catastrophic backtracking holds the whole process far past
   the step's ``timeout_seconds`` (no timer, heartbeat or other step runs meanwhile)
   (``brain/executors/llm.py::LlmExecutor.execute`` calls ``checked_answer`` inline;
   ``brain/executors/llm_schema.py::_check_schema``).

Run: ``.venv/bin/pytest tests/attack/test_attack_llm_schema_secrets.py``
"""

from __future__ import annotations

import base64
import json
import string
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from brain import RunResult, llm, secret, workflow
from brain.testing import FakeChatServer

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    score: int
    labels: dict[str, int] = {}


VERDICT_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["score"],
                  "properties": {"score": {"type": "integer"},
                                 "note": {"type": "string", "maxLength": 4},
                                 "labels": {"type": "object",
                                            "additionalProperties": {"type": "integer"}}}}


@pytest.fixture(scope="module")
def chat() -> Iterator[FakeChatServer]:
    with FakeChatServer() as server:
        yield server


def spellings(key: str) -> dict[str, str]:
    """The key as the scrubber promises to know it (SPEC §11)."""
    data = key.encode()
    return {"raw": key, "json": json.dumps(key)[1:-1], "quote": quote(key, safe=""),
            "quote_plus": quote_plus(key), "base64": base64.b64encode(data).decode(),
            "hex": data.hex()}


#: Answers that fail both schemas, each carrying ``v`` somewhere the error may quote it.
FAILING: dict[str, Callable[[str], str]] = {
    "as the score": lambda v: json.dumps({"score": v}),
    "as a property name": lambda v: json.dumps({"score": 1, v: 1}),
    "as a label's name": lambda v: json.dumps({"score": 1, "labels": {v: "x"}}),
    "as the whole answer": lambda v: json.dumps(v),
    "after padding": lambda v: json.dumps({"score": "x" * 400 + v}),
    "in prose": lambda v: f"Sure! Here it is: {v}",
    "as a list": lambda v: json.dumps([v, {"k": v}]),
}


def stored(run: RunResult, tmp_path: Path) -> list[str]:
    db = b"".join(p.read_bytes() for p in sorted(tmp_path.glob("brain.db*")))
    return [json.dumps(run.to_json_dict(), ensure_ascii=False), run.error or "",
            db.decode("utf-8", "replace")]


def found_in(key: str, texts: list[str]) -> list[str]:
    return [name for name, form in spellings(key).items() if any(form in t for t in texts)]


B64TOKEN = string.ascii_letters + string.digits + "-._~+/"
salts = st.uuids().map(lambda u: u.hex[:10])
keys = st.builds(lambda body, salt: "sk-" + body + salt,
                 st.text(alphabet=B64TOKEN + "'\"\\<>&", min_size=2, max_size=40), salts)


# --- holds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("schema_kind", ["pydantic", "json-schema"])
def test_a_key_echoed_in_an_answer_that_fails_validation_is_never_stored_or_sent_back(
        chat: FakeChatServer, schema_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    schema: Any = Verdict if schema_kind == "pydantic" else VERDICT_SCHEMA

    @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.generate])
    @given(key=keys, place=st.sampled_from(sorted(FAILING)),
           spelling=st.sampled_from(["raw", "json", "quote", "quote_plus", "base64", "hex"]))
    def check(key: str, place: str, spelling: str) -> None:
        monkeypatch.setenv("ATK_LLM_KEY", key)

        @workflow(name=f"atk_llm_schema_echo_{schema_kind.replace('-', '_')}")
        def flow() -> None:
            llm("judge", prompt="Rate it.", model="m", provider_url=chat.url,
                api_key=secret("ATK_LLM_KEY"), schema=schema, retries=2, retry_delay_seconds=0)

        chat.requests.clear()
        answer = FAILING[place](spellings(key)[spelling])
        chat.respond(content=answer)
        chat.respond(content=answer)
        r = flow()
        step = r.steps["judge"]
        assert step.status == "failed", (answer, step.output)
        assert step.tries == 1
        assert (step.error or "").startswith("answer does not match the schema: ")
        assert len(chat.requests) == 2  # asked once more, the error in the conversation
        assert chat.requests[0].headers["authorization"] == f"Bearer {key}"
        reask = chat.requests[1].json["messages"][-1]["content"]
        assert "does not match the required JSON schema" in reask
        assert found_in(key, [reask]) == [], (place, spelling, reask)
        assert found_in(key, stored(r, tmp_path)) == [], (place, spelling, step.error)

    check()


def test_a_key_inside_a_valid_answer_is_stored_scrubbed(chat: FakeChatServer, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    key = "sk-valid-answer-'q\"uo\\te<&>-4e6c8a0b"
    monkeypatch.setenv("ATK_LLM_KEY", key)

    @workflow
    def atk_llm_schema_valid_echo() -> None:
        llm("judge", prompt="Rate it.", model="m", provider_url=chat.url,
            api_key=secret("ATK_LLM_KEY"), schema=Verdict)

    chat.respond(content=json.dumps({"score": 3, "labels": {key: 1, spellings(key)["quote"]: 2}}))
    r = atk_llm_schema_valid_echo()
    assert r.status == "succeeded", r.error
    assert r.steps["judge"].output == '{"score":3,"labels":{"***":1,"***":2}}'
    assert found_in(key, stored(r, tmp_path)) == []


def test_a_provider_url_password_echoed_as_basic_auth_is_never_stored(
        chat: FakeChatServer, tmp_path: Path):
    password = "llm-url-pass-2d4f6a8c"
    url = chat.url.replace("http://", f"http://robot:{password}@")
    basic = base64.b64encode(f"robot:{password}".encode()).decode()

    @workflow
    def atk_llm_basic_echo() -> None:
        llm("judge", prompt="Rate it.", model="m", provider_url=url, schema=VERDICT_SCHEMA)

    chat.requests.clear()
    chat.respond(content=json.dumps({"score": f"Basic {basic}"}))
    chat.respond(status=401, body=f"bad credentials: Basic {basic} ({password})")
    r = atk_llm_basic_echo()
    assert chat.requests[0].headers["authorization"] == f"Basic {basic}"
    assert r.steps["judge"].status == "failed"
    assert "HTTP 401" in (r.steps["judge"].error or ""), r.steps["judge"].error
    texts = [*stored(r, tmp_path), chat.requests[1].json["messages"][-1]["content"]]
    assert not [t for t in texts if basic in t or password in t]


# --- found ---------------------------------------------------------------------------------------

KEY = "sk-Zm9v+YmFy/~c2VjcmV0-5a7c9e1b"


def form_encode(value: str) -> str:
    keep = set(string.ascii_letters + string.digits + "*-._")
    return "".join(chr(b) if chr(b) in keep else f"%{b:02X}" for b in value.encode())


def dotnet_json(value: str) -> str:
    return "".join(f"\\u{ord(c):04X}" if c in "+<>&'" else c for c in value)


@pytest.mark.parametrize("spell", [form_encode, dotnet_json], ids=["form", "dotnet"])
def test_a_key_in_another_common_spelling_never_reaches_the_error_or_the_reask(
        chat: FakeChatServer, spell: Callable[[str], str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ATK_LLM_KEY", KEY)

    @workflow(name=f"atk_llm_spelled_{spell.__name__}")
    def flow() -> None:
        llm("judge", prompt="Rate it.", model="m", provider_url=chat.url,
            api_key=secret("ATK_LLM_KEY"), schema=VERDICT_SCHEMA)

    chat.requests.clear()
    spelled = spell(KEY)
    assert spelled != KEY
    # The double escape keeps .NET's \uXXXX in the decoded value.
    answer = '{"score": "' + spelled.replace("\\", "\\\\") + '"}'
    chat.respond(content=answer)
    chat.respond(content=answer)
    r = flow()
    assert r.steps["judge"].status == "failed"
    reask = chat.requests[1].json["messages"][-1]["content"]
    forms = (spelled, spelled.replace("\\", "\\\\"))  # as written, and as repr() quotes it
    where = [w for w, t in (("re-ask", reask), ("stored error", r.steps["judge"].error or ""))
             if any(f in t for f in forms)]
    assert where == [], f"{spelled!r} in the {where}: {r.steps['judge'].error!r}"


def test_a_deeply_nested_answer_fails_at_once(chat: FakeChatServer):
    @workflow
    def atk_llm_deep_answer() -> None:
        llm("judge", prompt="Rate it.", model="m", provider_url=chat.url, schema=VERDICT_SCHEMA,
            retries=2, retry_delay_seconds=0)

    deep = '{"choices": ' + "[" * 50_000 + "]" * 50_000 + "}"
    for _ in range(3):
        chat.respond(body=deep)
    r = atk_llm_deep_answer()
    step = r.steps["judge"]
    while chat._script:  # what a fixed executor did not ask for
        chat._script.popleft()
    assert step.status == "failed"
    assert step.tries == 1, f"retried: {step.tries} tries, {step.error!r}"
    assert "RecursionError" not in (step.error or ""), step.error


def test_a_pattern_built_to_backtrack_cannot_hold_the_step_past_its_timeout(
        chat: FakeChatServer):
    @workflow
    def atk_llm_redos() -> None:
        llm("judge", prompt="Name it.", model="m", provider_url=chat.url, timeout_seconds=0.5,
            schema={"type": "object", "required": ["name"],
                    "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}}})

    chat.respond(content=json.dumps({"name": "a" * 27 + "!"}))
    r = atk_llm_redos()  # the check (2**27 backtracking steps) would take minutes in process
    while chat._script:
        chat._script.popleft()
    assert r.steps["judge"].status == "failed"
    # The checking child is killed at the step's timeout: the step says so.
    assert (r.steps["judge"].error or "").startswith("timed out after"), r.steps["judge"].error
