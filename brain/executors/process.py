"""Process groups: signal them, tell whether anything in one still lives, end them; and
find again, after a crash or a freeze, the groups a step started."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterable

from brain.executors.base import RUN_ID_VARIABLE, ProcessGroup, StepContext

KILL_GRACE_SECONDS = 2.0
#: How long ending a previous try's groups waits for them to be gone (a process in an
#: uninterruptible sleep dies only when it wakes).
END_WAIT_SECONDS = 10.0


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal the process group; ``False`` when it no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def _stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (the state first, which is
    field 3), or ``None`` when the process is gone or cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces or parentheses itself.
    return stat[stat.rfind(b")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (field 22 of
    ``/proc/PID/stat``), a zombie included; ``None`` when it is gone or unreadable."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def live_groups(pgids: Iterable[int]) -> set[int]:
    """Those of ``pgids`` in which a live (non-zombie) process remains (one look at /proc)."""
    wanted = set(pgids)
    if not wanted:
        return set()
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc: fall back to "the group exists", zombies included
        found = set()
        for pgid in wanted:
            try:
                os.killpg(pgid, 0)
            except OSError:
                continue
            found.add(pgid)
        return found
    alive: set[int] = set()
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is None or len(fields) < 3 or fields[0] == b"Z":
            continue
        pgid = int(fields[2])
        if pgid in wanted:
            alive.add(pgid)
            if alive == wanted:
                break
    return alive


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process remains in group ``pgid``."""
    return bool(live_groups([pgid]))


async def announce_group(ctx: StepContext, pid: int) -> None:
    """Tell the runner (``ctx.on_process``) that the step has just started process ``pid``
    as the leader of a group of its own, and wait until the runner has recorded it. Called
    at once after the start, while the process waits at its gate (:data:`GATE`) and so
    cannot have exited: its start time is read now."""
    if ctx.on_process is None:
        return
    started = start_ticks(pid)
    if started is not None:  # else it is gone already: nothing to end later
        # Shielded: a cancel here leaves the gate closed, but never cuts the record short.
        await asyncio.shield(ctx.on_process(ProcessGroup(pid, started)))


#: ``/bin/sh -c GATE brain-step PROGRAM ARGS...`` waits for a first line on its standard
#: input, then runs the program in its place (same pid, same start time) with the rest of
#: that input: the step does nothing before its process group is recorded, so a resume can
#: always find it. If the orchestrator dies first, the gate reads the end and the program
#: never runs. (``read`` takes no byte past the line from a pipe.)
GATE = 'IFS= read -r _ || exit 125; exec "$@"'


def gated(argv: list[str]) -> list[str]:
    """``argv`` behind :data:`GATE`."""
    return ["/bin/sh", "-c", GATE, "brain-step", *argv]


def open_gate(fd: int, go: bool) -> None:
    """Let the gated program run (``go``), or make it exit without running; either way
    close the gate's write end."""
    try:
        if go:
            os.write(fd, b"\n")
    except OSError:
        pass  # it has gone already
    finally:
        os.close(fd)


def still_runs(group: ProcessGroup) -> bool:
    """Whether ``group`` (as a step started it) still has a process: its leader, with the
    same pid and start time (a zombie included, which keeps its pid), or, once the leader
    has gone, a member that started after it. Linux gives no process a pid that is still a
    group's id, so while a member lives the id cannot name another group; and a pid given
    to another process since never matches the start time."""
    leader = start_ticks(group.pgid)
    if leader is not None:
        return leader == group.started
    try:
        entries = os.listdir("/proc")
    except OSError:
        return False
    for entry in entries:
        fields = _stat_fields(entry) if entry.isdigit() else None
        if fields is None or len(fields) < 20 or fields[0] == b"Z":
            continue
        if int(fields[2]) == group.pgid and int(fields[19]) >= group.started:
            return True
    return False


def run_process_groups(run_id: str) -> set[int]:
    """The process groups of every local process marked as ``run_id``'s (``BRAIN_RUN_ID``
    in its environment). Only a net under the groups the runner recorded: a step may
    drop its environment (``env -i``)."""
    if not run_id:
        return set()
    marker = f"{RUN_ID_VARIABLE}={run_id}".encode()
    own = {os.getpid(), os.getpgid(0)}
    groups: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
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
    return groups


async def end_groups(pgids: Iterable[int], seconds: float = END_WAIT_SECONDS) -> set[int]:
    """SIGKILL the process groups, then wait (up to ``seconds``) until nothing in them
    lives, so that what comes next never runs beside them. This process's own group is
    never touched. Returns the groups that were signalled."""
    own = {os.getpid(), os.getpgid(0)}
    signalled = {pgid for pgid in set(pgids) - own
                 if pgid > 1 and signal_group(pgid, signal.SIGKILL)}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while live_groups(signalled) and loop.time() < deadline:  # noqa: ASYNC110 - polls /proc
        await asyncio.sleep(0.02)
    return signalled


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
