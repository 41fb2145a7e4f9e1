"""Process groups: signal them, tell whether anything in one still lives, end them."""

from __future__ import annotations

import asyncio
import os
import signal

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
