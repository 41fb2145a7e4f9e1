"""Every secret value this process knows, and the one scrubber applied to what is stored.

A secret read for one step must not show up in another step's output (a step
that runs ``env``, a log it prints): so the values are remembered process-wide
as they are read, and everything the runner records passes through
:func:`scrub`. Values shorter than :data:`MIN_SECRET_LENGTH` are refused where
they are read: replacing a one-letter secret would mangle every text and give
the secret away by the holes it leaves.

This module imports nothing of The Brain.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from collections.abc import Iterable

MIN_SECRET_LENGTH = 8
REDACTED = "***"

_lock = threading.Lock()
_values: set[str] = set()
_pattern: re.Pattern[str] | None = None
_made_undumpable = False


def remember(value: str | None) -> None:
    """Add a secret value to those scrubbed from everything stored (short ones ignored)."""
    global _pattern
    if not value or len(value) < MIN_SECRET_LENGTH or value in _values:
        return
    with _lock:
        _values.add(value)
        # Longest first, so a secret that contains another is replaced whole.
        ordered = sorted(_values, key=len, reverse=True)
        _pattern = re.compile("|".join(re.escape(v) for v in ordered))


def remember_environment(names: Iterable[str]) -> None:
    """Remember the values of these environment variables (the ones that are set)."""
    for name in names:
        remember(os.environ.get(name))


def scrub(text: str | None, extra: Iterable[str] = ()) -> str | None:
    """``text`` with every known secret value (and each of ``extra``) replaced by ``***``."""
    if not text:
        return text
    for value in extra:
        remember(value)
    pattern = _pattern
    if pattern is None:
        return text
    return pattern.sub(REDACTED, text)


def known_count() -> int:
    """How many secret values are remembered (for tests and diagnostics)."""
    return len(_values)


def make_undumpable() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)``: processes of the same user (the steps) cannot read
    this one's memory or ``/proc/PID/environ``. Linux only; elsewhere nothing happens."""
    global _made_undumpable
    if _made_undumpable:
        return
    _made_undumpable = True
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def is_dumpable() -> bool | None:
    """This process's dumpable flag (``None`` where it cannot be read)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE = 3
    except (OSError, AttributeError):
        return None
