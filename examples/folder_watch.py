"""Count the lines of files dropped into examples/inbox/, as they arrive.

    brain serve examples/                  # then: seq 5 > examples/inbox/numbers.txt
    brain run examples/folder_watch.py     # by hand: the same report, for what is there now

A watcher on the `inbox` folder next to this file (a relative watch path is
relative to the workflow file's folder) starts a run when a .txt, .csv, .md or
.log file is created or changed there. Events are debounced per file: a file
written in chunks starts one run, half a second after its last write.

The step reports every matching file in the inbox with its line count, the
newest one first, so the file that fired is at the top. A file run also has
`{trigger.path}` (the file's absolute path) and `{trigger.body}` (the event:
"created" or "modified"); to handle exactly that file, give them to a step:

    @step
    def count_one(path: str) -> str:
        with open(path, "rb") as handle:
            return str(sum(1 for _ in handle))

    ... count_one(trigger.path)

A manual run has no path, though, and a step given `{trigger.path}` then fails,
naming it. This example reads the folder instead, so `brain run` works too.
"""

from pathlib import Path

from brain import step, trigger, watch, workflow

INBOX = Path(__file__).resolve().parent / "inbox"
PATTERNS = ["*.txt", "*.csv", "*.md", "*.log"]


@step
def count_lines(event: str) -> str:
    """Each matching file in the inbox with its line count, newest first."""
    files = sorted((p for pattern in PATTERNS for p in INBOX.glob(pattern) if p.is_file()),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    if not files:
        return f"{event}: the inbox {INBOX} has no {', '.join(PATTERNS)} files"
    lines = [f"{event}: {len(files)} file{'s' if len(files) != 1 else ''} in {INBOX}"]
    for path in files:
        with path.open("rb") as handle:
            count = sum(1 for _ in handle)
        lines.append(f"{count:8d}  {path.name}")
    return "\n".join(lines)


@workflow(triggers=[watch("inbox", patterns=PATTERNS, debounce_seconds=0.5)])
def folder_watch():
    """One report per settled file event in the inbox."""
    # {trigger.event} is "file" for a watcher's run, "manual" for `brain run`.
    count_lines(trigger.event)
