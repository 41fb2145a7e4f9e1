"""Every ```python block in docs/*.md and README.md pastes on its own.

Each block must compile as written (only the indentation of its fence, as in a
list item, is removed, as Markdown does) and must import or define every name
of The Brain's public API that it uses. Blocks that open with ``# file: NAME``
are parts of one file (docs/testing.md): each is checked together with the
earlier parts of that file. A block that is deliberately partial, such as a
signature, is marked by an ``<!-- fragment -->`` line right before its fence
and is skipped. Blocks that only import and define (no calls at top level) are
also executed, so a documented workflow that no longer traces is caught.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FRAGMENT = "<!-- fragment -->"
_OPEN = re.compile(r"^( *)```python[ \t]*$")
_FILE = re.compile(r"# file: (\S+)[ \t]*$")
# The public API: what `brain` exports, and the public modules users import from.
_API_MODULES = ("brain", "brain.testing", "brain.runner", "brain.store", "brain.server")
# More fragments than this means the marker is being used to dodge the check.
MAX_FRAGMENTS = 8


@dataclass(frozen=True)
class Snippet:
    """One ```python block: where it is, its code (with earlier parts of its file)."""

    where: str
    code: str
    fragment: bool
    file_name: str | None


def snippets(markdown: str, doc: str) -> list[Snippet]:
    """The ```python blocks of one Markdown text, in order."""
    lines = markdown.splitlines()
    found: list[Snippet] = []
    files: dict[str, str] = {}
    i = 0
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent = len(opening.group(1))
        fragment = i > 0 and lines[i - 1].strip() == FRAGMENT
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            line = lines[j]
            # Markdown removes the fence's own indentation (a list item's), nothing more.
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))):])
            j += 1
        if j == len(lines):
            raise AssertionError(f"{doc}:{i + 1}: a ```python block that is never closed")
        code = "\n".join(body) + "\n"
        named = _FILE.match(body[0]) if body else None
        file_name = named.group(1) if named else None
        if file_name is not None:
            files[file_name] = files.get(file_name, "") + code
            code = files[file_name]
        found.append(Snippet(f"{doc}:{i + 2}", code, fragment, file_name))
        i = j + 1
    return found


def public_api() -> set[str]:
    """Every name exported by The Brain's public modules."""
    names: set[str] = set()
    for module in _API_MODULES:
        names |= set(getattr(importlib.import_module(module), "__all__", ()))
    names.discard("__version__")
    return names


def bound_names(tree: ast.AST, api: set[str]) -> set[str]:
    """Names a block binds: imports, assignments, definitions, parameters, ``as`` targets."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    names |= api
                else:
                    names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
    return names


def problem(snippet: Snippet, api: set[str]) -> str | None:
    """Why a block does not paste on its own, or None."""
    try:
        tree = ast.parse(snippet.code)
        compile(snippet.code, snippet.where, "exec")
    except SyntaxError as exc:
        return f"{snippet.where}: does not compile: {exc.msg} (line {exc.lineno} of the block)"
    used = {node.id for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    missing = sorted((used & api) - bound_names(tree, api))
    if missing:
        return (f"{snippet.where}: uses {', '.join(missing)} without importing "
                f"{'it' if len(missing) == 1 else 'them'}: add `from brain... import ...` "
                "to the block")
    return None


def definitions_only(snippet: Snippet, api: set[str]) -> bool:
    """True for a block that only imports (brain or stdlib) and defines: safe to execute."""
    if snippet.fragment or snippet.file_name is not None:
        return False
    for statement in ast.parse(snippet.code).body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            modules = ([a.name for a in statement.names] if isinstance(statement, ast.Import)
                       else [statement.module or ""])
            for module in modules:
                top = module.split(".")[0]
                if top != "brain" and top not in sys.stdlib_module_names:
                    return False
        elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            # `recall = mcp_tool(...)` outside a workflow is a line lifted from one.
            if any(isinstance(node, ast.Name) and node.id in api
                   for node in ast.walk(statement)):
                return False
        elif not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
    return True


def doc_snippets() -> list[Snippet]:
    """Every ```python block of docs/*.md and README.md."""
    docs = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
    found: list[Snippet] = []
    for doc in docs:
        found += snippets(doc.read_text(encoding="utf-8"), str(doc.relative_to(REPO)))
    return found


DOC_SNIPPETS = doc_snippets()
API = public_api()


@pytest.mark.parametrize("snippet", [s for s in DOC_SNIPPETS if not s.fragment],
                         ids=lambda s: s.where)
def test_every_doc_snippet_compiles_and_imports_what_it_uses(snippet: Snippet) -> None:
    assert problem(snippet, API) is None, problem(snippet, API)


def test_the_docs_have_snippets_and_few_fragments() -> None:
    docs_with_python = {str(p.relative_to(REPO)) for p in [*(REPO / "docs").glob("*.md"),
                                                          REPO / "README.md"]
                        if "```python" in p.read_text(encoding="utf-8")}
    assert {s.where.rpartition(":")[0] for s in DOC_SNIPPETS} == docs_with_python
    assert len(DOC_SNIPPETS) >= 50
    fragments = [s.where for s in DOC_SNIPPETS if s.fragment]
    assert len(fragments) <= MAX_FRAGMENTS, fragments


def test_doc_snippets_that_only_define_run(tmp_path: Path) -> None:
    """Import-and-define blocks run in a fresh namespace each: their workflows trace."""
    blocks = {s.where: s.code for s in DOC_SNIPPETS if definitions_only(s, API)}
    assert len(blocks) >= 15
    runner = textwrap.dedent("""
        import json, os, sys, traceback
        failures = {}
        for where, code in json.load(sys.stdin).items():
            try:
                exec(compile(code, where, "exec"),
                     {"__name__": "snippet", "__file__": f"{os.getcwd()}/snippet.py"})
            except BaseException:
                failures[where] = traceback.format_exc(limit=3)
        print(json.dumps(failures))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAIN_", "LLM_"))}
    env["BRAIN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'docs.db'}"
    proc = subprocess.run([sys.executable, "-c", runner], input=json.dumps(blocks), cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    failures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert failures == {}, "\n".join(f"{w}:\n{t}" for w, t in failures.items())


# The checker itself, on small Markdown texts: it must catch what it is for.

def check(markdown: str) -> list[str | None]:
    return [problem(s, API) for s in snippets(markdown, "doc.md") if not s.fragment]


def test_the_checker_reports_a_missing_import() -> None:
    [found] = check("```python\n@workflow\ndef w():\n    shell('a', command='true')\n```\n")
    assert found is not None
    assert "uses shell, workflow without importing them" in found
    assert found.startswith("doc.md:2:")


def test_the_checker_accepts_imported_defined_and_attribute_uses() -> None:
    assert check("```python\nfrom brain import shell as sh\nimport brain\n\n"
                 "@brain.workflow\ndef w():\n    sh('a', command='true')\n```\n") == [None]
    assert check("```python\ndef workflow(f):\n    return f\n\n@workflow\ndef w(): ...\n```\n"
                 ) == [None]
    assert check("```python\nfrom brain.testing import run_workflow\nrun_workflow(w)\n```\n"
                 ) == [None]
    [found] = check("```python\nrun_workflow(w)\n```\n")
    assert found is not None and "run_workflow" in found


def test_the_checker_refuses_a_block_indented_beyond_its_fence() -> None:
    [found] = check("```python\n    from brain import shell\n    x = 1\n```\n")
    assert found is not None and "does not compile" in found
    [found] = check("```python\nllm(name, prompt, *, system=None)\n```\n")
    assert found is not None and "does not compile" in found


def test_a_block_in_a_list_item_loses_only_the_items_indentation() -> None:
    assert check("- item:\n\n  ```python\n  from brain import shell\n\n  def f():\n"
                 "      return shell\n  ```\n") == [None]


def test_a_fragment_is_skipped_and_file_parts_share_their_imports() -> None:
    markdown = ("<!-- fragment -->\n```python\nshell(name, command=None, *, argv=None)\n```\n\n"
                "```python\n# file: t.py\nfrom brain.testing import run_workflow\n```\n\n"
                "```python\n# file: t.py\ndef test_x():\n    run_workflow(w)\n```\n\n"
                "```python\n# file: u.py\ndef test_y():\n    run_workflow(w)\n```\n")
    results = check(markdown)
    assert results[:2] == [None, None]
    assert results[2] is not None and "run_workflow" in results[2]
    [fragment, *_] = snippets(markdown, "doc.md")
    assert fragment.fragment


# The start-up lines docs/server.md and docs/triggers.md quote, against a real `brain serve`.

_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<rest>[A-Z]+ [\w.]+: .*)$")
_START_LINE = re.compile(r"^The Brain: \d+ workflows? \(.+\) on http://127\.0\.0\.1:\d+  ·  page /  ·  "
                         r"API /api  ·  OpenAPI /schema  ·  webhooks .+  ·  database \S+$")


def _unsecured_webhook_line(rest: str) -> str | None:
    """A "webhook accepts nothing" log line with its names taken out, or None for another."""
    found = re.fullmatch(r"(WARNING [\w.]+): webhook /hooks/\S+ of \S+ accepts nothing: "
                         r"[A-Z_]+ is not set", rest)
    return found.group(1) if found else None


def test_the_start_up_lines_the_docs_quote_are_what_brain_serve_prints(tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "deploy.py").write_text(
        "from brain import shell, webhook, workflow\n\n\n"
        "@workflow(triggers=[webhook(secret_env='DEPLOY_SECRET')])\n"
        "def deploy():\n    shell('apply', argv=['true'])\n")
    env = {k: v for k, v in os.environ.items() if k != "DEPLOY_SECRET"}
    env["BRAIN_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"
    proc = subprocess.Popen([sys.executable, "-m", "brain.cli", "serve", str(flows), "--port", "0"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    printed: list[str] = []
    try:
        assert proc.stderr is not None
        while not (any(_START_LINE.match(line) for line in printed)
                   and any("accepts nothing" in line for line in printed)):
            line = proc.stderr.readline()
            assert line, f"brain serve ended early: {printed}"
            printed.append(line.rstrip("\n"))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    real = [m.group("rest") for line in printed if (m := _LOG_LINE.match(line))]
    assert ("WARNING brain.service: webhook /hooks/deploy of deploy accepts nothing: "
            "DEPLOY_SECRET is not set") in real
    real_kinds = {_unsecured_webhook_line(rest) for rest in real} - {None}
    quoted = [(doc, line) for doc in ("server.md", "triggers.md")
              for line in (REPO / "docs" / doc).read_text(encoding="utf-8").splitlines()]
    starts = [line for _, line in quoted if line.startswith("The Brain: ")]
    assert starts and all(_START_LINE.match(line) for line in starts), starts
    webhook_lines = [(doc, m.group("rest")) for doc, line in quoted
                     if (m := _LOG_LINE.match(line)) and "accepts nothing" in line]
    assert len(webhook_lines) >= 2
    for doc, rest in webhook_lines:
        assert _unsecured_webhook_line(rest) in real_kinds, (doc, rest, real)
