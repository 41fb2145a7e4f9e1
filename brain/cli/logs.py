"""The log of ``brain serve`` and ``brain worker``: stderr, as text or JSON (``BRAIN_LOG_FORMAT``).

Every logger of the process goes through one handler: The Brain's own lines
(``brain.*``, from INFO) and every library's warnings and errors (``uvicorn``, the MCP
SDK, ...). Whatever the line, it is one line (tracebacks aside, in text), its text is
storable Unicode, and known secret values in it are replaced by ``***``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import threading
import time
from datetime import UTC, datetime

from brain._secrets import longest, scrub
from brain.cli import render
from brain.results import clean_text

#: Printed text held back waiting for the end of its line, at most (then it is a record).
_HOLD_AT_MOST = 64 * 1024

#: The attributes ``brain.runs`` lines carry, shown as fields of their own in JSON.
RUN_FIELDS = ("run_id", "workflow", "step", "status")

# Control characters shown as escapes, so a message cannot start a line of its own (or
# move a terminal's cursor): CR, LF and the rest of C0, DEL and C1. Tabs stay.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}
_CONTROLS |= {0x0A: "\\n", 0x0D: "\\r", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def json_format() -> bool:
    """Whether log lines are JSON objects (``BRAIN_LOG_FORMAT=json``)."""
    return os.environ.get("BRAIN_LOG_FORMAT") == "json"


def _safe(text: str) -> str:
    """Storable Unicode (lone surrogates replaced), known secrets as ``***``."""
    return scrub(clean_text(text)) or ""


def iso_time(seconds: float) -> str:
    """A log line's time in JSON: ISO 8601, UTC, to the millisecond."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


class TextFormatter(logging.Formatter):
    """``time level logger: message`` on one line; a traceback follows on lines of its own,
    each indented, so that only a record's first line starts at the margin."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        record.asctime = self.formatTime(record)
        # Scrubbed before escaping: a secret may hold the very characters escaped.
        line = _safe(self.formatMessage(record)).translate(_CONTROLS)
        extra = []
        if record.exc_info:
            extra.append(self.formatException(record.exc_info))
        if record.stack_info:
            extra.append(self.formatStack(record.stack_info))
        for text in extra:
            line += "".join("\n    " + part.translate(_CONTROLS)
                            for part in _safe(text).splitlines())
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, a run's
    fields (:data:`RUN_FIELDS`) when it has them, and ``exception`` with a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {"time": iso_time(record.created),
                                   "level": _safe(record.levelname),
                                   "logger": _safe(record.name),
                                   "message": _safe(record.getMessage())}
        for field in RUN_FIELDS:
            if hasattr(record, field):
                data[field] = _safe(str(getattr(record, field)))
        if record.exc_info:  # a 500's traceback, for the server's operator only
            data["exception"] = _safe(self.formatException(record.exc_info))
        if record.stack_info:
            data["stack"] = _safe(self.formatStack(record.stack_info))
        return json.dumps(data)


class Throttle(logging.Filter):
    """Passes each client-caused message at most once a second; everything else always."""

    _NOISY = ("Exceeded concurrency limit", "Invalid HTTP request")

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is logged."""
        message = record.msg if isinstance(record.msg, str) else ""
        # Any line of the HTTP server's own is something a client can make it say.
        if not (message.startswith(self._NOISY) or record.name.startswith("uvicorn")):
            return True
        now = time.monotonic()
        if now - self._last.get(message, float("-inf")) < 1.0:
            return False
        self._last[message] = now
        return True


class _LinesToLog(io.TextIOBase):
    """A text stream whose writes become records of ``logger`` (the serving process's
    ``sys.stdout`` and ``sys.stderr``: what a ``@step`` or a library prints). What was written until a
    write ends a line is one record, so one ``print()`` of several lines (a key, say) is
    one message, scrubbed whole."""

    def __init__(self, logger: str, level: int, fileno: int) -> None:
        super().__init__()
        self._logger = logging.getLogger(logger)
        self._level = level
        self._fileno = fileno
        self._pending = ""
        self._lock = threading.Lock()
        self._inside = threading.local()

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:  # for what writes to the descriptor itself (faulthandler)
        return self._fileno

    def write(self, text: str) -> int:
        if getattr(self._inside, "yes", False):
            # Written while logging a line (logging reporting its own error): straight to the
            # descriptor, or it would come back here forever.
            os.write(self._fileno, text.encode("utf-8", "replace"))
            return len(text)
        with self._lock:
            self._pending += text
            if self._pending.endswith("\n"):
                done, self._pending = self._pending.rstrip("\n"), ""
            elif len(self._pending) >= _HOLD_AT_MOST:
                # Too long to wait for the end of its line: out goes all but its last
                # characters, which may begin a secret still being written. It is scrubbed
                # whole first, so no secret is split between the two.
                scrubbed, keep = scrub(self._pending) or "", longest()
                done, self._pending = scrubbed[:len(scrubbed) - keep], scrubbed[len(scrubbed) - keep:]
            else:
                return len(text)  # print() writes its text, then its end: wait for the end
        if done.strip():
            self._inside.yes = True
            try:
                self._logger.log(self._level, "%s", done)
            finally:
                self._inside.yes = False
        return len(text)

    def flush(self) -> None:
        with self._lock:
            line, self._pending = self._pending, ""
        if line.strip():
            self.write(line + "\n")


def _thread_exception(args: threading.ExceptHookArgs) -> None:
    name = args.thread.name if args.thread is not None else "?"
    exc_info = (args.exc_type, args.exc_value or args.exc_type(), args.exc_traceback)
    logging.getLogger("brain.server").error("uncaught exception in thread %s", name,
                                            exc_info=exc_info)


def _unraisable(args: sys.UnraisableHookArgs) -> None:
    exc_info = (args.exc_type, args.exc_value or args.exc_type(), args.exc_traceback)
    logging.getLogger("brain.server").error("%s: %r", args.err_msg or "exception ignored",
                                            args.object, exc_info=exc_info)


def setup_logging() -> None:
    """Send every logger's lines to stderr through one handler, in the chosen format: The
    Brain's from INFO, other libraries' from WARNING, and also Python's warnings and the
    exceptions no thread caught. What is printed to stdout or stderr becomes records too
    (loggers ``stdout`` and ``stderr``)."""
    stream = sys.stderr
    sys.stdout.flush()
    stream.flush()
    # The terminal output of the command itself (its start-up line) goes out as before.
    render.err.file, render.out.file = stream, sys.stdout
    sys.stdout = _LinesToLog("stdout", logging.INFO, sys.stdout.fileno())
    sys.stderr = _LinesToLog("stderr", logging.WARNING, stream.fileno())
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if json_format() else TextFormatter())
    # Lines any client can cause by connecting (over the connection limit, a malformed
    # request) are logged at most once a second each, so they cannot flood the log.
    handler.addFilter(Throttle())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    for name, level in (("brain", logging.INFO), ("stdout", logging.INFO),
                        ("uvicorn", logging.WARNING)):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.setLevel(level)
        logger.propagate = True
    logging.captureWarnings(True)  # warnings.warn(): through the handler, not raw to stderr
    threading.excepthook = _thread_exception
    sys.unraisablehook = _unraisable


def announce(message: str) -> None:
    """A start-up or stop line: in the log's own format when it is JSON, so a log collector
    reads every line of the process alike; otherwise a plain line on stderr."""
    if json_format():
        logging.getLogger("brain.server").info("%s", message)
    else:
        render.ok(message)


def say(message: str, level: str = "INFO") -> None:
    """A line from a signal handler: one unbuffered write, no rich or logging locks."""
    if json_format():  # the formatter's own shape; formatting takes no lock
        message = JsonFormatter().format(logging.LogRecord(
            "brain.server", logging.getLevelName(level), __file__, 0, "%s", (message,), None))
    os.write(2, (message + "\n").encode())


def error(message: str) -> None:
    """``brain serve``'s or ``brain worker``'s error before it stops (a workflow that does
    not load, a port in use): a JSON line in the JSON format, else ``error: ...``."""
    if json_format():
        say(message, "ERROR")
    else:
        render.error(message)
