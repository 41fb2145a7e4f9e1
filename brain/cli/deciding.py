"""``brain approve`` and ``brain signal``: ending the waits of waiting steps (SPEC §16).

Both write to the database (``BRAIN_DATABASE_URL``), committed before they say so; a
serving process (``brain serve``, ``brain worker``) or the ``brain run`` waiting in the
foreground continues the run.
"""

from __future__ import annotations

import argparse
import json

from brain._errors import RunConflict
from brain.cli import render
from brain.dsl.waits import SIGNAL_NAME, SIGNAL_NAME_RULE

#: The largest signal body taken (as a webhook's or the API's body).
MAX_SIGNAL_BODY = 1024 * 1024


def cmd_approve(args: argparse.Namespace) -> int:
    """Approve or reject a waiting ``approval`` step; exit 1 when it is not waiting (or was
    decided already)."""
    from brain.cli.commands import in_store

    approved = not args.reject
    try:
        decision = in_store(lambda store: store.decide(args.run_id, args.step, approved=approved,
                                                      comment=args.comment, by="cli"))
    except RunConflict as exc:
        render.error(str(exc))
        return 1
    verdict = "approved" if decision["approved"] else "rejected"
    render.ok(f"step {args.step!r} of run {args.run_id} {verdict}: the run continues")
    return 0


def cmd_signal(args: argparse.Namespace) -> int:
    """Send a signal; print the steps it continued (as JSON lines with ``--json``)."""
    from brain.cli.commands import in_store

    if len(args.body.encode("utf-8", "surrogatepass")) > MAX_SIGNAL_BODY:
        raise ValueError(f"--body is larger than {MAX_SIGNAL_BODY // 1024 // 1024} MiB")
    if not SIGNAL_NAME.match(args.signal):
        raise ValueError(f"bad signal name {args.signal!r}: {SIGNAL_NAME_RULE}")
    resumed = in_store(lambda store: store.send_signal(args.signal, args.key, args.body,
                                                       by="cli"))
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
