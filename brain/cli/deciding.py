"""``brain approve`` and ``brain signal``: ending the waits of waiting steps (SPEC §16);
and ``brain cache clear`` (SPEC §26).

Each writes to the database (``BRAIN_DATABASE_URL``), committed before it says so; for the
first two, a serving process (``brain serve``, ``brain worker``) or the ``brain run``
waiting in the foreground continues the run.
"""

from __future__ import annotations

import argparse
import json

from brain._errors import RunConflict
from brain.cli import render


def cmd_approve(args: argparse.Namespace) -> int:
    """Approve or reject a waiting ``approval`` step; exit 1 when it is not waiting (or was
    decided already)."""
    from brain.cli.commands import with_api

    approved = not args.reject
    try:
        decision = with_api(lambda api: api.decide(args.run_id, args.step, approved=approved,
                                                   comment=args.comment, by="cli"))
    except RunConflict as exc:
        render.error(str(exc))
        return 1
    verdict = "approved" if decision["approved"] else "rejected"
    render.ok(f"step {args.step!r} of run {args.run_id} {verdict}: the run continues")
    return 0


def cmd_signal(args: argparse.Namespace) -> int:
    """Send a signal; print the steps it continued (as JSON lines with ``--json``)."""
    from brain.cli.commands import with_api
    from brain.service.api import BrainApi

    BrainApi.check_signal(args.signal, args.body)  # before the database is opened
    resumed = with_api(lambda api: api.signal(args.signal, args.key, args.body, by="cli"))
    if args.json:
        render.write_stdout(json.dumps({"resumed": [{"run_id": r, "step": s}
                                                    for r, s in resumed]}) + "\n")
        return 0
    if not resumed:
        key = "" if args.key is None else f" with key {args.key!r}"
        render.note(f"no step was waiting for signal {args.signal!r}{key}")
        return 0
    for run_id, step in resumed:
        render.ok(f"step {step!r} of run {run_id} continues")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    """``brain cache clear [--workflow W] [--step S]``: delete cached steps' entries."""
    from brain.cli.commands import with_api

    count = with_api(lambda api: api.clear_cache(args.workflow, args.step))
    where = ("" if args.workflow is None else f" of workflow {args.workflow!r}"
             if args.step is None else f" of step {args.step!r} of workflow {args.workflow!r}")
    render.ok(f"cleared {render.plural(count, 'cached output')}{where}")
    return 0
