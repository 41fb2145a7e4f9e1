"""The ``brain`` command line. Exit codes: 0 success, 1 failed run, 2 bad usage or bad file."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import IO, Any

from brain._version import __version__
from brain.cli.params import param_option, params_option


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"brain: error: {message}\n")
        raise SystemExit(2)


#: The trigger events a run can have (SPEC §3, §14): what ``brain run --event`` takes.
EVENTS = ("manual", "schedule", "webhook", "file", "failure")
# An HTTP header name (RFC 9110's token).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Headers a webhook delivery never stores with its run (SPEC §5), so no run can read them.
_NEVER_STORED = ("authorization", "proxy-authorization", "cookie", "x-brain-signature",
                 "x-hub-signature-256", "x-hub-signature")


def header(text: str) -> tuple[str, str]:
    """``--header 'Name: value'`` as ``(name, value)``; anything else is a usage error.

    >>> header("X-GitHub-Event: push")
    ('X-GitHub-Event', 'push')
    """
    name, colon, value = text.partition(":")
    if not colon or not _HEADER_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a header: write it as 'Name: value', e.g. 'X-GitHub-Event: push' "
            "(a name of letters, digits and -, then a colon)")
    value = value.strip(" \t")
    if any(c in value for c in "\r\n\0"):
        raise argparse.ArgumentTypeError(f"header {name}: a value is one line of text")
    if name.lower() in _NEVER_STORED:
        raise argparse.ArgumentTypeError(
            f"header {name}: a webhook run never keeps Authorization, Cookie or signature "
            "headers, so no workflow can read them")
    return name, value


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``15m``, ``45s`` or ``2w`` as a time span (``--older-than``)."""
    m = _AGE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"bad age {text!r}: use a number and a unit, e.g. 30d, 12h, 15m, 45s, 2w")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def _age_text(text: str) -> str:
    """``--older-than``'s value, checked while parsing (a bad one is a usage error)."""
    parse_age(text)
    return text


def run_trigger(args: argparse.Namespace) -> object:
    """What ``brain run``'s options give a run as its trigger: the body alone for a plain
    manual run, else every field (``--event``, ``--header``, ``--path``) as a webhook, a
    schedule or a watcher would have given it."""
    if args.event == "manual" and not args.header and args.path is None:
        return args.body
    return {"event": args.event, "body": args.body, "headers": dict(args.header),
            "path": None if args.path is None else os.path.abspath(args.path)}


class _Once(argparse.Action):
    """An option that may be given once (given twice, which one was meant is unclear)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} may be given once")
        setattr(namespace, self.dest, values)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = _Parser(prog="brain", description="The Brain: workflows as Python functions.")
    parser.add_argument("--version", action="version", version=f"brain {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _workflow_commands(sub)
    _serving_commands(sub)
    _run_commands(sub)
    _tool_commands(sub)
    return parser


def _workflow_commands(sub: Any) -> None:
    """``run``, ``check``, ``graph``: commands about workflow files."""
    p = sub.add_parser("run", help="run a workflow now, with live step progress")
    p.add_argument("target", metavar="PATH[:WORKFLOW]",
                   help="a workflow file, or a folder holding one workflow (or named by :WORKFLOW)")
    p.add_argument("-p", "--param", type=param_option, action="append", default=[],
                   metavar="NAME=VALUE",
                   help="a parameter of the workflow; the value is JSON when the parameter is "
                        "not a str and it parses as JSON, else text; repeat for more")
    p.add_argument("--params", type=params_option, default=None, metavar="JSON",
                   help="the parameters as a JSON object (-p overrides its keys)")
    p.add_argument("--body", default=None, help="the trigger body ({trigger.body})")
    p.add_argument("--event", choices=EVENTS, default="manual",
                   help="the trigger event ({trigger.event}); default manual")
    p.add_argument("--header", type=header, action="append", default=[], metavar="'NAME: VALUE'",
                   help="a trigger header ({trigger.headers.NAME}), as a webhook delivers it; "
                        "repeat for more")
    p.add_argument("--path", default=None, help="the trigger path ({trigger.path}), as a file "
                                                "watcher gives it")
    p.add_argument("--json", action="store_true", help="print only the run as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="do not print the lines steps write (STEP | TEXT, on stderr)")

    p = sub.add_parser("check", help="trace and validate workflow files (or folders of them)")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="workflow files or folders (default: .)")
    p.add_argument("--json", action="store_true",
                   help="print the workflows as JSON: name, file, description, steps, "
                        "triggers, params_schema and output_schema")

    p = sub.add_parser("graph", help="show a workflow's steps and edges")
    p.add_argument("target", metavar="PATH[:WORKFLOW]",
                   help="a workflow file, or a folder holding one workflow (or named by :WORKFLOW)")
    p.add_argument("--mermaid", action="store_true", help="print a Mermaid flowchart")


def _serving_commands(sub: Any) -> None:
    """``serve`` and ``worker``: processes that execute queued runs."""
    p = sub.add_parser("serve", help="API, web page, schedules, webhooks, watchers and executors")
    p.add_argument("paths", nargs="*", metavar="PATH", help="workflow files or folders (default: .)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--concurrency", type=int, default=None,
                   help="runs executed at once by this process (BRAIN_CONCURRENCY, default 4)")
    p.add_argument("--reload", action="store_true", help="reload workflow files when they change")

    p = sub.add_parser("worker", help="execute queued runs only (no HTTP, no triggers)")
    p.add_argument("paths", nargs="*", metavar="PATH", help="workflow files or folders (default: .)")
    p.add_argument("--concurrency", type=int, default=None)


def _run_commands(sub: Any) -> None:
    """``runs``, ``show``, ``cancel``, ``workers``, ``retry``, ``prune``: the record."""
    p = sub.add_parser("runs", help="list recent runs")
    p.add_argument("--workflow", default=None)
    p.add_argument("--status", default=None,
                   choices=["queued", "running", "waiting", "succeeded", "failed", "cancelled"])
    p.add_argument("--parent", default=None, metavar="RUN_ID",
                   help="only the child runs of this run (an id or a unique prefix)")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--json", action="store_true")
    p.add_argument("--stale", action="store_true",
                   help="only the waiting runs that the workflows in PATH (as loaded now) "
                        "would fail when they continue, with the step that changed")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="with --stale: workflow files or folders (default: the current one)")

    p = sub.add_parser("show", help="show one run and its steps (a unique id prefix will do)")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--json", action="store_true")

    from brain.cli.follow import add_parser as add_logs_parser

    add_logs_parser(sub)

    p = sub.add_parser("cancel", help="ask a run to stop")
    p.add_argument("run_id", metavar="RUN_ID")

    p = sub.add_parser("approve", help="approve (or --reject) a step waiting for a decision")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("step", metavar="STEP")
    p.add_argument("--reject", action="store_true", help="reject instead of approving")
    p.add_argument("--comment", default=None, metavar="TEXT", help="why, kept with the decision")

    p = sub.add_parser("signal", help="send a signal: the steps waiting for it (with the same "
                                      "key) continue")
    p.add_argument("signal", metavar="SIGNAL")
    p.add_argument("--key", default=None, metavar="K",
                   help="only steps waiting with this key (none: those waiting without one)")
    p.add_argument("--body", default="", metavar="TEXT",
                   help="the output of the steps that continue")
    p.add_argument("--json", action="store_true", help="print the steps it continued as JSON")

    p = sub.add_parser("workers", help="the executor processes sharing the database")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("retry", help="queue a failed or cancelled run again: steps that "
                                     "succeeded keep their outputs, the others run")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="the workflow files or folders as deployed: refuse the retry now "
                        "when a step it keeps changed since (default: load none)")
    p.add_argument("--from", dest="from_step", metavar="STEP", action=_Once,
                   help="run STEP and every step downstream of it again (on the current "
                        "definition); the others keep their outputs")

    p = sub.add_parser("prune", help="delete finished runs older than AGE (e.g. 30d, 12h)")
    p.add_argument("--older-than", required=True, metavar="AGE", type=_age_text)
    p.add_argument("--dry-run", action="store_true",
                   help="only say how many runs would be deleted; delete nothing")


def _tool_commands(sub: Any) -> None:
    """``mcp tools``, ``cache clear`` and ``db upgrade``."""
    p = sub.add_parser("mcp", help="MCP servers")
    mcpsub = p.add_subparsers(dest="mcp_command", metavar="ACTION", parser_class=_Parser)
    t = mcpsub.add_parser("tools", help="list a server's tools and their input schemas",
                          usage="brain mcp tools [--json] -- COMMAND [ARG...]\n"
                                "       brain mcp tools [--json] --url URL [--header 'Name: "
                                "value' ...] [--bearer-env VAR] [--transport sse]")
    t.add_argument("--json", action="store_true", help="print the tools as JSON")
    t.add_argument("--url", help="a server reached over HTTP instead of a command")
    t.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                   help="an HTTP header to send (repeatable; with --url)")
    t.add_argument("--bearer-env", metavar="VAR",
                   help="send Authorization: Bearer with the value of this variable")
    t.add_argument("--transport", choices=("streamable-http", "sse"), default="streamable-http",
                   help="the HTTP transport (default: streamable-http)")
    t.add_argument("server", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG...]")
    m = mcpsub.add_parser("serve", help="serve the mcp=True workflows as MCP tools over stdio",
                          description="Serve the workflows declared @workflow(mcp=True) as MCP "
                                      "tools over stdin/stdout (for desktop clients), recording "
                                      "and executing their runs in BRAIN_DATABASE_URL.")
    m.add_argument("paths", nargs="*", metavar="PATH",
                   help="workflow files or folders (default: the current folder)")

    p = sub.add_parser("cache", help="cached steps' entries (cache= on a step)")
    cachesub = p.add_subparsers(dest="cache_command", metavar="ACTION", parser_class=_Parser)
    c = cachesub.add_parser("clear", help="delete cached outputs: all, a workflow's, or a step's")
    c.add_argument("--workflow", metavar="W", help="only this workflow's entries")
    c.add_argument("--step", metavar="S", help="only this step's entries (with --workflow)")

    p = sub.add_parser("db", help="database schema")
    dbsub = p.add_subparsers(dest="db_command", metavar="ACTION", parser_class=_Parser)
    dbsub.add_parser("upgrade", help="create or upgrade the schema to this version")


def silence(stream: IO[str]) -> None:
    """Point ``stream``'s descriptor at /dev/null: its reader has gone (``| head``), so
    nothing more written to it, the interpreter's last flush included, can fail."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # not a real file (a test's capture): nothing to redirect
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


_collecting = False  # whether the cyclic garbage collector was on when main() began


def settle() -> None:
    """Start-up is over: the command's own work begins (a run's steps, a server's loop).

    Start-up (imports, tracing workflow files) makes objects that live as long as the
    process, and hardly any garbage; so :func:`main` turns the cyclic garbage collector
    off for it, and here moves what it made out of the collector's sight for good
    (``gc.freeze``) before turning it back on: later collections, the interpreter's last
    one at exit included, walk only what the work makes. For a one-step ``brain run``
    that is about a quarter of its time. Safe to call more than once.
    """
    if _collecting and not gc.isenabled():
        gc.freeze()
        gc.enable()


class _ScrubbedLastResort(logging.Handler):
    """What a library logs when nothing configured logging (every command but ``serve`` and
    ``worker``, which set up their own): to stderr from WARNING, as Python's last resort
    would, but with known secrets as ``***`` (a server's error may quote a token)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        from brain._secrets import scrub

        try:
            sys.stderr.write((scrub(self.format(record)) or "") + "\n")
        except Exception:  # a closed stderr: nothing to tell
            self.handleError(record)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``brain`` console script.

    Output into a closed pipe (``brain runs --json | head -1``) ends the command
    quietly with its normal exit code: no ``BrokenPipeError`` traceback.
    """
    global _collecting
    logging.lastResort = _ScrubbedLastResort()
    _collecting = gc.isenabled()
    gc.disable()  # until settle()
    code: int | str | None = 0
    for name in ("stdout", "stderr"):  # started with a closed descriptor (``>&-``)
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))
    try:
        try:
            code = _main(argv)
        except SystemExit as exc:  # argparse's --help, --version and usage errors
            code = exc.code
        sys.stdout.flush()  # here, where a closed pipe can still be handled
    except BrokenPipeError:
        silence(sys.stdout)
    finally:
        if _collecting:
            gc.enable()
    raise SystemExit(code)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and isinstance(getattr(args, "paths", None), list):
        # ``brain retry RUN --from STEP PATH``: PATHs after an option (after ``--``, any word)
        dashes = extra[0] == "--"
        if dashes or not any(e.startswith("-") for e in extra):
            args.paths += extra[1:] if dashes else extra
            extra = []
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help(sys.stderr)
        raise SystemExit(2)
    if args.command == "db" and args.db_command is None:
        parser.error("brain db needs an action: upgrade")
    if args.command == "cache":
        if args.cache_command is None:
            parser.error("brain cache needs an action: clear")
        if args.step is not None and args.workflow is None:
            parser.error("--step needs --workflow (a step's name is its workflow's)")
    if args.command == "mcp":
        if args.mcp_command is None:
            parser.error("brain mcp needs an action: tools, serve")
    if args.command == "mcp" and args.mcp_command == "tools":
        if args.server and args.server[0] == "--":
            args.server = args.server[1:]
        if args.url is not None and args.server:
            parser.error("give --url or a server command after --, not both")
        if args.url is None and (args.header or args.bearer_env):
            parser.error("--header and --bearer-env go with --url")
        if not args.server and args.url is None:
            parser.error("brain mcp tools needs the server command after --, e.g. "
                         "brain mcp tools -- uvx mcp-server-time, or --url URL")
    from brain.cli import commands

    return commands.dispatch(args)
