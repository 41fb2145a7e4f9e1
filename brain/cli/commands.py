"""What each ``brain`` subcommand does. Handlers are thin: they call the same functions
the server will."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from brain._errors import BrainError, RunNotFound, StoreError, WorkflowLoadError
from brain.cli import render, settle

if TYPE_CHECKING:
    from brain.dsl.model import WorkflowGraph
    from brain.results import RunResult
    from brain.runner.events import EventHandler, StepEvent
    from brain.store import Store

T = TypeVar("T")
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``15m``, ``45s`` or ``2w`` as a time span."""
    m = _AGE.match(text)
    if not m:
        raise ValueError(f"bad age {text!r}: use a number and a unit, e.g. 30d, 12h, 15m, 45s, 2w")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def _fail(message: str, code: int = 2) -> int:
    render.error(message)
    return code


def _in_store(fn: Callable[[Store], Awaitable[T]]) -> T:
    """Open the configured store, run ``fn`` with it, close it."""
    from brain.store import Store

    async def go() -> T:
        async with Store() as store:
            return await fn(store)

    return asyncio.run(go())


def dispatch(args: argparse.Namespace) -> int:
    """Run the chosen subcommand; turn expected errors into a message and exit code 2."""
    handler = _HANDLERS[args.command]
    if args.command != "run":  # run settles once its workflow is loaded
        settle()
    fail = _fail
    if args.command in ("serve", "worker"):  # their errors in their log's format
        from brain.cli.logs import error

        def fail(message: str, code: int = 2) -> int:
            error(message)
            return code
    try:
        return handler(args)
    except (WorkflowLoadError, StoreError, RunNotFound, ValueError) as exc:
        return fail(str(exc))
    except BrainError as exc:
        return fail(str(exc))
    except Exception as exc:
        # A database that breaks mid-command (a corrupt page, a driver that cannot be
        # used): one line, not a traceback. Only a process that loaded SQLAlchemy can have
        # one of its errors: the check never imports it.
        sqlalchemy_exc = sys.modules.get("sqlalchemy.exc")
        if sqlalchemy_exc is None or not isinstance(exc, sqlalchemy_exc.SQLAlchemyError):
            raise
        from brain.store.errors import database_problem

        return fail(database_problem(exc))
    except KeyboardInterrupt:
        render.error("interrupted")
        return 130


def cmd_run(args: argparse.Namespace) -> int:
    """Run a workflow now, with live progress (or only its JSON on stdout)."""
    from brain.cli.startup import root_warning
    from brain.loader import load_target

    wf = load_target(args.target)
    progress = None if args.json else render.Progress(wf)
    warning = root_warning()
    on_event = _warn_first(warning, progress) if warning else progress
    importlib.import_module("brain.runner")  # what the run needs, loaded as part of start-up
    settle()

    async def go() -> RunResult:
        # SIGTERM stops the run the way Ctrl-C does: steps killed, the run recorded cancelled.
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await wf.arun(args.body, on_event=on_event)
        except asyncio.CancelledError:
            raise KeyboardInterrupt from None

    result = asyncio.run(go())
    if args.json:
        render.write_stdout(json.dumps(result.to_json_dict(), ensure_ascii=False) + "\n")
    else:
        render.run_summary(result)
    return 0 if result.succeeded else 1


def _warn_first(message: str, then: EventHandler | None) -> EventHandler:
    """An event handler that prints ``message`` as a warning with the run's first event,
    before any step runs, then passes every event on to ``then``. A command that fails
    before (a file that does not load, an unusable database) shows only its error line."""
    shown = False

    def handle(event: StepEvent) -> None:
        nonlocal shown
        if not shown:
            shown = True
            render.warning(message)
        if then is not None:
            then(event)

    return handle


def cmd_check(args: argparse.Namespace) -> int:
    """Load every workflow file named, and each folder's workflow files, as ``serve`` would."""
    from brain.loader import load_file, workflow_files

    bad = 0
    seen: dict[str, str | None] = {}  # workflow name -> the file that defines it
    for path in args.paths or ["."]:
        folder = os.path.isdir(path)
        found, bad_before = 0, bad
        for file in workflow_files([path]):
            try:
                workflows = load_file(file)
            except WorkflowLoadError as exc:
                render.error(str(exc))
                bad += 1
                continue
            if not workflows and not folder:
                render.error(f"{file}: defines no @workflow")
                bad += 1
            found += len(workflows)
            for wf in workflows.values():
                first = seen.setdefault(wf.name, wf.spec.source_file)
                if first != wf.spec.source_file:
                    render.error(f"workflow {wf.name!r} is defined twice: in {first} and "
                                 f"{wf.spec.source_file}")
                    bad += 1
                    continue
                render.ok(f"{file}: {wf.name} ({len(wf.spec.steps)} steps"
                          + (f", {len(wf.triggers)} triggers" if wf.triggers else "") + ")")
        if folder and not found and bad == bad_before:
            render.error(f"{path}: no workflow in this folder's *.py files (skipping _*.py, "
                         "test_*.py and conftest.py)")
            bad += 1
    return 2 if bad else 0


def cmd_graph(args: argparse.Namespace) -> int:
    from brain.loader import load_target

    wf = load_target(args.target)
    graph = wf.graph
    if args.mermaid:
        render.write_stdout(mermaid(graph))
        return 0
    render.graph(wf)
    return 0


def mermaid(graph: WorkflowGraph) -> str:
    """A Mermaid flowchart of ``graph``: a conditioned step shows its conditions, a
    ``for_each`` block is a subgraph, an edge from a condition is labelled ``when``."""
    in_group = {name for group in graph.groups for name in group.steps}
    lines = ["flowchart TD"]

    def node(name: str) -> str:
        label = name
        if name in graph.conditions:
            label += "<br/>when " + " and ".join(graph.conditions[name])
        return f"{_mermaid_id(name)}[\"{label.replace(chr(34), '#quot;')}\"]"

    lines += [f"    {node(name)}" for name in graph.nodes if name not in in_group]
    for i, group in enumerate(graph.groups):
        title = f"{group.label}, {group.max_parallel} at a time".replace('"', "#quot;")
        lines.append(f"    subgraph g{i}[\"{title}\"]")
        lines += [f"        {node(name)}" for name in group.steps]
        lines.append("    end")
    for up, down in graph.edges:
        conditions = graph.conditions.get(down, ())
        when = any(c.strip("{}").removeprefix("not {") == up for c in conditions)
        arrow = "-. when .->" if when else "-->"
        lines.append(f"    {_mermaid_id(up)} {arrow} {_mermaid_id(down)}")
    return "\n".join(lines) + "\n"


def _mermaid_id(name: str) -> str:
    return "s_" + name.replace("-", "__")


def cmd_runs(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise ValueError("--limit must be at least 1")
    results = _in_store(lambda store: store.list_runs(workflow=args.workflow, status=args.status,
                                                      limit=args.limit))
    if args.json:
        render.write_stdout(json.dumps([r.to_json_dict() for r in results], ensure_ascii=False)
                            + "\n")
    else:
        render.runs_table(results)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    result = _in_store(lambda store: store.get_run(args.run_id))
    if args.json:
        render.write_stdout(json.dumps(result.to_json_dict(), ensure_ascii=False) + "\n")
    else:
        render.run_detail(result)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from brain.runner import cancel_run

    result, was_active = _in_store(lambda store: cancel_run(store, args.run_id))
    if not was_active:
        render.error(f"run {result.run_id} already ended ({result.status})")
        return 1
    render.ok(f"run {result.run_id} cancelled" if result.status == "cancelled"
              else f"run {result.run_id}: cancel requested; it stops within a second")
    return 0


def cmd_workers(args: argparse.Namespace) -> int:
    from brain.runner import lease_seconds
    from brain.workers import describe_workers

    rows = describe_workers(_in_store(lambda store: store.list_workers()), lease_seconds())
    if args.json:
        render.write_stdout(json.dumps(rows, indent=2) + "\n")
        return 0
    if not rows:
        render.ok("no executor process has written a heartbeat (none is running)")
        return 0
    for w in rows:
        state = "LOST" if w["lost"] else "alive"
        render.write_stdout(f"{w['kind']:<6} {w['host']}:{w['pid']:<8} {state:<5} "
                            f"executing {w['executing']:<3} last heartbeat "
                            f"{w['silent_seconds']:.0f}s ago  started {w['started_at'][:19]}\n")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    from brain._errors import RunConflict

    try:
        new_id = _in_store(lambda store: store.retry_run(args.run_id))
    except RunConflict as exc:
        render.error(str(exc))
        return 1
    render.ok(f"queued run {new_id}, a retry of {args.run_id}: a running `brain serve` or "
              f"`brain worker` executes it (steps that succeeded keep their outputs)")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    from brain._clock import utcnow

    age = parse_age(args.older_than)

    count = _in_store(lambda store: store.prune(utcnow() - age))
    render.ok(f"deleted {count} finished run{'s' if count != 1 else ''} older than {args.older_than}")
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from brain.store import Store

    store = Store()

    async def go() -> tuple[str | None, str]:
        try:
            return await store.upgrade_schema()
        finally:
            await store.close()

    before, after = asyncio.run(go())
    if before == after:
        render.ok(f"{store.shown_url}: schema already at revision {after}")
    else:
        render.ok(f"{store.shown_url}: schema upgraded from {before or 'empty'} to revision {after}")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from brain.mcp_discovery import list_tools

    tools = asyncio.run(list_tools(args.server))
    if args.json:
        render.write_stdout(json.dumps(tools, ensure_ascii=False) + "\n")
    else:
        render.tools(tools)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from brain.cli.serve import cmd_serve as serve

    return serve(args)


def cmd_worker(args: argparse.Namespace) -> int:
    from brain.cli.serve import cmd_worker as worker

    return worker(args)


_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run, "check": cmd_check, "graph": cmd_graph, "runs": cmd_runs, "show": cmd_show,
    "cancel": cmd_cancel, "retry": cmd_retry, "workers": cmd_workers, "prune": cmd_prune,
    "db": cmd_db, "mcp": cmd_mcp,
    "serve": cmd_serve, "worker": cmd_worker,
}
