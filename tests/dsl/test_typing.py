"""Step outputs type-check as text in users' code, while misuse still fails at trace time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from brain import WorkflowDefinitionError, shell, step, trigger, workflow

REPO = Path(__file__).resolve().parents[2]

USER_CODE = '''
from brain import StepNode, llm, shell, step, trigger, workflow


@step
def headline(text: str) -> str:
    return text.splitlines()[0]


@step
def count(n: int) -> int:
    return n + 1


@workflow
def news() -> None:
    fast = shell("fetch", argv=["echo", "hello"])
    title = headline(fast)
    prior: StepNode = fast.previous
    llm("summarise", prompt=f"{title} {prior} {trigger.body}")
    headline(trigger.body)
    CALL_WITH_A_NODE_WHERE_AN_INT_IS_EXPECTED
'''


def _mypy(tmp_path: Path, extra: str) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "flows.py"
    source.write_text(USER_CODE.replace("CALL_WITH_A_NODE_WHERE_AN_INT_IS_EXPECTED", extra))
    env = dict(os.environ, MYPYPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), str(source)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


@pytest.mark.timeout(600)
def test_a_step_output_passes_where_text_is_expected_and_nowhere_else(tmp_path: Path) -> None:
    good = _mypy(tmp_path, "pass")
    assert good.returncode == 0, good.stdout + good.stderr
    # The control: the same file with a node given to an `int` parameter is refused, so
    # the check above is a real type check, not one that passes everything.
    bad = _mypy(tmp_path, "count(fast)")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert 'incompatible type "StepNode"; expected "int"' in bad.stdout


def test_using_a_node_as_text_still_fails_at_trace_time() -> None:
    def misuse() -> None:
        fast = shell("fetch", argv=["echo", "hello"])
        shell("shout", argv=["echo", fast.upper()])

    with pytest.raises(WorkflowDefinitionError, match="exist only at run time"):
        workflow(name="typed_misuse")(misuse)

    def body_as_text() -> None:
        shell("shout", argv=["echo", trigger.body + "!"])

    with pytest.raises(WorkflowDefinitionError, match="exist only at run time"):
        workflow(name="typed_misuse_body")(body_as_text)

    @step
    def upper(text: str) -> str:
        return text.upper()

    def fine() -> None:
        upper(shell("fetch", argv=["echo", "hello"]))

    assert workflow(name="typed_fine")(fine).graph.nodes == ("fetch", "upper")
