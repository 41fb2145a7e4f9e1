"""A small MCP server for the examples: one tool, ``recall(query, limit)``, over a few notes.

Written with the MCP Python SDK's server side (``MCPServer``, what FastMCP is called since
mcp 2). The SDK is installed with The Brain, so this runs wherever The Brain does, with the
same Python (the virtualenv's, here):

    brain mcp tools -- .venv/bin/python examples/servers/notes.py   # its tool and arguments

``recall`` answers with the notes that share the most words with the query, best first
(one text block per note), or with the first ``limit`` notes when the query is empty.
The notes are the ones below; with ``NOTES_FILE`` set (an ``env=`` of the step), they are
that text file's paragraphs instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mcp.server import MCPServer

SAMPLE_NOTES = [
    "db outage, 3 Nov: the primary PostgreSQL ran out of disk because WAL archiving had "
    "stalled for two days; failover to the replica took 4 minutes.",
    "db outage follow-up: alert on WAL archive lag over 15 minutes, and keep 30% disk free "
    "on database hosts.",
    "deploy freeze from 20 Dec to 6 Jan; only security fixes, each approved by two people.",
    "The nightly backup job moved from 02:00 to 03:30 UTC so it no longer overlaps the "
    "batch import.",
    "On-call handover is Monday 10:00 Bucharest time, in the #ops channel.",
    "TLS certificates renew automatically 30 days before they expire; the check runs daily.",
]

app = MCPServer("brain-example-notes")


def _notes() -> list[str]:
    """The notes to search: NOTES_FILE's paragraphs when it is set, else the samples."""
    path = os.environ.get("NOTES_FILE")
    if not path:
        return SAMPLE_NOTES
    text = Path(path).read_text(encoding="utf-8")
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


@app.tool()
def recall(query: str = "", limit: int = 10) -> list[str]:
    """The notes that share the most words with `query`, best first (at most `limit`)."""
    notes = _notes()
    wanted = _words(query)
    if not wanted:
        return notes[:limit]
    scored = [(len(wanted & _words(note)), i) for i, note in enumerate(notes)]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))
    return [notes[i] for _, i in best[:limit]]


if __name__ == "__main__":
    app.run()
