"""``import brain`` stays light (SPEC §11) and exposes the public API."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ["sqlalchemy", "alembic", "httpx", "litestar", "uvicorn", "mcp", "rich", "apscheduler",
         "watchdog", "aiosqlite", "asyncpg"]


def test_import_brain_loads_no_heavy_library() -> None:
    code = ("import sys, json, brain\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_defining_a_workflow_loads_no_heavy_library() -> None:
    code = ("import sys, json\n"
            "from brain import workflow, shell, step, parallel, trigger\n"
            "@step\n"
            "def f(x: str) -> str:\n"
            "    return x\n"
            "@workflow\n"
            "def wf():\n"
            "    a = shell('a', command='echo {trigger.body}')\n"
            "    with parallel():\n"
            "        f(a)\n"
            "        shell('b', argv=['echo', a])\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_public_names_are_importable_from_brain() -> None:
    import brain

    for name in ["workflow", "shell", "step", "parallel", "trigger", "secret", "cron", "every",
                 "webhook", "watch", "RunResult", "StepResult", "BrainError",
                 "WorkflowDefinitionError", "PlaceholderError", "StepFailed"]:
        assert hasattr(brain, name), name
    assert issubclass(brain.WorkflowDefinitionError, brain.BrainError)
    assert issubclass(brain.StepFailed, brain.BrainError)


def test_the_package_ships_its_type_information() -> None:
    """``py.typed`` tells type checkers to read brain's annotations (PEP 561)."""
    from pathlib import Path

    import brain

    assert (Path(brain.__file__).parent / "py.typed").is_file()
