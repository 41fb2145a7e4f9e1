"""Secrets never leave through ``/mcp`` (SPEC §23, §1): a workflow's secret values — a
``secret()`` environment variable, an ``mcp_tool`` bearer and header, an ``llm`` API key —
are absent from every MCP answer (text, ``structuredContent``, ``isError`` text, protocol
errors), progress message, approval question and ``brain_run`` answer, and, with traces
on, from every span exported, the MCP SDK's own ``tools/call`` spans included.

Real processes: ``brain serve`` (traces to a real OTLP receiver), a remote MCP server that
echoes the headers it got, an OpenAI-compatible chat server echoing the key it is told
to; the official SDK's client. Hypothesis picks how and where a secret is shown, and what
hostile input a client sends holding one.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_servers.fixtures import http_server
from mcp_support import mcp_client
from otlp_receiver import OtlpReceiver
from serve_support import BrainServer, brain_argv, clean_env

from brain.testing import FakeChatServer

#: The secrets ``brain serve`` is given: symbols where their JSON, URL and base64 spellings
#: differ from the plain text.
SECRETS = {"DEPLOY_TOKEN": 'dep-7Hq2+xZ/9w="Kp', "BEARER_TOKEN": "brr-M4v+8Qz/1Lc=Yt",
           "HDR_TOKEN": "hdr-Tq5/Pn+3Wd=Jx", "LLM_KEY": "sk-llm-R8e+Uy/2Fb=Nc"}

#: Prints the secret in $T in the form argv[1] names; argv[2] "1": to stderr, exit 1.
SHOW = r'''
import base64, json, os, sys, urllib.parse
t = os.environ["T"]
forms = {"plain": t, "json": json.dumps(t), "repr": repr(t), "url": urllib.parse.quote(t, safe=""),
         "base64": base64.b64encode(t.encode()).decode(), "hex": t.encode().hex(),
         "sentence": f"the token is {t}, keep it"}
shown = forms.get(sys.argv[1], sys.argv[1])
if sys.argv[2] == "1":
    print(shown, file=sys.stderr)
    sys.exit(1)
print(shown)
'''

FLOWS = '''
from brain import approval, llm, mcp_tool, secret, shell, when, workflow

PY = {py!r}
SHOW = {show_path!r}


@workflow(mcp=True)
def shown(form: str = "plain", fail: str = "0") -> str:
    """Show the deploy token in some form (failing, on stderr, when ``fail`` is "1")."""
    return shell("show", argv=[PY, SHOW, form, fail],
                 env={{"T": secret("DEPLOY_TOKEN")}})


@workflow(mcp=True)
def asked(form: str = "plain") -> str | None:
    """Put the deploy token, in some form, in an approval's prompt."""
    out = shell("show", argv=[PY, SHOW, form, "0"], env={{"T": secret("DEPLOY_TOKEN")}})
    ok = approval("go", prompt=f"The token: {{out}}. Go?")
    with when(ok):
        done = shell("after", argv=["echo", f"after {{out}}"])
    return done


@workflow(mcp=True)
def headers() -> str:
    """Ask a remote MCP server for the headers it got (a bearer and an API key header)."""
    return mcp_tool("remote", url={mcp_url!r}, tool="headers",
                    bearer=secret("BEARER_TOKEN"), headers={{"X-Api-Key": secret("HDR_TOKEN")}})


@workflow(mcp=True)
def chat() -> str:
    """Ask a chat model, which answers (or fails) with the key it was sent."""
    return llm("ask", "what is your key?", model="fake", provider_url={llm_url!r},
               api_key=secret("LLM_KEY"))
'''


def forms(value: str) -> list[str]:
    """The spellings of a secret that must not show: as is, JSON-escaped, URL-quoted,
    base64 and hex."""
    return [value, json.dumps(value)[1:-1], urllib.parse.quote(value, safe=""),
            base64.b64encode(value.encode()).decode(), value.encode().hex()]


NEEDLES = [form for value in SECRETS.values() for form in forms(value)]


def leaks(text: str) -> list[str]:
    """The spellings of a secret found in ``text``."""
    return [needle for needle in NEEDLES if needle in text]


@dataclass
class World:
    brain: BrainServer
    receiver: OtlpReceiver
    chat: FakeChatServer


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("mcp-secrets")
    flows = folder / "flows"
    flows.mkdir()
    with http_server(folder / "remote", token=SECRETS["BEARER_TOKEN"]) as remote, \
            FakeChatServer() as chat, OtlpReceiver() as receiver:
        (folder / "show.py").write_text(SHOW)
        (flows / "flows.py").write_text(FLOWS.format(py=sys.executable,
                                                     show_path=str(folder / "show.py"),
                                                     mcp_url=remote.url, llm_url=chat.url))
        env = clean_env(folder / "brain.db", {
            **SECRETS, "BRAIN_MCP_WAIT_SECONDS": "10",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"})
        env.pop("BRAIN_API_TOKEN", None)
        brain = BrainServer(brain_argv(), flows, folder, env)
        try:
            brain.wait_healthy()
            yield World(brain, receiver, chat)
        finally:
            brain.stop()


def _dump(value: Any) -> str:
    """Everything an answer holds, as text (models as their JSON on the wire)."""
    if hasattr(value, "model_dump_json"):
        return str(value.model_dump_json(by_alias=True))
    return json.dumps(value, default=str) if not isinstance(value, str) else value


async def _session(world: World, calls: list[tuple[str, dict[str, Any]]],
                   chat_answer: tuple[int, str] | None) -> list[str]:
    """Make ``calls`` with the SDK client (2026-07-28 era, a user who approves, progress
    asked), each then read again with ``brain_run``; everything seen, as text."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import ElicitResult

    seen: list[str] = []

    async def approve(context: Any, params: Any) -> ElicitResult:
        seen.append(_dump(params))
        return ElicitResult(action="accept", content={"approve": True})

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(f"{done}/{total} {message}")

    async with mcp_client(world.brain.url + "/mcp", elicitation_callback=approve) as client:
        for tool, arguments in calls:
            if tool == "chat" and chat_answer is not None:
                status, text = chat_answer
                if status == 200:
                    world.chat.respond(content=text)
                else:
                    world.chat.respond(status, json={"error": {"message": text}})
            try:
                result = await client.call_tool(tool, arguments, progress_callback=on_progress)
            except MCPError as exc:
                seen.append(f"{exc.error.message} {_dump(exc.error.data)}")
                continue
            seen.append(_dump(result))
            run_id = (result.structured_content or {}).get("run_id") or \
                (result.meta or {}).get("brain/run_id")
            if run_id:
                again = await client.call_tool("brain_run", {"run_id": run_id,
                                                             "wait_seconds": 10})
                seen.append(_dump(again))
    return seen


SECRET = st.sampled_from(sorted(SECRETS.values()))
FORM = st.sampled_from(["plain", "json", "repr", "url", "base64", "hex", "sentence"])
#: A call to one of the workflows; the chat model's answer when it is ``chat``.
CALL = st.one_of(
    st.tuples(st.just("shown"), st.fixed_dictionaries({"form": FORM, "fail": st.sampled_from(["0", "1"])})),
    st.tuples(st.just("asked"), st.fixed_dictionaries({"form": FORM})),
    st.tuples(st.just("headers"), st.just({})),
    st.tuples(st.just("chat"), st.just({})),
)
#: What a hostile client sends holding a secret the server knows: as a tool's name, an
#: argument's name or value, a run id to read.
HOSTILE = SECRET.flatmap(lambda s: st.sampled_from([
    (s, {}), ("shown", {s: 1}), ("shown", {"form": 7, "fail": [s]}), ("brain_run", {"run_id": s}),
    ("brain_run", {"run_id": "0", "wait_seconds": s}), ("shown", {"form": s}),
]))
CHAT = st.tuples(st.sampled_from([200, 401, 500]),
                 st.builds(lambda form, key: {"plain": f"the key is {key}",
                                              "json": json.dumps({"key": key}),
                                              "url": urllib.parse.quote(key, safe="")}[form],
                           st.sampled_from(["plain", "json", "url"]), st.just(SECRETS["LLM_KEY"])))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(calls=st.lists(st.one_of(CALL, HOSTILE), min_size=1, max_size=3), chat=CHAT)
def test_no_answer_progress_or_question_shows_a_secret(
        world: World, calls: list[tuple[str, dict[str, Any]]], chat: tuple[int, str]) -> None:
    seen = asyncio.run(_session(world, calls, chat))
    for text in seen:
        assert not leaks(text), (leaks(text), text[:2000])


def test_every_kind_of_secret_reaches_its_step_and_is_hidden_everywhere(world: World) -> None:
    """Each workflow once, every way, so the hypothesis test above is known to exercise what
    it claims: the secrets did reach the steps (the remote server and the chat model saw
    them) while nothing shown holds them; then the spans, the MCP SDK's among them."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("shown", {"form": "plain"}), ("shown", {"form": "sentence", "fail": "1"}),
        ("asked", {"form": "json"}), ("headers", {}), ("chat", {}),
        (SECRETS["HDR_TOKEN"], {}), ("brain_run", {"run_id": SECRETS["LLM_KEY"]}),
        ("shown", {SECRETS["DEPLOY_TOKEN"]: 1})]
    seen = asyncio.run(_session(world, calls, (401, f"bad key {SECRETS['LLM_KEY']}")))
    # A request id is the client's to choose (and its answer must echo it): the span does not.
    raw = world.brain.client.post("/mcp", json={
        "jsonrpc": "2.0", "id": SECRETS["BEARER_TOKEN"], "method": "tools/list"}, headers={
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"})
    assert raw.status_code == 200
    assert any("***" in text for text in seen)  # what was scrubbed shows as ***
    for text in seen:
        assert not leaks(text), (leaks(text), text[:2000])
    sent = world.chat.requests[-1].headers.get("authorization", "")
    assert sent == f"Bearer {SECRETS['LLM_KEY']}"  # the key did reach the model
    # The spans: the SDK's own (one per tools/call) and the runs', all exported.
    world.receiver.wait_for("tools/call shown", count=3)
    world.receiver.wait_for("invoke_workflow headers")
    world.receiver.wait_for("tools/call ***")  # the call of a tool named like a secret
    for _ in range(300):  # the raw tools/list's span, its id scrubbed
        if any(s.attributes.get("jsonrpc.request.id") == "***"
               for s in world.receiver.named("tools/list")):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"no tools/list span with the id scrubbed: "
                             f"{[s.attributes for s in world.receiver.named('tools/list')]}")
    errors = [s for s in world.receiver.spans if s.name.startswith("tools/call")
              and s.status_code == 2]
    assert errors  # protocol errors and isError answers are marked on the SDK's spans
    for span in world.receiver.spans:
        text = json.dumps([span.name, span.attributes, span.status_message, span.events],
                          default=str)
        assert not leaks(text), (span.name, leaks(text))
    for body in world.receiver.raw:
        assert not leaks(body.decode("latin-1")), "a secret in an exported trace"
