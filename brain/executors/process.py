"""Process groups: signal them, tell whether anything in one still lives, end them."""

from __future__ import annotations

import asyncio
import os
import signal

from brain.executors.base import RUN_ID_VARIABLE

KILL_GRACE_SECONDS = 2.0


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal the process group; ``False`` when it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process remains in group ``pgid``."""
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc: fall back to "the group exists", zombies included
        try:
            os.killpg(pgid, 0)
        except OSError:
            return False
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            return True
    return False


def kill_run_processes(run_id: str) -> int:
    """SIGKILL the process groups of every local process marked as ``run_id``'s
    (``BRAIN_RUN_ID`` in its environment): what a dead or frozen executor of this
    machine left running, before the run's steps run again. Returns how many groups."""
    if not run_id:
        return 0
    marker = f"{RUN_ID_VARIABLE}={run_id}".encode()
    own = {os.getpid(), os.getpgid(0)}
    groups: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit() or int(entry) in own:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            pgid = os.getpgid(int(entry))
        except (OSError, ProcessLookupError):
            continue
        if marker in environ and pgid not in own:
            groups.add(pgid)
    for pgid in groups:
        signal_group(pgid, signal.SIGKILL)
    return len(groups)


async def kill_group(pgid: int, grace: float = KILL_GRACE_SECONDS) -> None:
    """SIGTERM the group; SIGKILL whatever is still alive after ``grace`` seconds."""
    if not signal_group(pgid, signal.SIGTERM):
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while group_alive(pgid) and loop.time() < deadline:  # noqa: ASYNC110 - polls /proc
        await asyncio.sleep(0.02)
    if group_alive(pgid):
        signal_group(pgid, signal.SIGKILL)
