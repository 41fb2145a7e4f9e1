"""A workflow's identity (SPEC §11): its definition hash depends only on what it declares.

Step names, kinds, options, references and the qualified names of ``@step``
functions — never the file's path or the module name it was imported under.
The same file in two checkouts, or imported by a host app that enqueues for
``brain worker``, is the same workflow.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import sql_rows, wait_for, write_source

from brain.loader import load_file

FLOW = '''
    from brain import cron, shell, step, webhook, workflow

    @step(name="shout", retries={retries})
    def {function}(text: str) -> str:
        return text.upper()

    @workflow(triggers=[{triggers}])
    def identity_flow():
        """{doc}"""
        word = shell("word", argv=["echo", "hello"])
        {function}(word)
'''


def flow_source(*, retries: int = 0, function: str = "shout", doc: str = "One flow.",
                triggers: str = 'cron("0 9 * * *")') -> str:
    return FLOW.format(retries=retries, function=function, doc=doc, triggers=triggers)


def loaded_hash(folder: Path, source: str, file: str = "flows.py") -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = write_source(folder, file, source)
    return load_file(path)["identity_flow"].definition_hash


def imported_hash(folder: Path, source: str, module: str) -> str:
    """Import the file as a host app would: a plain ``import`` from a ``sys.path`` entry."""
    folder.mkdir(parents=True, exist_ok=True)
    write_source(folder, f"{module}.py", source)
    sys.path.insert(0, str(folder))
    try:
        return str(importlib.import_module(module).identity_flow.definition_hash)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(module, None)


def test_one_file_in_two_checkouts_and_a_plain_import_has_one_hash(tmp_path: Path) -> None:
    source = flow_source()
    first = loaded_hash(tmp_path / "checkout-a" / "flows", source)
    second = loaded_hash(tmp_path / "elsewhere" / "b", source)
    plain = imported_hash(tmp_path / "host", source, "identity_host_flows")
    assert first == second == plain


def test_the_hash_ignores_description_and_triggers(tmp_path: Path) -> None:
    """Neither changes how a run executes: renaming a trigger must not fail queued runs."""
    base = loaded_hash(tmp_path / "a", flow_source())
    assert loaded_hash(tmp_path / "b", flow_source(doc="Another text.")) == base
    assert loaded_hash(tmp_path / "c", flow_source(
        triggers='webhook(secret_env="HOOK_SECRET"), cron("0 9 * * *", name="morning")')) == base


@pytest.mark.parametrize("change", [{"retries": 2}, {"function": "yell"}])
def test_a_step_option_or_a_step_function_name_changes_the_hash(tmp_path: Path,
                                                               change: dict[str, object]) -> None:
    """``function``: the step keeps its name ("shout"); only the function's qualified name differs."""
    base = loaded_hash(tmp_path / "a", flow_source())
    assert loaded_hash(tmp_path / "b", flow_source(**change)) != base  # type: ignore[arg-type]


def test_a_run_a_host_app_enqueues_is_executed_by_brain_worker(tmp_path: Path,
                                                              brain_cmd: list[str]) -> None:
    """The issue's case: ``import flows`` + ``enqueue()`` in an app, ``brain worker`` loads the file."""
    folder = tmp_path / "app"
    folder.mkdir()
    write_source(folder, "flows.py", flow_source())
    env = dict(os.environ, PYTHONPATH=str(folder))
    host = subprocess.run(
        [sys.executable, "-c", "import asyncio, flows; print(asyncio.run(flows.identity_flow.enqueue('x')))"],
        env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert host.returncode == 0, host.stderr
    run_id = host.stdout.strip().splitlines()[-1]
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen([*brain_cmd, "worker", str(folder / "flows.py")], env=os.environ.copy(),
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        status = wait_for(lambda: (lambda rows: rows[0]["status"] if rows and rows[0]["status"]
                                   not in ("queued", "running") else None)(
            sql_rows(tmp_path, "SELECT status, error FROM brain_runs WHERE id = ?", run_id)),
            30, f"the enqueued run to end (worker log: {log})")
        rows = sql_rows(tmp_path, "SELECT status, error FROM brain_runs WHERE id = ?", run_id)
        assert status == "succeeded", (dict(rows[0]), log.read_text())
        outputs = sql_rows(tmp_path, "SELECT name, output FROM brain_steps WHERE run_id = ?", run_id)
        assert {r["name"]: r["output"] for r in outputs} == {"word": "hello", "shout": "HELLO"}
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
