"""``brain check``: load workflow files (or folders of them) as ``serve`` would, and say
what each defines, or what is wrong with it."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from brain._errors import WorkflowLoadError
from brain.cli import render

if TYPE_CHECKING:
    from brain.workflow import Workflow


def cmd_check(args: argparse.Namespace) -> int:
    """Load every workflow file named, and each folder's workflow files, as ``serve`` would.

    What passes is said on stdout, one line per workflow (with ``--json``, a JSON list of
    the workflows instead, see :func:`workflow_facts`); what fails on stderr."""
    check = _Check(as_json=getattr(args, "json", False))
    for path in args.paths or ["."]:
        check.path(path)
    if check.loaded and not check.bad:
        warn_stale(check.loaded)
    if check.as_json:
        from brain.cli.terminal import json_text

        render.write_stdout(json_text(check.found, indent=2) + "\n")
    return 2 if check.bad else 0


def warn_stale(workflows: dict[str, Workflow]) -> None:
    """With a database at hand (``BRAIN_DATABASE_URL``, or the default file exists: none is
    created to check), warn about each waiting run that these workflows, as loaded now,
    would fail when it continues (SPEC §24)."""
    from brain.store.urls import default_url, missing_database

    if missing_database(default_url()):
        return
    from brain.cli.commands import with_api

    try:
        found = with_api(lambda api: api.stale(workflows))
    except Exception as exc:  # checking the files is the command's job: say it, go on
        render.warning(f"could not look for waiting runs this change would fail: {exc}")
        return
    for run, why in found:
        render.warning(f"waiting run {run.run_id[:12]} of {run.workflow} would fail when it "
                       f"continues: {why} (see brain runs --stale)")


def workflow_facts(wf: Workflow) -> dict[str, Any]:
    """What ``brain check --json`` says of a workflow: its name, file, description, step
    names, triggers (no secret's variable), ``params_schema`` and ``output_schema``."""
    return {"name": wf.name, "file": wf.spec.source_file, "description": wf.description,
            "steps": [s.name for s in wf.spec.steps],
            "triggers": [t.model_dump(mode="json", exclude={"secret_env"})
                         for t in wf.triggers],
            "params_schema": wf.params_schema, "output_schema": wf.output_schema}


class _Check:
    """``brain check``'s tally: the problems found, and which file defined each workflow."""

    def __init__(self, *, as_json: bool = False) -> None:
        self.bad = 0
        self.seen: dict[str, str | None] = {}  # workflow name -> the file that defines it
        self.as_json = as_json
        self.found: list[dict[str, Any]] = []  # with --json: each good workflow's facts
        self.loaded: dict[str, Workflow] = {}  # each good workflow, by name

    def problem(self, message: str) -> None:
        render.error(message)
        self.bad += 1

    def path(self, path: str) -> None:
        """Check one file, or one folder's workflow files (saying which ones it skipped)."""
        from brain.loader import scan_folder

        if not os.path.isdir(path):
            self.file(path, named=True)
            return
        files, skipped = scan_folder(path)
        for file in skipped if not self.as_json else ():
            render.result(f"{file}: skipped, not a workflow file (it never mentions brain)",
                          dim=True)
        found, bad_before = 0, self.bad
        for file in files:
            found += self.file(file, named=False)
        if not found and self.bad == bad_before:
            self.problem(f"{path}: no workflow in this folder's *.py files (skipping _*.py, "
                         "test_*.py, conftest.py and files that never mention brain)")

    def file(self, file: str, *, named: bool) -> int:
        """Check one file; how many workflows it defines."""
        from brain.loader import load_file

        try:
            workflows = load_file(file)
        except WorkflowLoadError as exc:
            self.problem(str(exc))
            return 0
        if not workflows and named:
            self.problem(f"{file}: defines no @workflow")
        for wf in workflows.values():
            first = self.seen.setdefault(wf.name, wf.spec.source_file)
            if first != wf.spec.source_file:
                self.problem(f"workflow {wf.name!r} is defined twice: in {first} and "
                             f"{wf.spec.source_file}")
                continue
            self.loaded[wf.name] = wf
            if self.as_json:
                self.found.append(workflow_facts(wf))
                continue
            triggers = f", {render.plural(len(wf.triggers), 'trigger')}" if wf.triggers else ""
            render.result(f"{file}: {wf.name} ({render.plural(len(wf.spec.steps), 'step')}"
                          f"{triggers})")
        return len(workflows)
