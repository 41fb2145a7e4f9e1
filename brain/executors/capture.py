"""What a ``@step`` function prints and logs goes to its own step's log.

Not a global redirect: :data:`current_log` (a context variable) says which step
the code running now belongs to. It is set around the function's call, and
follows it into its worker thread (the thread runs in a copy of the step's
context), so steps running side by side each get their own lines.
``sys.stdout`` and ``sys.stderr`` are wrapped once by :func:`install` in a
:class:`StepAwareStream`, which hands text written inside a step to its log and
everything else, secrets scrubbed, to the stream it wraps; a ``logging`` handler on the root
logger does the same for records emitted inside a step.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TextIO

from brain._secrets import scrub
from brain.executors.steplog import StepLog

#: The log of the step whose code is running now (``None`` outside any step).
current_log: ContextVar[StepLog | None] = ContextVar("brain_step_log", default=None)

_install_lock = threading.Lock()


class StepAwareStream(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr``: inside a step, a write goes to its log as
    ``stream``; outside, secrets scrubbed, to the stream wrapped."""

    def __init__(self, wrapped: TextIO, stream: str) -> None:
        super().__init__()
        self.wrapped = wrapped
        self.stream = stream

    def writable(self) -> bool:
        """Always: it is an output stream."""
        return True

    def write(self, text: str) -> int:
        """Write ``text`` to the current step's log, or (secrets scrubbed) to the stream
        wrapped."""
        log = current_log.get()
        if log is None:
            # Not a step's (a thread a step started itself, say): scrubbed all the same.
            self.wrapped.write(scrub(text) or "")
            return len(text)
        log.feed(self.stream, text.encode("utf-8", errors="replace"))
        return len(text)

    def flush(self) -> None:
        """Flush the stream wrapped (a step's log needs none)."""
        if current_log.get() is None:
            self.wrapped.flush()

    def fileno(self) -> int:
        """The wrapped stream's descriptor (for what writes to it directly)."""
        return self.wrapped.fileno()

    def isatty(self) -> bool:
        """Inside a step, never a terminal; outside, as the stream wrapped."""
        return current_log.get() is None and self.wrapped.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """The wrapped stream's encoding."""
        return getattr(self.wrapped, "encoding", None) or "utf-8"

    def __getattr__(self, name: str) -> object:
        """Whatever else the wrapped stream has (``buffer``, ``reconfigure``, ...)."""
        return getattr(self.wrapped, name)


class StepLogHandler(logging.Handler):
    """Records emitted inside a step (but The Brain's own) go to its log as ``log``."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        """Add the record's text to the current step's log."""
        log = current_log.get()
        if log is None or record.name == "brain" or record.name.startswith("brain."):
            return
        try:
            text = self.format(record)
        except Exception:
            self.handleError(record)
            return
        log.feed("log", (text + "\n").encode("utf-8", errors="replace"))


def install() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` (again if somebody replaced them since) and
    add the logging handler once."""
    root = logging.getLogger()
    if isinstance(sys.stdout, StepAwareStream) and isinstance(sys.stderr, StepAwareStream) \
            and any(isinstance(h, StepLogHandler) for h in root.handlers):
        return  # (the usual case: no lock taken)
    with _install_lock:
        if not isinstance(sys.stdout, StepAwareStream):
            sys.stdout = StepAwareStream(sys.stdout, "stdout")  # type: ignore[assignment]
        if not isinstance(sys.stderr, StepAwareStream):
            sys.stderr = StepAwareStream(sys.stderr, "stderr")  # type: ignore[assignment]
        if not any(isinstance(h, StepLogHandler) for h in root.handlers):
            root.addHandler(StepLogHandler())


@contextlib.contextmanager
def capturing(log: StepLog | None) -> Iterator[None]:
    """Inside the block (and the threads it starts through the step machinery), what
    is printed or logged goes to ``log``."""
    if log is None:
        yield
        return
    install()
    token = current_log.set(log)
    try:
        yield
    finally:
        current_log.reset(token)
