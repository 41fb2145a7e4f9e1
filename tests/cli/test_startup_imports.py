"""``brain run`` imports only what its run needs: defining a shell workflow loads no web
stack, HTTP or MCP client, or database library, and running one loads no web stack or
client either (each step kind loads its own dependencies when such a step runs).

Timing is measured by ``bench/step_overhead.py``, never asserted here (shared machines).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: Never needed to define or run a shell workflow: the web stack (``brain serve``), the LLM
#: step's HTTP client, the MCP step's SDK.
NOT_FOR_A_SHELL_RUN = ["litestar", "uvicorn", "httpx", "mcp", "brain.server"]

SHELL_WORKFLOW = '''
from brain import shell, trigger, workflow


@workflow
def hello():
    who = shell("who", argv=["echo", "world"])
    shell("greet", command="echo hello {who} {trigger.body}")
'''


def loaded_modules(code: str, cwd: Path) -> set[str]:
    """The top-level names and ``brain.*`` packages in ``sys.modules`` after ``code`` ran
    in a fresh interpreter."""
    script = code + textwrap.dedent('''
        import json as _json, sys as _sys
        _names = {m.split(".")[0] for m in _sys.modules} | {
            ".".join(m.split(".")[:2]) for m in _sys.modules if m.startswith("brain.")}
        print("MODULES " + _json.dumps(sorted(_names)))
    ''')
    done = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


def test_defining_a_shell_workflow_loads_no_server_client_or_database(tmp_path: Path) -> None:
    (tmp_path / "flow.py").write_text(SHELL_WORKFLOW)
    loaded = loaded_modules("import flow\nassert len(flow.hello.spec.steps) == 2\n", tmp_path)
    assert "brain" in loaded
    for name in [*NOT_FOR_A_SHELL_RUN, "sqlalchemy", "aiosqlite", "alembic", "rich",
                 "brain.runner", "brain.store", "brain.service"]:
        assert name not in loaded, f"defining a shell workflow imported {name}"
    # A command with placeholders is checked with the shell parser while it is traced.
    assert "tree_sitter" in loaded


def test_importing_brain_loads_neither_the_shell_parser_nor_the_function_wrapper(
        tmp_path: Path) -> None:
    loaded = loaded_modules("import brain\nfrom brain import shell, step, workflow\n", tmp_path)
    assert "tree_sitter" not in loaded


RUN_IN_PROCESS = '''
from brain.cli import main
try:
    main(["run", "flow.py", "--body", "there"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
'''


def run_loaded_modules(folder: Path) -> set[str]:
    """The modules a ``brain run`` of ``folder/flow.py`` loads, on a database file that
    exists already (as a user's ``./brain.db`` does: creating the schema is another matter)."""
    (folder / "flow.py").write_text(SHELL_WORKFLOW)
    first = subprocess.run([sys.executable, "-m", "brain.cli", "run", "flow.py"], cwd=folder,
                           capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    return loaded_modules(RUN_IN_PROCESS, folder)


def test_brain_run_of_a_shell_workflow_loads_no_web_stack_or_clients(tmp_path: Path) -> None:
    loaded = run_loaded_modules(tmp_path)
    assert {"brain.runner", "brain.store", "brain.executors"} <= loaded
    for name in NOT_FOR_A_SHELL_RUN:
        assert name not in loaded, f"brain run of a shell workflow imported {name}"


def test_brain_run_on_an_existing_sqlite_file_loads_no_sqlalchemy(tmp_path: Path) -> None:
    if "sqlalchemy" in loaded_modules("import brain.store\n", tmp_path):
        pytest.xfail("brain/store imports SQLAlchemy at module level: the SQLite path is not "
                     "free of it yet")
    assert "sqlalchemy" not in run_loaded_modules(tmp_path)
