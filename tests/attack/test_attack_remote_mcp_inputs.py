"""Attack (SPEC §1, §3, §11, §17): steering where an MCP request goes, what credentials it
carries and what program runs — from trigger fields and step outputs — and bad input.

Promised: ``url``, header names and values and ``bearer`` are literal text or
``secret()`` (a placeholder there is a definition error); a placeholder never stands for
the program of ``server_command`` and never adds words to it; mistakes surface at trace
time as ``WorkflowDefinitionError``; bad input gets a clear error, and "failures that
would repeat identically ... fail at once".

Holds: every way tried of writing a node, a trigger field or ``{previous.X}`` into
``url``, ``headers``, ``bearer``, ``tool``, ``transport``, ``reuse`` (f-strings mixed
with literal text, a ``dict`` subclass, a ``str`` subclass whose ``__str__`` lies, nested
``args``) is refused or sent literally; the program word of ``server_command`` and the
arguments of the programs that run code (``python -c``, ``uvx``, ``env``, ``docker run``,
...) are refused; generated trigger bodies and step outputs stay one word each.

Found (``xfail(strict=True)`` below):

1. ``secret(trigger.body)`` raises pydantic's raw ``ValidationError``, not a
   ``WorkflowDefinitionError`` (``brain/dsl/helpers.py::secret``).
2. ``env={"PATH": trigger.body}`` (a substituted field, §3) lets a trigger choose the
   program ``server_command`` starts: the program word is looked up in the step's own
   ``PATH`` (``brain/executors/mcp_stdio.py::StdioServer.transport``,
   ``check_program``). The rule "a placeholder as the program is a definition error"
   is bypassed (``LD_PRELOAD``, ``PYTHONPATH``, ``NODE_OPTIONS`` likewise).
3. A malformed ``url`` (port out of range, an unclosed IPv6 bracket, a port that is not
   a number) is accepted at trace time; at run time it is either an ``internal error``
   (when the URL has user info: ``shown_endpoint`` raises ``ValueError`` inside
   ``brain/executors/mcp.py::_remote_place``) or an obscure, retried
   ``the MCP session failed: OverflowError ...`` (``brain/dsl/mcp.py::_remote`` checks
   only the scheme; the LLM executor's ``_check_url`` shows how it is done).
4. Bad header input passes the definition check and fails at run time, retried, with a
   misleading reason: a header name with a control character (``X-A\\x01``: ``cannot
   reach the MCP server ... Illegal header name``; ``_remote`` rejects separators but
   not CTLs), a non-ASCII header value or bearer (``UnicodeEncodeError``), a ``secret()``
   header value holding CR/LF (``cannot reach the MCP server``), a 200 KB header value
   (whatever the server's refusal becomes: ``ReadError``, "exited before answering").

Run: ``.venv/bin/pytest tests/attack/test_attack_remote_mcp_inputs.py``
"""

from __future__ import annotations

import json
import stat
import string
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mcp_servers.fixtures import PY, TOOLS_SERVER

sys.path.append(str(Path(__file__).resolve().parent))
from test_attack_remote_mcp_hostile import HostileMcp

from brain import (
    WorkflowDefinitionError,
    mcp_tool,
    secret,
    shell,
    step,
    trigger,
    workflow,
)

pytestmark = pytest.mark.usefixtures("collect_garbage_first")


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileMcp]:
    with HostileMcp() as server:
        yield server


def refused(body: Callable[[Any], None], name: str) -> str:
    """The definition error of a workflow whose step ``m`` is ``body(a)``, ``a`` a node."""

    def flow() -> None:
        a = shell("a", argv=["echo", "x"])
        body(a)

    with pytest.raises(WorkflowDefinitionError) as info:
        workflow(name=name)(flow)
    return str(info.value)


# --- holds: nothing untrusted reaches the request's target or credentials ------------------------

FIELDS = {"node": lambda a: a, "body": lambda a: trigger.body,
          "header": lambda a: trigger.headers["X-Target"], "path": lambda a: trigger.path,
          "previous": lambda a: a.previous}
PLACES = {
    "url": lambda v: {"url": v},
    "header value": lambda v: {"url": "http://127.0.0.1:1/mcp", "headers": {"X-Team": v}},
    "authorization": lambda v: {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": v}},
    "bearer": lambda v: {"url": "http://127.0.0.1:1/mcp", "bearer": v},
}
texts = st.text(alphabet=string.ascii_letters + string.digits + ":/.-_?=&@", max_size=20)


def test_no_node_or_trigger_field_can_stand_in_the_url_headers_or_bearer():
    """Generated shapes — a node or trigger field alone, or inside an f-string with any
    literal text around it — in each of ``url``, a header value, ``Authorization`` and
    ``bearer``: always a definition error naming the step."""
    seen: set[tuple[str, str, bool]] = set()

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.generate])
    @given(place=st.sampled_from(sorted(PLACES)), field=st.sampled_from(sorted(FIELDS)),
           wrap=st.booleans(), before=texts, after=texts)
    def check(place: str, field: str, wrap: bool, before: str, after: str) -> None:
        seen.add((place, field, wrap))

        def body(a: Any) -> None:
            value = FIELDS[field](a)
            if wrap:
                value = f"{before}{value}{after}"
            mcp_tool("m", tool="t", **PLACES[place](value))

        message = refused(body, "atk_mcp_target")
        assert "'m'" in message or "step 'a'" in message, message

    check()
    assert len(seen) >= 30  # most combinations were tried


def test_a_lying_str_or_dict_subclass_cannot_smuggle_a_placeholder(hostile: HostileMcp):
    """A header value whose ``__str__`` says ``{trigger.body}``, a ``secret()`` header whose
    value is ``{trigger.body}``, a dict whose ``items()`` yields a trigger field: refused,
    or sent as the literal text — never the trigger's body."""

    class Lying(str):
        def __str__(self) -> str:
            return "{trigger.body}"

        def __format__(self, spec: str) -> str:
            return "{trigger.body}"

    class LyingDict(dict):  # type: ignore[type-arg]
        def items(self) -> Any:
            return [("X-Target", trigger.body)]

    with pytest.raises(WorkflowDefinitionError):
        workflow(name="atk_mcp_lying_dict")(
            lambda: mcp_tool("m", url=hostile.url("tool"), tool="t",
                             headers=LyingDict({"X-Target": "fine"})))

    import os
    os.environ["ATK_BRACES"] = "{trigger.body}-literal"
    try:
        @workflow
        def atk_mcp_lying_str() -> None:
            mcp_tool("m", url=hostile.url("tool", "x-lying"), tool="t",
                     headers={"X-Lying": Lying("fine-value"), "X-Braces": secret("ATK_BRACES")})

        r = atk_mcp_lying_str(trigger={"body": "evil.example"})
    finally:
        del os.environ["ATK_BRACES"]
    assert r.status == "succeeded", r.error
    sent = [q["headers"] for q in hostile.seen() if q["path"].startswith("/tool/x-lying/")]
    assert sent and all("evil.example" not in json.dumps(h) for h in sent), sent
    assert {h.get("x-braces") for h in sent} == {"{trigger.body}-literal"}


@pytest.mark.parametrize("option", ["transport", "reuse", "tool", "timeout_seconds"])
def test_options_cannot_come_from_a_node_or_trigger_field(option: str):
    for field in ("node", "body"):
        def body(a: Any, field: str = field) -> None:
            mcp_tool("m", url="http://127.0.0.1:1/mcp",
                     **{"tool": "t", option: FIELDS[field](a)})

        refused(body, f"atk_mcp_option_{option}")


@pytest.mark.parametrize("command", [
    "{trigger.body} server.py", "python{trigger.body}", "./{trigger.body}/server",
    ["{trigger.body}"], "python -c {trigger.body}", "python3 -m {trigger.body}",
    "node -e {trigger.body}", "sh -c {trigger.body}", "bash -c {trigger.body}",
    "env {trigger.body}", "/usr/bin/env X=1 {trigger.body}", "uvx {trigger.body}",
    "npx -y {trigger.body}", "uv run {trigger.body}", "pipx run {trigger.body}",
    "docker run --rm -i {trigger.body}", "deno run -A {trigger.body}", "bunx {trigger.body}",
    "timeout 30 {trigger.body}", "nice -n 5 {trigger.body}", "sudo {trigger.body}",
    "xargs {trigger.body}",
])
def test_a_placeholder_never_chooses_the_program_a_server_command_runs(command: Any):
    message = refused(lambda a: mcp_tool("m", server_command=command, tool="t"),
                      "atk_mcp_program")
    assert "server_command" in message or "program" in message, message


@step
def hostile_output(text: str) -> str:
    return text


def test_trigger_fields_and_step_outputs_stay_one_word_of_a_server_command():
    """Generated bodies, header values and step outputs with blanks, quotes, ``$(...)``,
    ``;``, newlines and leading dashes: each placeholder is exactly one word of the
    server's argv, however it is embedded."""

    @workflow
    def atk_mcp_words() -> None:
        out = hostile_output(trigger.headers["X-Words"])
        mcp_tool("argv", server_command=[PY, TOOLS_SERVER, "--", f"{trigger.body}",
                                         f"x={out}", f"{trigger.headers['X-Words']}y"],
                 tool="show_argv")
        mcp_tool("split", server_command=f"{PY} {TOOLS_SERVER} {{trigger.body}} "
                                         f"'a {{trigger.body}} b'", tool="show_argv")

    nasty = st.text(alphabet=" \t\n'\"$();|&<>*?-=\\`~#{}abcXYZ019", min_size=1, max_size=24)

    @settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])
    @given(body=nasty, words=nasty)
    def check(body: str, words: str) -> None:
        words = words.replace("\n", " ")  # a header value is one line
        r = atk_mcp_words(trigger={"event": "webhook", "body": body,
                                   "headers": {"X-Words": words}})
        assert r.status == "succeeded", r.error
        assert json.loads(r.steps["argv"].output)[1:] == ["--", body, f"x={words}",
                                                          f"{words}y"]
        assert json.loads(r.steps["split"].output)[1:] == [body, f"a {body} b"]

    check()


def test_a_nul_in_a_server_command_word_fails_once_saying_so():
    @workflow
    def atk_mcp_nul() -> None:
        mcp_tool("m", server_command=[PY, TOOLS_SERVER, f"{trigger.body}"], tool="show_argv",
                 retries=2, retry_delay_seconds=0)

    r = atk_mcp_nul(trigger={"body": "a\x00b"})
    assert r.steps["m"].status == "failed" and r.steps["m"].tries == 1
    assert "NUL" in (r.steps["m"].error or "")


# --- found ---------------------------------------------------------------------------------------


def test_a_secret_named_by_a_trigger_field_is_a_definition_error():
    with pytest.raises(WorkflowDefinitionError):
        workflow(name="atk_mcp_secret_from_trigger")(
            lambda: mcp_tool("m", url="http://127.0.0.1:1/mcp", tool="t",
                             bearer=secret(trigger.body)))  # type: ignore[arg-type]


def test_a_trigger_field_cannot_choose_the_server_program_through_path(tmp_path: Path):
    evil = tmp_path / "evil-bin"
    evil.mkdir()
    marker = tmp_path / "chosen-by-the-trigger"
    program = evil / "atk-mcp-server"
    program.write_text(f"#!/bin/sh\necho chosen > {marker}\nexit 3\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    try:
        @workflow
        def atk_mcp_path_from_trigger() -> None:
            mcp_tool("m", server_command="atk-mcp-server --stdio", tool="t",
                     env={"PATH": trigger.body})
    except WorkflowDefinitionError:
        return  # refused at trace time, like a placeholder in the program word
    r = atk_mcp_path_from_trigger(trigger={"body": str(evil)})
    assert not marker.exists(), (f"the trigger's PATH chose the program: {marker} was "
                                 f"written; the step says {r.steps['m'].error!r}")


def _fails_once_and_clearly(make: Callable[[], Any], name: str) -> None:
    """Either a definition error, or a step that fails on its first try (no retry) with a
    message that is neither an internal error nor a wrong diagnosis."""
    try:
        wf = workflow(name=name)(make)
    except WorkflowDefinitionError:
        return
    r = wf()
    step_ = r.steps["m"]
    assert step_.status == "failed"
    error = step_.error or ""
    assert not error.startswith("internal error"), error
    assert "cannot reach" not in error and "session failed" not in error, error
    assert step_.tries == 1, f"retried {step_.tries - 1} times: {error!r}"


@pytest.mark.parametrize("url", ["http://robot:pass-0123456789@127.0.0.1:99999/mcp",
                                 "http://[::1/mcp", "http://127.0.0.1:99999/mcp",
                                 "http://127.0.0.1:abc/mcp"],
                         ids=["port-with-user-info", "open-bracket", "port-out-of-range",
                              "port-not-a-number"])
def test_a_malformed_url_fails_once_with_a_clear_error(url: str):
    _fails_once_and_clearly(
        lambda: mcp_tool("m", url=url, tool="t", retries=2, retry_delay_seconds=0,
                         timeout_seconds=10),
        "atk_mcp_bad_url")


@pytest.mark.parametrize("case", ["control char in name", "non-ascii value", "non-ascii bearer",
                                  "crlf in secret value", "huge value"])
def test_bad_header_input_fails_once_with_a_clear_error(hostile: HostileMcp, case: str,
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ATK_CRLF", "value-0123456789\r\nX-Injected: 1")
    monkeypatch.setenv("ATK_UNICODE", "pässwörd-0123456789")
    options: dict[str, Any] = {
        "control char in name": {"headers": {"X-A\x01": "v"}},
        "non-ascii value": {"headers": {"X-Team": "équipe"}},
        "non-ascii bearer": {"bearer": secret("ATK_UNICODE")},
        "crlf in secret value": {"headers": {"X-Api-Key": secret("ATK_CRLF")}},
        "huge value": {"headers": {"X-Team": "t" * 200_000}},
    }[case]
    _fails_once_and_clearly(
        lambda: mcp_tool("m", url=hostile.url("tool"), tool="t", retries=2,
                         retry_delay_seconds=0, timeout_seconds=10, **options),
        "atk_mcp_bad_header")
    assert not any("x-injected" in q["headers"] for q in hostile.seen())
