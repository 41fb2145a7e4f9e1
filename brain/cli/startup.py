"""Start-up checks of the commands.

- Started as root, they warn in one line (SPEC §11): the wall that keeps steps out of
  the orchestrator's environment and memory (:func:`brain._secrets.make_undumpable`)
  does not hold against root.
- Commands that only read the record (``runs``, ``show``, ``logs``, ``workers``,
  ``prune --dry-run``) never create a database, file or tables: finding none, they say
  which one they looked for and stop (exit 2).
- ``serve`` and ``worker`` hold an exclusive lock on ``FILE.lock`` next to their SQLite
  file while they run (SPEC §4), so a second serving process on the same file stops at
  once, naming the first; other commands (``run``, ``runs``, ``show``...) do not take it.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator

from brain._errors import BrainError

ROOT_WARNING = ("running as root: steps run as this user and can read the orchestrator's "
                "secrets (its environment and memory); run The Brain as a dedicated "
                "unprivileged user")

#: How long a second process waits for the first to write its pid into the lock file.
_PID_WAIT_SECONDS = 2.0


def root_warning() -> str | None:
    """The one-line warning to give at start-up when running as root, else ``None``."""
    geteuid = getattr(os, "geteuid", None)
    return ROOT_WARNING if geteuid is not None and geteuid() == 0 else None


#: The commands that only read the database (``prune`` too, with ``--dry-run``).
READ_ONLY_COMMANDS = frozenset({"runs", "show", "logs", "workers"})


def only_reads(args: argparse.Namespace) -> bool:
    """Whether the command ``args`` asks for only reads the database."""
    return args.command in READ_ONLY_COMMANDS or (args.command == "prune" and args.dry_run)


def require_database(url: str | None = None) -> None:
    """Raise :class:`BrainError` naming the database looked for when there is none to read
    at ``url`` (default: ``BRAIN_DATABASE_URL``'s): a read creates nothing."""
    from brain.store.urls import default_url, missing_database

    problem = missing_database(url or default_url())
    if problem:
        raise BrainError(problem)


def sqlite_file(url: str) -> str | None:
    """The SQLite database file ``url`` names, as an absolute path; ``None`` for an
    in-memory SQLite database, PostgreSQL, or a URL that is not one (the store says why)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database
    if not database or database == ":memory:" or parsed.query.get("mode") == "memory":
        return None
    return os.path.realpath(database.removeprefix("file:"))


@contextlib.contextmanager
def serving_lock(url: str, kind: str) -> Iterator[None]:
    """Hold ``FILE.lock`` (``FILE`` the SQLite database of ``url``) for the block; raise
    :class:`BrainError` naming the process that holds it already. No lock for PostgreSQL,
    where any number of processes may serve.

    The lock is ``flock``'s: the kernel drops it when the process ends, however it ends
    (``kill -9`` included), so a stale file never blocks a restart. The file holds the
    holder's pid and kind; it is left in place (removing it would race a starting process).
    """
    database = sqlite_file(url)
    if database is None:
        yield
        return
    path = database + ".lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise BrainError(f"cannot create the lock file {path}: {exc.strerror or exc}; the "
                         f"database's folder must be writable") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise BrainError(f"cannot lock {path}: {exc.strerror or exc}") from None
            holder = _holder(fd)
            raise BrainError(f"{holder} already serves the database {database}: one brain serve "
                             f"or brain worker per SQLite file; stop it first, or use "
                             f"PostgreSQL to run several") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {kind}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    """``brain serve (pid 123)`` from the lock file; the holder writes it just after taking
    the lock, so a process that lost the race by a moment waits for it briefly."""
    deadline = time.monotonic() + _PID_WAIT_SECONDS
    while True:
        text = os.pread(fd, 100, 0).decode("ascii", "replace")
        words = text.split()
        if text.endswith("\n") and len(words) == 2 and words[0].isdigit():
            return f"brain {words[1]} (pid {words[0]})"
        if time.monotonic() > deadline:
            return "another brain serve or brain worker (pid unknown)"
        time.sleep(0.05)
