"""Attack (SPEC §1, §11, §17): a hostile MCP server echoes the credentials it is sent.

``mcp_tool(url=..., bearer=..., headers=...)`` sends secrets to a server the workflow
does not control. Whatever it answers — tool output, structured content, an ``isError``
text, a JSON-RPC error, progress messages, a malformed answer — is stored with the run.
Promised: secrets never appear in stored inputs, outputs, errors, logs or API answers,
and "scrubbing covers each value's common encodings too: base64 (every alignment), hex,
URL-quoted, JSON-escaped"; a secret too short to scrub fails the step that reads it; the
user/password parts of URLs are redacted wherever a URL is shown.

Holds (hypothesis-generated tokens and header values): echoes as written, JSON-escaped
Python's way, URL-quoted Python's way, base64 at any alignment and hex, in every place a
server can put them; the password of a URL given literally, echoed as the server got it.

Found (each an ``xfail(strict=True)`` test below):

1. JSON-escaped as .NET writes it (``+`` → ``\\u002B``) and URL-encoded as Java's
   ``URLEncoder`` / JavaScript's ``URLSearchParams`` write it (``~`` → ``%7E``) are not
   scrubbed: ``brain/_secrets.py::remember`` knows only Python's spellings of each escape.
2. A malformed answer (``content`` not a list, a body that is no JSON-RPC message) fails
   the step with pydantic's message, which quotes the answer cut in the middle
   (``input_value='... Bearer sk-liv...9j0K1l2M3n4O5p6Q7r8S9t0'``): a secret cut in two
   is not recognised, and up to half of it is stored (``brain/runner/attempt.py::
   attempt_once`` stores ``str(exc)``; ``brain/executors/mcp_session.py::LiveSession.call``
   / ``_failure`` pass the SDK's text on).
3. A password under 8 characters in an MCP ``url`` is used without complaint and never
   scrubbed: the server's echo of ``Authorization: Basic ...`` is stored whole
   (``brain/executors/mcp.py::_remember_password``; the LLM executor refuses such a URL).
4. ``url=secret("VAR")`` holding ``user:password@``: errors show the URL with only its
   user info hidden, so the rest of the secret — host, path, an ``?api_key=`` — is stored
   (``brain/executors/mcp_remote.py::RemoteServer.shown`` alters the secret before the
   scrubber can recognise it).
5. A literal sensitive header value (``headers={"X-Api-Key": "..."}``) and a literal URL
   password are learnt as secrets only when their step starts: an earlier step's output
   that holds them is stored as is, while a literal ``api_key=`` is scrubbed from it
   (``brain/dsl/model.py::WorkflowSpec.declared_secrets`` collects ``SecretStr`` only).

Run: ``.venv/bin/pytest tests/attack/test_attack_remote_mcp_secrets.py``
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import re
import string
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

sys.path.append(str(Path(__file__).resolve().parent))
from test_attack_remote_mcp_hostile import (
    HostileMcp,
    dotnet_json,
    form_encode,
    safe_forms,
)

from brain import RunResult, llm, mcp_tool, parallel, secret, step, workflow

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileMcp]:
    with HostileMcp() as server:
        yield server


# --- what is stored, and what counts as a trace of a secret -------------------------------------


def stored_texts(db_url: str, run: RunResult) -> list[str]:
    """Everything stored for a run that a reader can see: its JSON (inputs, outputs, errors,
    progress) and every step's log lines."""
    from brain.store import Store

    async def logs() -> list[str]:
        async with Store(db_url) as store:
            return [line.text for name in run.steps
                    for line in await store.read_log(run.run_id, name)]

    return [json.dumps(run.to_json_dict(), ensure_ascii=False), run.error or "",
            *asyncio.run(logs())]


def step_json(run: RunResult, name: str) -> dict[str, Any]:
    """One step of the run's JSON (as ``brain show --json`` and the API give it)."""
    return next(s for s in run.to_json_dict()["steps"] if s["name"] == name)


def db_bytes(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(tmp_path.glob("brain.db*")))


_B64_RUN = re.compile(r"[A-Za-z0-9+/_-]{8,}={0,2}")


def traces(value: str, text: str) -> list[str]:
    """The forms of ``value`` found in ``text``: the value itself, its JSON, URL, base64
    and hex spellings, or a base64 stretch that decodes to something holding it."""
    found = [form for form in {value, json.dumps(value)[1:-1], *safe_forms(value)[:11]}
             if form in text]
    for run in _B64_RUN.findall(text):
        for shift in range(4):
            chunk = run[shift:]
            chunk += "=" * (-len(chunk) % 4)
            for decode in (base64.b64decode, base64.urlsafe_b64decode):
                try:
                    if value.encode() in decode(chunk):
                        found.append(f"base64 {run}")
                except (binascii.Error, ValueError):
                    pass
    return found


def leaks(values: dict[str, str], texts: list[str], stored: bytes) -> dict[str, list[str]]:
    problems: dict[str, list[str]] = {}
    for label, value in values.items():
        seen = [t for text in texts for t in traces(value, text)]
        if value.encode() in stored:
            seen.append("raw bytes in the database")
        if seen:
            problems[label] = seen
    return problems


@pytest.fixture
def env_vars() -> Iterator[dict[str, str]]:
    """Variables a test sets for one example after another (removed at the end)."""
    names: dict[str, str] = {}
    yield names
    for name in names:
        os.environ.pop(name, None)


def set_env(env: dict[str, str], **values: str) -> None:
    env.update(values)
    os.environ.update(values)


# RFC 6750's b64token (what bearer tokens are made of), with a salt that no run stores for
# reasons of its own; a header value of any visible ASCII.
B64TOKEN = string.ascii_letters + string.digits + "-._~+/"
salts = st.uuids().map(lambda u: u.hex[:10])
tokens = st.builds(lambda body, salt, pad: body + salt + "=" * pad,
                   st.text(alphabet=B64TOKEN, min_size=4, max_size=40), salts, st.integers(0, 2))
header_values = st.builds(
    lambda body, salt: body + salt,
    st.text(alphabet=string.ascii_letters + string.digits + string.punctuation, min_size=4,
            max_size=40), salts)


# --- holds: the spellings the scrubber knows, in every place a server can put them --------------


def test_echoed_credentials_in_the_promised_encodings_are_never_stored(
        hostile: HostileMcp, tmp_path: Path, db_url: str, env_vars: dict[str, str]):
    """A server echoes the bearer token, a ``secret()`` header and a literal ``Cookie``
    header in every promised encoding: in its tool output, structured content, progress
    messages, an ``isError`` text and a JSON-RPC error. Nothing of them is stored."""

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(token=tokens, key=header_values, cookie=header_values)
    def check(token: str, key: str, cookie: str) -> None:
        set_env(env_vars, ATK_BEARER=token, ATK_KEY=key)
        creds: dict[str, Any] = {"bearer": secret("ATK_BEARER"),
                                 "headers": {"X-Api-Key": secret("ATK_KEY"), "Cookie": cookie}}

        @workflow(name="atk_mcp_echo_ok")
        def ok() -> None:
            with parallel():
                mcp_tool("out", url=hostile.url("tool", "bearer", "safe"), tool="t", **creds)
                mcp_tool("structured", url=hostile.url("structured", "x-api-key", "safe"),
                         tool="t", **creds)
                mcp_tool("progress", url=hostile.url("progress", "cookie", "safe"), tool="t",
                         **creds)

        runs = [ok()]
        assert runs[0].status == "succeeded", runs[0].error
        for mode, echo in (("iserror", "bearer"), ("error", "x-api-key"), ("iserror", "cookie"),
                           ("http500", "bearer")):
            url = hostile.url(mode, echo, "safe")  # (a default argument would be a parameter)

            @workflow(name=f"atk_mcp_echo_{mode}_{echo.replace('-', '_')}")
            def failing() -> None:
                mcp_tool("call", url=url, tool="t", **creds)  # noqa: B023 (traced right here)

            runs.append(failing())
            assert runs[-1].status == "failed"
        texts = [text for r in runs for text in stored_texts(db_url, r)]
        assert leaks({"bearer": token, "x-api-key": key, "cookie": cookie}, texts,
                     db_bytes(tmp_path)) == {}
        # The server did get them (what was scrubbed was really there).
        progress = step_json(runs[0], "progress").get("progress") or {}
        assert "***" in (progress.get("message") or ""), progress
        assert runs[0].steps["out"].output.startswith("seen ***")

    check()


def test_a_long_url_password_echoed_as_basic_auth_cannot_be_read_back(
        hostile: HostileMcp, tmp_path: Path, db_url: str):
    """A literal ``user:password@`` URL: the server receives ``Authorization: Basic
    base64(user:password)`` and echoes it, and the password alone. What is stored shows
    neither the password nor a base64 stretch that decodes to it."""
    password = "url-pass-3b9f6d2e"

    @workflow
    def atk_mcp_basic_echo() -> None:
        with parallel():
            mcp_tool("header", tool="t", url=hostile.url("tool", "authorization", "raw")
                     .replace("http://", f"http://robot:{password}@"))
            mcp_tool("password", tool="t", url=hostile.url("tool", "basic-password", "safe")
                     .replace("http://", f"http://robot:{password}@"))

    r = atk_mcp_basic_echo()
    assert r.status == "succeeded", r.error
    assert r.steps["header"].output.startswith("seen Basic ")
    assert r.steps["header"].inputs["url"].startswith("http://***@")
    assert leaks({"password": password}, stored_texts(db_url, r), db_bytes(tmp_path)) == {}


def test_a_url_secret_without_user_info_is_never_shown(tmp_path: Path, db_url: str,
                                                      monkeypatch: pytest.MonkeyPatch):
    from support import free_port

    url = f"http://127.0.0.1:{free_port()}/mcp/tenant-0f3e9a7c"
    monkeypatch.setenv("ATK_MCP_URL", url)

    @workflow
    def atk_mcp_url_secret_plain() -> None:
        mcp_tool("call", url=secret("ATK_MCP_URL"), tool="t", timeout_seconds=10)

    r = atk_mcp_url_secret_plain()
    assert r.status == "failed"
    assert r.steps["call"].inputs["url"] == "***"
    assert "cannot reach the MCP server at ***" in (r.steps["call"].error or "")
    assert leaks({"url": url, "tenant": "tenant-0f3e9a7c"}, stored_texts(db_url, r),
                 db_bytes(tmp_path)) == {}


# --- found ---------------------------------------------------------------------------------------

#: A bearer token as real ones look (RFC 6750 b64token): a ``+``, a ``/``, a ``~``.
TOKEN = "Zm9v+YmFy/~c2VjcmV0-7d4e1b9a"


@pytest.mark.parametrize("how, spelled", [("dotnet", dotnet_json), ("form", form_encode)])
def test_a_token_echoed_in_another_common_json_or_url_spelling_is_scrubbed(
        hostile: HostileMcp, how: str, spelled: Any, tmp_path: Path, db_url: str,
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ATK_TOKEN", TOKEN)

    @workflow(name=f"atk_mcp_spelled_{how}")
    def spelled_echo() -> None:
        with parallel():
            mcp_tool("out", url=hostile.url("tool", "bearer", how), tool="t",
                     bearer=secret("ATK_TOKEN"))
            mcp_tool("progress", url=hostile.url("progress", "bearer", how), tool="t",
                     bearer=secret("ATK_TOKEN"))

    r = spelled_echo()
    assert r.status == "succeeded", r.error
    shown = spelled(TOKEN)
    assert shown != TOKEN
    texts = stored_texts(db_url, r)
    assert not [t for t in texts if shown in t], (
        f"the token {TOKEN!r}, as {how} spells it ({shown!r}), is stored: "
        f"{r.steps['out'].output!r}, progress {step_json(r, 'progress').get('progress')}")


LONG_TOKEN = "sk-live-A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0"


def windows(value: str, size: int = 12) -> set[str]:
    return {value[i:i + size] for i in range(len(value) - size + 1)}


@pytest.mark.parametrize("mode", ["malformed", "notrpc"])
def test_a_malformed_answer_quoting_the_token_leaves_no_part_of_it(
        hostile: HostileMcp, mode: str, db_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ATK_TOKEN", LONG_TOKEN)

    @workflow(name=f"atk_mcp_malformed_{mode}")
    def malformed() -> None:
        mcp_tool("call", url=hostile.url(mode, "authorization", "raw"), tool="t",
                 bearer=secret("ATK_TOKEN"))

    r = malformed()
    error = r.steps["call"].error or ""
    assert r.status == "failed"
    assert LONG_TOKEN not in error  # the whole token is scrubbed when it is quoted whole
    parts = sorted(w for w in windows(LONG_TOKEN)
                   if any(w in text for text in stored_texts(db_url, r)))
    assert not parts, f"12-character pieces of the token are stored: {parts[:3]}...; {error!r}"


def test_a_short_url_password_fails_the_step_or_is_never_stored(hostile: HostileMcp,
                                                                 db_url: str):
    @workflow
    def atk_mcp_short_password() -> None:
        mcp_tool("call", tool="t", url=hostile.url("tool", "authorization", "raw")
                 .replace("http://", "http://robot:pw123@"))

    r = atk_mcp_short_password()
    step_ = r.steps["call"]
    if step_.status == "failed":  # refused, as the LLM executor refuses such a URL
        assert "shorter than 8" in (step_.error or ""), step_.error
        return
    echoed = (step_.output or "").removeprefix("seen Basic ")
    assert base64.b64decode(echoed) != b"robot:pw123", (
        f"the step succeeded and stored {step_.output!r}: base64 of 'robot:pw123'")


@pytest.mark.parametrize("mode", ["http401", "http500", "unreachable"])
def test_a_url_secret_with_user_info_is_never_shown(hostile: HostileMcp, mode: str,
                                                    tmp_path: Path, db_url: str,
                                                    monkeypatch: pytest.MonkeyPatch):
    from support import free_port

    target = (f"http://127.0.0.1:{free_port()}/mcp" if mode == "unreachable"
              else hostile.url(mode))
    url = target.replace("http://", "http://robot:url-pass-77c1d0e2@") + "?api_key=qk-5a8e2c71f0"
    monkeypatch.setenv("ATK_MCP_URL", url)

    @workflow(name=f"atk_mcp_url_secret_{mode}")
    def url_secret() -> None:
        mcp_tool("call", url=secret("ATK_MCP_URL"), tool="t", timeout_seconds=10)

    r = url_secret()
    assert r.status == "failed"
    assert r.steps["call"].inputs["url"] == "***"
    found = leaks({"query key": "qk-5a8e2c71f0", "path": target.split("//", 1)[1]},
                  stored_texts(db_url, r), db_bytes(tmp_path))
    assert found == {}, f"{found}: {r.steps['call'].error!r}"


LITERAL_KEY = "literal-header-key-7f3a9c41"
LITERAL_PASSWORD = "literal-url-pass-5e8d2b90"
LITERAL_API_KEY = "literal-api-key-1c4b6e33"


@step
def settings_dump() -> str:
    """A step that shows its configuration (as a misconfigured one might)."""
    return f"key={LITERAL_KEY} password={LITERAL_PASSWORD} api_key={LITERAL_API_KEY}"


def test_literal_mcp_credentials_are_scrubbed_from_an_earlier_step_like_a_literal_api_key(
        hostile: HostileMcp, tmp_path: Path, db_url: str):
    url = hostile.url("tool").replace("http://", f"http://robot:{LITERAL_PASSWORD}@")

    @workflow
    def atk_mcp_literal_first() -> None:
        settings_dump()
        mcp_tool("call", url=url, tool="t", headers={"X-Api-Key": LITERAL_KEY})
        llm("ask", prompt="hi", model="m", provider_url="http://127.0.0.1:9/v1",
            api_key=LITERAL_API_KEY, timeout_seconds=5)

    r = atk_mcp_literal_first()
    assert r.steps["settings_dump"].status == "succeeded"
    assert r.steps["call"].status == "succeeded", r.steps["call"].error
    found = leaks({"api_key": LITERAL_API_KEY}, stored_texts(db_url, r), db_bytes(tmp_path))
    assert found == {}, f"a literal api_key is known from the start: {found}"  # holds
    found = leaks({"X-Api-Key": LITERAL_KEY, "url password": LITERAL_PASSWORD},
                  stored_texts(db_url, r), db_bytes(tmp_path))
    assert found == {}, f"{found}: {r.steps['settings_dump'].output!r}"
