"""Whether the process named by a lease owner id (``host:pid:random``) is gone.

Shared by ``request_cancel`` (a run nobody executes any more is cancelled at
once) and anything else that must tell a dead local executor from a live one.
"""

from __future__ import annotations

import os
import socket


def owner_process_gone(owner: str | None) -> bool:
    """``True`` when ``owner`` is a lease owner id of a process on this machine that no
    longer runs (exited, or a zombie nobody reaped).

    An owner on another host, or an id not of the form ``host:pid:random``,
    cannot be judged here: ``False`` (only its lease expiry tells).
    """
    parts = (owner or "").split(":")
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid <= 0:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, under another user
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """Whether ``/proc/PID/stat`` says the process is a zombie (it has exited; its parent
    has not reaped it yet). Without ``/proc`` it counts as alive."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return True  # gone between the kill() check and now
    except OSError:
        return False
    # The command name is in parentheses and may itself hold spaces or ")": the state
    # is the first field after the last ")".
    fields = stat[stat.rfind(b")") + 2:].split()
    return bool(fields) and fields[0] in (b"Z", b"X")
