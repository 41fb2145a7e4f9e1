"""What the CLI prints of a run's text is shown, never obeyed by the terminal: a step that
prints ``ESC ] 0 ; PWNED ESC \\ ESC [ 2 J`` (retitle, clear screen), C1's one-byte CSI, a
bidirectional override or rich markup (``[red]``) gets its text escaped in ``brain run``'s
lines, ``brain show``, ``brain runs`` and ``brain logs`` — readable, with no control
character left but the line feed and the tab. JSON output stays JSON, the same once read."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from support import write_source

from brain._clock import utcnow
from brain.cli import main, render
from brain.cli.terminal import shown
from brain.results import LogBatch, LogLine, RunStatus, StepStatus, TriggerData

FLOWS = """
    from brain import shell, trigger, workflow

    @workflow
    def hostile():
        shell("echoes", command="printf '%s\\\\n' {trigger.body}; "
                                "printf '%s\\\\n' {trigger.body} 1>&2; exit 3")
        shell("after", argv=["echo", "never"])
"""

#: Characters a terminal acts on (C0 but for LF and TAB, DEL, C1), the line and paragraph
#: separators, and the bidirectional embeddings, overrides and isolates.
FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

_CONTROLS = [chr(c) for c in (*range(1, 0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x0A]
_PIECES = ["\x1b]0;PWNED\x1b\\", "\x1b[2J", "\x1b]52;c;cHduZWQ=\x07", "\x9b2J", "\u202e",
           "\u2066", "\u2028", "[red]", "[/]", "[link=https://example.com]x[/link]", "\\",
           "\\\\", "\\[bold]", "[bold]\\", ":smile:"]

#: Hostile text: control characters, escape sequences, markup and plain words mixed.
hostile_text = st.lists(
    st.one_of(st.sampled_from(_CONTROLS), st.sampled_from(_PIECES),
              st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]),
                      max_size=6)),
    min_size=1, max_size=12).map("".join).filter(lambda t: FORBIDDEN.search(t) is not None)


def cli(*args: str) -> tuple[int, str]:
    """``brain ARGS`` in this process: its exit code, and stdout and stderr together."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code
    return int(code or 0), stdout.getvalue() + stderr.getvalue()


def assert_safe(text: str) -> None:
    """No character of ``text`` reaches a terminal as a control."""
    bad = FORBIDDEN.search(text)
    assert bad is None, f"{bad.group()!r} at {bad.start()} in {text!r}"


def codes_of(text: str) -> set[str]:
    """The codes :func:`shown` writes for the controls in ``text`` (``\\x1b``, ``\\u202e``)."""
    return {shown(c) for c in FORBIDDEN.findall(text)}


@pytest.fixture
def flows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return write_source(tmp_path, "flows.py", FLOWS)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=hostile_text.filter(lambda t: "\x00" not in t))  # a command's argument has no NUL
def test_a_real_runs_hostile_text_is_shown_not_obeyed(flows: Path, text: str) -> None:
    code, ran = cli("run", "flows.py", f"--body={text}")
    assert code == 1, ran
    assert_safe(ran)
    run_id = re.search(r"brain show ([0-9a-f]{12})", ran)
    assert run_id is not None, ran
    assert "echoes | " in ran and "echoes ! " in ran  # its lines, stdout and stderr

    code, detail = cli("show", run_id.group(1))
    assert code == 0, detail
    assert_safe(detail)
    stored = json.loads(cli("show", run_id.group(1), "--json")[1])
    # As stored (the step printed this text); a CR before an LF is part of a line's end.
    body = stored["trigger"]["body"].replace("\r\n", "\n")
    assert codes_of(body) <= {c for c in codes_of(body) if c in detail}
    for markup in ("[red]", "[/]", "[bold]"):
        assert (markup in body) <= (markup in detail)  # shown as written, not obeyed

    code, listed = cli("runs")
    assert code == 0 and run_id.group(1) in listed
    assert_safe(listed)

    code, logs = cli("logs", run_id.group(1))
    assert code == 0
    assert_safe(logs)
    assert codes_of(body) - {"\\x0d"} <= {c for c in codes_of(body) if c in logs}


async def _hostile_record(text: str) -> str:
    """A waiting run, written through the store, with ``text`` in every field a person
    or a server fills: workflow, trigger, a step's output, stderr and error, a waiting
    step's prompt, a decision's comment, an MCP server's progress message, its log."""
    from brain.store import Store

    run_id, now = uuid.uuid4().hex, utcnow()
    async with Store() as store:
        await store.create_run(run_id=run_id, workflow=f"wf{text}", definition_hash="h",
                               trigger=TriggerData(event=f"manual{text}", body=text,
                                                   path=f"/hook{text}"),
                               step_rows=[("made", "shell"), ("go", "approval"),
                                          ("wait", "approval"), ("tool", "mcp_tool")])
        await store.step_finished(run_id, "made", status=StepStatus.FAILED, tries=1,
                                  ended_at=now, output=text, error=text, stderr=text,
                                  started_at=now - timedelta(seconds=1))
        for name in ("go", "wait"):
            await store.step_waiting(run_id, name, inputs={}, tries=1, started_at=now,
                                     waiting_for={"kind": "approval", "prompt": text})
        await store.decide(run_id, "go", approved=False, comment=text, by="cli")
        await store.append_logs(run_id, [("tool", LogBatch(
            (LogLine(1, "stderr", 0.0, text),),
            progress={"progress": 1, "total": 2, "message": text}))])
        await store.finish_run(run_id, RunStatus.FAILED, text)
    return run_id


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=hostile_text)
def test_every_stored_field_is_shown_not_obeyed(tmp_path: Path, text: str) -> None:
    run_id = asyncio.run(_hostile_record(text))
    code, detail = cli("show", run_id)
    assert code == 0, detail
    assert_safe(detail)
    assert "\\x1b" in detail or "\x1b" not in text
    if not {"\n", "\t"} & set(text):  # one line, as written (brackets, backslashes and all)
        assert f"\nerror: {shown(text)}\n" in detail
    code, listed = cli("runs")
    assert code == 0 and run_id[:12] in listed
    assert_safe(listed)
    code, logs = cli("logs", run_id, "tool")
    assert code == 0
    assert_safe(logs)
    code, as_json = cli("show", run_id, "--json")
    assert code == 0
    assert_safe(as_json)
    assert json.loads(as_json) == asyncio.run(_as_json(run_id))  # the same JSON, once read


async def _as_json(run_id: str) -> object:
    from brain.store import Store

    async with Store() as store:
        return json.loads(json.dumps((await store.get_run(run_id)).to_json_dict()))


@settings(max_examples=30, deadline=None)
@given(text=hostile_text)
def test_a_servers_tool_listing_is_shown_not_obeyed(text: str) -> None:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        render.tools([{"name": f"tool{text}", "description": f"does{text}\nthings",
                       "inputSchema": {"type": "object", "properties": {text: {}}}}])
    assert_safe(printed.getvalue())
    assert printed.getvalue().startswith(tabs_to_cells(shown(f"tool{text}")) + "\n")


def tabs_to_cells(text: str, size: int = 8) -> str:
    """``text`` with its tabs expanded as a terminal (and rich) does: to the next stop by the
    cells printed so far, where ``str.expandtabs`` counts characters (a zero-width one too)."""
    out, column = [], 0
    for char in text:
        if char == "\t":
            pad = size - column % size
            out.append(" " * pad)
            column += pad
        elif char == "\n":
            out.append(char)
            column = 0
        else:
            out.append(char)
            column += cell_len(char)
    return "".join(out)


@settings(max_examples=60, deadline=None)
@given(text=hostile_text)
@example(text="\x01\u2de0\t")  # a zero-width character before a tab
def test_markup_in_text_is_printed_as_written(text: str) -> None:
    """Brackets and backslashes (rich markup) come out as they went in, beside the CLI's own
    markup on both sides."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        render.out.print(render.line("[bold]start[/] ", render.data(text, "red"), " [dim]end[/]"))
    assert printed.getvalue() == tabs_to_cells(f"start {shown(text)} end") + "\n"
