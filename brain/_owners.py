"""Lease owners: ``host+place:pid:random`` ids, and whether the process behind one is gone.

``place`` tells apart machines and containers that share a host name (cloned
virtual machines, containers with the host's network): a process id means
something only inside one boot of one machine and one process namespace.

This module imports nothing of The Brain.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
import uuid


@functools.cache
def _place() -> str:
    """This boot of this machine, and this process namespace, as 8 hex digits."""
    parts = []
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            parts.append(f.read().strip())
    except OSError:
        parts.append(uuid.uuid4().hex)  # unknown: nobody else can claim to be this place
    try:
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    except OSError:
        parts.append(uuid.uuid4().hex)
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:8]


def this_machine() -> str:
    """Where this process runs, as ``host+place``: the host name, and this boot of this
    machine in this process namespace. A process id or group recorded under another value
    (another machine, a reboot since, another container) means nothing here."""
    return f"{socket.gethostname()}+{_place()}"


def new_owner() -> str:
    """A lease owner id for this process: where it runs, its pid and a random part."""
    return f"{this_machine()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def local_owner_gone(owner: str | None) -> bool:
    """Whether ``owner`` names a process of this machine (this boot, this process
    namespace) that no longer runs.

    A zombie (exited, not yet reaped by its parent) counts as gone. An owner
    of another machine or container, or one that cannot be read, is not judged
    here: only its lease running out says it is gone.
    """
    parts = (owner or "").split(":")
    if len(parts) != 3 or parts[0] != this_machine() or not parts[1].isdigit():
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
