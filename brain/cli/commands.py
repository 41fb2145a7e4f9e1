"""What each ``brain`` subcommand does. Handlers are thin: an operation on runs is a call
to the application core (:class:`brain.service.api.BrainApi`, on the configured store), the
one the HTTP API calls, so both answer by the same rules."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from brain._errors import BrainError
from brain.cli import parse_age, render, run_trigger, settle, show
from brain.cli.checking import cmd_check
from brain.cli.deciding import cmd_approve, cmd_cache, cmd_signal
from brain.cli.follow import LinePrinter, cmd_logs
from brain.cli.startup import only_reads, require_database
from brain.cli.terminal import json_text

if TYPE_CHECKING:
    from brain.results import RunResult, StepResult
    from brain.runner.events import EventHandler, StepEvent
    from brain.service.api import BrainApi
    from brain.store import Store
    from brain.workflow import Workflow

T = TypeVar("T")


def _fail(message: str, code: int = 2) -> int:
    render.error(message)
    return code


def in_store(fn: Callable[[Store], Awaitable[T]]) -> T:
    """Open the configured store, run ``fn`` with it, close it."""
    from brain.store import Store

    async def go() -> T:
        async with Store() as store:
            return await fn(store)

    return asyncio.run(go())


def with_api(fn: Callable[[BrainApi], Awaitable[T]],
             workflows: Mapping[str, Workflow] | None = None) -> T:
    """Open the configured store, run ``fn`` with the application core on it (checking
    against ``workflows`` when given), close it."""
    from brain.service.api import BrainApi

    return in_store(lambda store: fn(BrainApi(store, workflows=workflows)))


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
        if only_reads(args):  # a read never creates a database: say which one is missing
            require_database()
        return handler(args)
    except (BrainError, ValueError) as exc:  # a bad file, an unusable database, an unknown run
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
    params = _run_params(wf, args)
    if params is None:
        return 2
    trigger = run_trigger(args)
    progress = None if args.json else render.Progress(wf)
    on_log = None if args.quiet or args.json else \
        LinePrinter((s.name for s in wf.spec.steps), stream=sys.stderr)
    warning = root_warning()
    on_event = _warn_first(warning, progress) if warning else progress
    importlib.import_module("brain.runner")  # what the run needs, loaded as part of start-up
    settle()

    waited: list[str] = []  # the run's id, once it waits

    def on_wait(run: RunResult, steps: list[StepResult]) -> None:
        from brain.runner.now import waiting_text

        waited[:] = [run.run_id]
        for step in steps:
            render.note(f"run {run.run_id[:12]} {waiting_text(run.run_id, step)}")

    async def go() -> RunResult:
        # SIGTERM stops the run the way Ctrl-C does: steps killed, the run recorded cancelled.
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await wf.arun(trigger, params=params, on_event=on_event, on_log=on_log,
                                 on_wait=on_wait)
        except asyncio.CancelledError:
            raise KeyboardInterrupt from None

    try:
        result = asyncio.run(go())
    except KeyboardInterrupt:
        if waited and _still_waiting(waited[0]):
            render.note(f"run {waited[0]} is still waiting: a serving process (brain serve or "
                        f"brain worker) on this database continues it once its wait ends "
                        f"(brain show {waited[0][:12]})")
            return 130
        raise
    if args.json:
        render.write_stdout(json_text(result.to_json_dict()) + "\n")
    else:
        render.run_summary(result)
    if result.status == "failed" and wf.failure_handlers:
        _say_handlers_queued(result.run_id, [h.name for h in wf.failure_handlers])
    return 0 if result.succeeded else 1


def _run_params(wf: Workflow, args: argparse.Namespace) -> dict[str, Any] | None:
    """``brain run``'s ``-p`` and ``--params`` (over what a ``--body`` JSON object gives with
    ``--event webhook``, as a delivery would), validated by the workflow (defaults applied);
    ``None`` (after one error line per field on stderr) when they do not validate."""
    from brain._errors import WorkflowInputError
    from brain.cli.params import raw_params

    base = dict(args.params or {})
    if args.event == "webhook" and args.body is not None:
        from brain.service.hooks import body_params

        base = {**body_params(args.body, wf.params_schema), **base}
    raw = raw_params(wf.params_schema, args.param, base)
    try:
        return wf.validate_params(raw)
    except WorkflowInputError as exc:
        for text in str(exc).splitlines():
            render.error(text)
        return None


def _still_waiting(run_id: str) -> bool:
    """Whether the run is ``waiting`` (left so by a Ctrl-C while ``brain run`` waited)."""
    return with_api(lambda api: api.run(run_id, with_steps=False)).status == "waiting"


def _say_handlers_queued(run_id: str, handlers: list[str]) -> None:
    """Tell whoever ran a failed run by hand that its ``on_failure`` handlers' runs were
    queued, and what executes them: they are not run here."""
    from brain.runner.queueing import failure_of

    async def find(api: BrainApi) -> list[RunResult]:
        found: list[RunResult] = []
        for name in dict.fromkeys(handlers):
            runs = await api.runs(workflow=name, event="failure", limit=50)
            found += [r for r in runs if (failure_of(r) or {}).get("run_id") == run_id]
        return found

    queued = with_api(find)
    if not queued:
        return
    listed = ", ".join(f"{r.workflow} ({r.run_id[:12]})" for r in queued)
    render.note(f"on_failure queued {render.plural(len(queued), 'handler run')}: {listed}; "
                f"a serving process (brain serve or brain worker) on this database executes "
                f"{'it' if len(queued) == 1 else 'them'}")


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


def cmd_graph(args: argparse.Namespace) -> int:
    """``brain graph``: a workflow's steps and edges, as text or Mermaid."""
    from brain.loader import load_target

    wf = load_target(args.target)
    graph = wf.graph
    if args.mermaid:
        render.write_stdout(render.mermaid(graph))
        return 0
    render.graph(wf)
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    """``brain runs``: recent runs, as a table or JSON."""
    if args.limit < 1:
        raise ValueError("--limit must be at least 1")
    if args.paths and not args.stale:
        raise ValueError("PATH is read with --stale only")
    if args.stale:
        return _stale_runs(args)
    results = with_api(lambda api: api.runs(workflow=args.workflow, status=args.status,
                                            limit=args.limit, parent=args.parent))
    if args.json:
        render.write_stdout(json_text([r.to_json_dict() for r in results]) + "\n")
    elif not results:  # say where: an unexpected database is the likely surprise
        from brain.store.urls import default_url, shown_database

        matching = "".join(f" --{k} {v}" for k, v in (("workflow", args.workflow),
                                                       ("status", args.status),
                                                       ("parent", args.parent)) if v)
        render.ok(f"no runs{' matching' + matching if matching else ''} in "
                  f"{shown_database(default_url())}")
    else:
        render.runs_table(results)
    return 0


def loaded_from(paths: list[str]) -> dict[str, Workflow]:
    """The workflows of ``paths`` (files or folders) by name; :class:`BrainError` when they
    hold none (a check against nothing would pass)."""
    from brain.loader import discover

    workflows = discover(paths)
    if not workflows:
        raise BrainError(f"no workflow in {' '.join(paths)} (a folder's *.py files, skipping "
                         "_*.py, test_*.py and conftest.py)")
    return workflows


def _stale_runs(args: argparse.Namespace) -> int:
    """``brain runs --stale [PATH...]``: the waiting runs the workflows of PATH, as loaded
    now, would fail when they continue (SPEC §24)."""
    workflows = loaded_from(args.paths or ["."])
    if args.workflow:
        workflows = {k: v for k, v in workflows.items() if k == args.workflow}
    found = with_api(lambda api: api.stale(workflows))
    if args.json:
        render.write_stdout(json_text([{**r.to_json_dict(), "stale": why}
                                       for r, why in found]) + "\n")
    elif not found:
        render.ok("no waiting run would fail on the workflows as loaded now")
    else:
        render.stale_table(found)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """``brain show``: one run and its steps, as text or JSON."""
    result = with_api(lambda api: api.run(args.run_id))
    if args.json:
        render.write_stdout(json_text(result.to_json_dict()) + "\n")
    else:
        show.run_detail(result)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    """``brain cancel``: ask a run to stop (exit 1 when it had already ended)."""
    result, was_active = with_api(lambda api: api.cancel(args.run_id))
    if not was_active:
        render.error(f"run {result.run_id} already ended ({result.status})")
        return 1
    render.ok(f"run {result.run_id} cancelled" if result.status == "cancelled"
              else f"run {result.run_id}: cancel requested; it stops within a second")
    return 0


def cmd_workers(args: argparse.Namespace) -> int:
    """``brain workers``: the executor processes sharing the database."""
    rows = with_api(lambda api: api.workers())
    if args.json:
        render.write_stdout(json_text(rows, indent=2) + "\n")
        return 0
    render.workers(rows)
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    """Queue a retry of a failed or cancelled run (``--from STEP``: of an ended run, from
    that step), unless another run retries it already (exit 1, naming that run, as the API
    answers 409). A step the workflow does not have is exit 2. A kept step that changed
    since: with ``PATH...`` (the workflow files as deployed), exit 2 and nothing queued;
    without, the retry fails when it is taken (SPEC §24)."""
    from brain._errors import WORKFLOW_CHANGED, RunConflict
    from brain.service.api import AlreadyRetried

    loaded = loaded_from(args.paths) if args.paths else None

    async def retry(api: BrainApi) -> tuple[str, str]:
        if loaded is not None:
            name = (await api.run(args.run_id, with_steps=False)).workflow
            if name not in loaded:
                raise BrainError(f"no workflow {name!r} (the run's) in {' '.join(args.paths)}: "
                                 "name the files that define it, as deployed")
        return await api.retry(args.run_id, from_step=args.from_step)

    try:
        new_id, _ = with_api(retry, loaded)
    except AlreadyRetried as exc:
        latest = exc.retried_by[:12]
        render.error(f"{exc} (brain retry {latest}); see it with brain show {latest}")
        return 1
    except RunConflict as exc:
        render.error(str(exc))
        return 2 if str(exc).startswith(WORKFLOW_CHANGED) else 1
    kept = ("the steps not downstream of it keep their outputs" if args.from_step
            else "steps that succeeded keep their outputs")
    render.ok(f"queued run {new_id}, a retry of {args.run_id}"
              f"{f' from step {args.from_step}' if args.from_step else ''}: a running "
              f"`brain serve` or `brain worker` executes it ({kept})")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    """Delete finished runs older than ``--older-than`` (or, ``--dry-run``, count them)."""
    from brain._clock import utcnow

    before = utcnow() - parse_age(args.older_than)
    if args.dry_run:
        count = in_store(lambda store: prunable_runs(store, before))
        render.ok(f"would delete {render.plural(count, 'finished run')} older than "
                  f"{args.older_than} (dry run: nothing was deleted)")
        return 0
    count = in_store(lambda store: store.prune(before))
    render.ok(f"deleted {render.plural(count, 'finished run')} older than {args.older_than}")
    return 0


async def prunable_runs(store: Store, before: datetime, page: int = 500) -> int:
    """How many runs ``store.prune(before)`` would delete: finished ones that ended before
    ``before``. Read page by page, with the store's own listing."""
    count = 0
    for status in ("succeeded", "failed", "cancelled"):
        offset = 0
        while True:
            runs = await store.list_runs(status=status, offset=offset, limit=page)
            count += sum(1 for r in runs if r.ended_at is not None and r.ended_at < before)
            if len(runs) < page:
                break
            offset += page
    return count


def cmd_db(args: argparse.Namespace) -> int:
    """``brain db upgrade``: create or upgrade the database schema."""
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
    """``brain mcp tools``: a server's tools and their input schemas; ``brain mcp serve``:
    The Brain's own MCP server over stdio."""
    from brain.executors.mcp_tools import list_tools

    if args.mcp_command == "serve":
        from brain.cli.serve import cmd_mcp_serve

        return cmd_mcp_serve(args)

    if args.url is None:
        tools = asyncio.run(list_tools(args.server))
    else:
        tools = asyncio.run(list_tools(url=args.url, headers=_headers(args),
                                       transport=args.transport))
    if args.json:
        render.write_stdout(json_text(tools) + "\n")
    else:
        render.tools(tools)
    return 0


def _headers(args: argparse.Namespace) -> dict[str, str]:
    """``--header 'Name: value'`` and ``--bearer-env VAR`` as request headers (the token and
    every header value are remembered as secrets, kept out of what is printed)."""
    from brain._secrets import remember
    from brain.dsl.mcp import header_value_fits

    headers: dict[str, str] = {}
    for item in args.header:
        name, colon, value = item.partition(":")
        if not colon or not name.strip() or any(c in name for c in " \t\r\n"):
            raise BrainError(f"--header must look like 'Name: value' (got {name.strip()!r}...)")
        value = value.strip()
        if not header_value_fits(value):
            raise BrainError(f"--header {name.strip()}: the value must be printable ASCII "
                             f"with no line breaks, of at most 8192 characters")
        headers[name.strip()] = value
        remember(value)
    if args.bearer_env:
        token = os.environ.get(args.bearer_env, "").strip()
        if not token:
            raise BrainError(f"--bearer-env: {args.bearer_env} is not set in the environment")
        remember(token)
        if any(not 32 <= ord(c) < 127 for c in token):
            raise BrainError(f"--bearer-env: the value of {args.bearer_env} must be printable "
                             f"ASCII with no line breaks")
        headers["Authorization"] = f"Bearer {token}"
    return headers


def cmd_serving(args: argparse.Namespace) -> int:
    """``brain serve`` and ``brain worker`` (their module loads only for them)."""
    from brain.cli import serve

    return serve.cmd_serve(args) if args.command == "serve" else serve.cmd_worker(args)


_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run, "check": cmd_check, "graph": cmd_graph, "runs": cmd_runs, "show": cmd_show,
    "cancel": cmd_cancel, "retry": cmd_retry, "workers": cmd_workers, "prune": cmd_prune,
    "db": cmd_db, "mcp": cmd_mcp, "logs": cmd_logs, "cache": cmd_cache,
    "serve": cmd_serving, "worker": cmd_serving, "approve": cmd_approve, "signal": cmd_signal,
}
