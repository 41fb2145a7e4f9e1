"""Lease owners: ``host:pid:random`` ids, and whether the process behind one is gone.

This module imports nothing of The Brain.
"""

from __future__ import annotations

import os
import socket
import uuid


def new_owner() -> str:
    """A lease owner id for this process: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def local_owner_gone(owner: str | None) -> bool:
    """Whether ``owner`` names a process of this machine that no longer runs.

    A zombie (exited, not yet reaped by its parent) counts as gone. An owner
    of another machine, or one that cannot be read, is not judged here: only
    its lease running out says it is gone.
    """
    parts = (owner or "").split(":")
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, under another user
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return False
    # The state follows the command name, which is in parentheses and may hold spaces.
    state = stat.rpartition(")")[2].split()[:1]
    return state == ["Z"]
