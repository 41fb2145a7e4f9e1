"""What a step's fingerprint covers (SPEC §24): what the step does and the steps it waits
for; for a ``@step``, its code and the code it calls from its own module. It is the same in
every process and under every loader, and two that differ say what changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_flows import flows, source
from support import write_source

from brain.dsl.fingerprint import StepPrint, WorkflowPrint, git_commit, what_changed, workflow_version
from brain.loader import load_file

FLOW = '''
    import os

    from brain import llm, shell, step, workflow

    LIMIT = 3


    def trim(text):
        """Helpers' docstrings do not count either."""
        return text[:LIMIT]


    class Shouter:
        def shout(self, text):
            return trim(text).upper()


    @step
    def headline(text: str) -> str:
        """A docstring is not code."""
        return Shouter().shout(text) + os.sep


    @workflow
    def flow():
        fetched = shell("fetch", command="echo hello", env={"MODE": "fast"})
        title = headline(fetched)
        llm("summary", prompt="Summarize {headline}", model="m1", after=[fetched])
'''


def prints_of(folder: Path, text: str = FLOW) -> WorkflowPrint:
    folder.mkdir(parents=True, exist_ok=True)
    return load_file(write_source(folder, "flows.py", text))["flow"].fingerprint


@pytest.mark.parametrize(("old", "new", "step", "what"), [
    ('"echo hello"', '"echo bye"', "fetch", "command changed"),
    ('"fast"', '"slow"', "fetch", "env changed"),
    ("model=\"m1\"", "model=\"m2\"", "summary", "model changed"),
    ("Summarize {headline}", "Sum up {headline}", "summary", "prompt changed"),
    ("return text[:LIMIT]", "return text[:LIMIT + 1]", "headline", "code changed"),
    (".upper()", ".lower()", "headline", "code changed"),
    ("+ os.sep", "+ os.linesep", "headline", "code changed"),
    ("after=[fetched]", "after=[]", "summary", "upstream changed"),
    ('shell("fetch", command="echo hello"', 'shell("fetch", command="echo hello", retries=2',
     "fetch", "retries changed"),
])
def test_a_change_is_seen_in_its_step_alone_and_named(tmp_path: Path, old: str, new: str,
                                                      step: str, what: str) -> None:
    before = prints_of(tmp_path / "a")
    assert old in FLOW
    after = prints_of(tmp_path / "b", FLOW.replace(old, new))
    changed = {name: what_changed(before.steps[name], after.steps[name])
               for name in before.steps}
    assert changed == {name: (what if name == step else None) for name in before.steps}


@pytest.mark.parametrize(("old", "new"), [
    ('"""A docstring is not code."""', '"""Another docstring."""'),
    ('"""Helpers\' docstrings do not count either."""', '"""Changed."""'),
    ("LIMIT = 3", "LIMIT = 4"),  # a global's value: missed, as documented
    ("    import os\n", "    import os\n\n\n    def unrelated():\n        return 1\n"),
    ("\n\n    @step", "\n\n    # a comment moves the lines\n\n\n    @step"),
])
def test_what_a_fingerprint_does_not_see(tmp_path: Path, old: str, new: str) -> None:
    assert old in FLOW
    assert prints_of(tmp_path / "a").text == prints_of(tmp_path / "b", FLOW.replace(old, new)).text


def test_added_and_removed_steps_and_the_stored_text(tmp_path: Path) -> None:
    prints = prints_of(tmp_path)
    assert list(prints.steps) == ["fetch", "headline", "summary"]
    assert prints.steps["summary"].upstream == ("fetch", "headline")
    assert WorkflowPrint.parse(prints.text) == prints
    assert what_changed(prints.steps["fetch"], None) == "removed"
    assert what_changed(None, prints.steps["fetch"]) == "added"
    assert what_changed(prints.steps["fetch"], prints.steps["summary"]) == "kind changed"
    assert prints.downstream("headline") == {"headline", "summary"}
    assert prints.step("headline[3]") == prints.steps["headline"]  # a for_each instance
    shown = StepPrint("step", {"code": "1", "arguments": "2"})
    assert what_changed(shown, StepPrint("step", {"code": "3", "arguments": "4"})) == \
        "arguments, code changed"


def test_a_secret_header_value_leaves_no_trace(tmp_path: Path) -> None:
    flow = '''
        from brain import mcp_tool, workflow

        @workflow
        def flow():
            mcp_tool("call", url="https://mcp.example/x", tool="t",
                     headers={"Authorization": "Bearer TOKEN", "X-Mode": "a"})
    '''
    one = prints_of(tmp_path / "a", flow.replace("TOKEN", "s3cr3t-one"))
    other = prints_of(tmp_path / "b", flow.replace("TOKEN", "s3cr3t-two"))
    assert one.text == other.text  # a rotated token is no change
    moded = prints_of(tmp_path / "c", flow.replace('"a"', '"b"'))
    assert what_changed(one.steps["call"], moded.steps["call"]) == "headers changed"


def test_the_version_is_the_files_digest_with_its_git_commit(tmp_path: Path) -> None:
    path = write_source(tmp_path, "flows.py", "x = 1\n")
    alone = workflow_version(str(path))
    assert alone is not None and len(alone) == 12 and "@" not in alone
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    for args in (["init", "-q", "-b", "main"], ["add", "flows.py"], ["commit", "-qm", "one"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, env=env)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, check=True, text=True,
                          capture_output=True).stdout.strip()
    assert workflow_version(str(path)) == f"{alone}@{head[:12]}"
    # packed refs, and a worktree's .git file
    subprocess.run(["git", "pack-refs", "--all"], cwd=tmp_path, check=True, env=env)
    assert git_commit(tmp_path) == head
    subprocess.run(["git", "worktree", "add", "-q", "-b", "other", str(tmp_path / "wt")],
                   cwd=tmp_path, check=True, env=env)
    assert git_commit(tmp_path / "wt") == head
    assert workflow_version(str(tmp_path / "missing.py")) is None


_PRINT_IN_ANOTHER_PROCESS = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
print(json.dumps([importlib.import_module(m).flow.fingerprint.text for m in sys.argv[2:]]))
"""


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(flows(), min_size=4, max_size=4))
def test_one_file_has_one_fingerprint_in_every_process_and_loader(batch: list) -> None:
    """The file loader (``brain worker``) and a plain ``import`` in another process, with
    another hash seed, give the same text."""
    with tempfile.TemporaryDirectory() as folder:
        names = [f"fp_flow_{i}" for i in range(len(batch))]
        loaded = []
        for name, flow in zip(names, batch, strict=True):
            path = Path(folder, f"{name}.py")
            path.write_text(source(flow))
            loaded.append(load_file(path)["flow"].fingerprint.text)
        env = {**os.environ, "PYTHONHASHSEED": "12345",
               "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, "-c", _PRINT_IN_ANOTHER_PROCESS, folder, *names],
                             capture_output=True, text=True, env=env, check=True).stdout
        assert json.loads(out) == loaded


COST_FLOW = '''
    from brain import Cache, llm, shell, step, workflow


    @step(cache="7d", limit="openai")
    def tidy(text: str) -> str:
        return text.strip()


    @workflow(limits={"openai": Limit(requests=60, per="1m"), "other": Limit(requests=5, per="1m")})
    def flow():
        fetched = shell("fetch", command="echo hi", cache="1d")
        tidy(fetched)
        llm("summary", prompt="Sum up {fetch}", model="m1", cache=Cache(expire="7d"),
            limit="openai")
'''.replace("from brain import Cache", "from brain import Cache, Limit")


@pytest.mark.parametrize(("old", "new"), [
    ('@step(cache="7d", limit="openai")', '@step(cache="30d", limit="other")'),
    ('@step(cache="7d", limit="openai")', "@step"),
    ('cache="1d")', ")"),
    ('cache=Cache(expire="7d"),\n            limit="openai")',
     'cache=Cache(expire="1h", key=["{fetch}"]))'),
])
def test_cache_and_limit_options_are_no_change_of_what_a_step_does(
        tmp_path: Path, old: str, new: str) -> None:
    """SPEC §26's options say how an output is reused or paced: a waiting run goes on after
    they change (the cache key keeps its own rules: tests/runner/test_cache.py)."""
    from brain.runner.caching import step_fingerprint

    assert old in COST_FLOW
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    one = load_file(write_source(tmp_path / "a", "flows.py", COST_FLOW))["flow"]
    other = load_file(write_source(tmp_path / "b", "flows.py", COST_FLOW.replace(old, new)))["flow"]
    assert one.fingerprint.text == other.fingerprint.text
    for name in ("fetch", "tidy", "summary"):
        assert step_fingerprint(one, name) == step_fingerprint(other, name)


SCHEMA_FLOW = '''
    from pydantic import BaseModel, field_validator

    from brain import llm, workflow


    def clean(text):
        return text.strip()


    class Answer(BaseModel):
        """The answer."""

        title: str
        score: int = 0

        @field_validator("title")
        @classmethod
        def tidy(cls, value: str) -> str:
            return clean(value)


    @workflow
    def flow():
        llm("review", prompt="Review", model="m1", schema=Answer)
'''


@pytest.mark.parametrize(("old", "new", "what"), [
    ("return clean(value)", "return clean(value).upper()", "schema changed"),
    ("return text.strip()", "return text.lower()", "schema changed"),  # a helper it calls
    ("score: int = 0", "score: float = 0", "schema changed"),
    # its docstring is the schema's description, sent with the request: a change
    ('"""The answer."""', '"""What the model answers."""', "schema changed"),
    ("score: int = 0\n", "score: int = 0  # a comment\n", None),
    ("def clean(text):", "def unrelated():\n        return 1\n\n\n    def clean(text):", None),
])
def test_an_llm_schema_models_code_is_in_its_fingerprint(tmp_path: Path, old: str, new: str,
                                                        what: str | None) -> None:
    assert old in SCHEMA_FLOW
    before = prints_of(tmp_path / "a", SCHEMA_FLOW)
    after = prints_of(tmp_path / "b", SCHEMA_FLOW.replace(old, new))
    assert what_changed(before.steps["review"], after.steps["review"]) == what
