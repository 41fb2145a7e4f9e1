"""Checking a model's answer against a JSON Schema dict (SPEC §18) so that no answer can hold
the event loop: in a child process, which is killed when the step's time is up.

A user's schema meets untrusted text: ``"pattern": "^(a+)+$"`` against ``"aaaa…a!"`` takes
Python's ``re`` seconds to minutes, all of it in one C call that keeps the GIL (a thread
would not help), and ``uniqueItems`` or a recursive ``$ref`` under ``anyOf`` can be as slow
in pure Python. So :func:`check_apart` sends the check to a child process. Children are
kept between checks (one per check at a time, up to :data:`KEEP_IDLE` idle), so a check
costs a pipe's round trip, and a child's start (about 0.2 s) only when none is idle.

This file is also the child's program: run as a script it imports nothing of The Brain
(json and jsonschema only), reads one request per line on stdin and writes one verdict per
line; a check that outlives its request's seconds ends the child (``SIGALRM``), whoever
waits for it. :func:`verdict` is the one rule, in the child and in-process alike
(``brain.testing``'s mocks, written by the user, are checked in-process).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: Idle children kept for the next checks (each holds about 20 MB).
KEEP_IDLE = 2
#: Checks at once in one process (each a child); more wait their turn.
MAX_CHECKS = 32
#: How much of a reason the child sends back (the caller shows 300 characters of it).
REASON_SCAN = 16384
#: Validators of the JSON Schema dicts seen, by ``id`` of the dict (kept, so the id stays its).
_validators: dict[int, tuple[dict[str, Any], Any]] = {}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def verdict(schema: dict[str, Any], text: str) -> tuple[str | None, str, bool]:
    """``(compact JSON of the value, "", False)`` when ``text`` is JSON valid against
    ``schema``; ``(None, why not, False)`` when it is not; ``(None, the problem, True)`` when
    the schema cannot be checked at all (an unresolvable ``$ref``). Reasons are raw: the
    caller scrubs them of secrets."""
    try:
        # NaN and Infinity are not JSON: the output must be JSON any reader can parse.
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, int() past 4300 digits
        return None, f"the answer is not JSON ({exc})", False
    from jsonschema.exceptions import best_match

    try:
        error = best_match(_validator(schema).iter_errors(value))
    except Exception as exc:  # a $ref that cannot be resolved, say: no answer could pass
        return None, str(exc), True
    if error is not None:
        path = error.json_path
        return None, error.message + (f" at {path}" if path != "$" else ""), False
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False), "", False


def _validator(schema: dict[str, Any]) -> Any:
    cached = _validators.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    from jsonschema.validators import validator_for

    validator = validator_for(schema)(schema)
    if len(_validators) >= 256:  # workflows redefined over and over: keep the newest
        _validators.clear()
    _validators[id(schema)] = (schema, validator)
    return validator


# --- the parent's side ----------------------------------------------------------------------


class CheckTookTooLong(Exception):
    """The child checking an answer ran past its seconds and ended."""


class _Child:
    """One checking process and its pipes."""

    def __init__(self) -> None:
        path = [p for p in sys.path if p]  # where jsonschema is, as this process found it
        # -I: none of the caller's PYTHON* variables, no script folder on the path. An
        # environment of its own: it needs no secret of the orchestrator's.
        self.proc = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), json.dumps(path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"})

    def ask(self, request: bytes) -> bytes:
        """Send one request; its verdict line (empty when the child ended first)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(request)
            self.proc.stdin.flush()
        except OSError:  # it ended already (killed, or its time ran out)
            return b""
        return self.proc.stdout.readline()

    def end(self, *, kill: bool) -> None:
        """Close its pipes (an idle child then exits) or kill it; reap it."""
        if kill:
            self.proc.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_idle: list[_Child] = []
_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def _threads() -> ThreadPoolExecutor:
    """The threads that wait for children's verdicts: their own, so that checks waiting
    out their timeouts never take the threads the loop's other work (DNS lookups, say)
    needs. One per check in flight, up to :data:`MAX_CHECKS` (more wait their turn)."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(MAX_CHECKS, thread_name_prefix="brain-schema-check")
        return _executor


def _take() -> _Child:
    with _lock:
        while _idle:
            child = _idle.pop()
            if child.proc.poll() is None:
                return child
    return _Child()


def warm() -> None:
    """Start a child now if none is idle, so that it is ready (its imports take about
    0.2 s) by the time a model's answer comes to be checked."""
    with _lock:
        if _idle:
            return
        _idle.append(_Child())


def _give_back(child: _Child) -> None:
    with _lock:
        if len(_idle) < KEEP_IDLE:
            _idle.append(child)
            return
    child.end(kill=False)


def _end_idle() -> None:
    """At exit: end idle children (they hold no work; one may still be starting)."""
    with _lock:
        children = list(_idle)
        _idle.clear()
    for child in children:
        child.end(kill=True)


async def check_apart(schema: dict[str, Any], text: str,
                      seconds: float) -> tuple[str | None, str, bool, bool]:
    """:func:`verdict` of ``text``, worked out in a child process that ends after
    ``seconds`` (rounded up) whatever happens here; cancelling this kills it at once. A
    fourth item says whether the reason was cut to :data:`REASON_SCAN` characters.
    Raises :class:`CheckTookTooLong` when the child ended before its verdict."""
    import asyncio

    request = json.dumps({"schema": json.dumps(schema), "text": text,
                          "seconds": max(1, math.ceil(seconds))}).encode() + b"\n"
    child = _take()  # a spawn, when none is idle: a few milliseconds (its start is its own)
    try:
        line = await asyncio.get_running_loop().run_in_executor(_threads(), child.ask, request)
    except BaseException:  # cancelled (the step's timeout, a cancel): the check ends with it
        child.proc.kill()  # the read in its thread ends with it; the pipes are closed there
        _threads().submit(child.end, kill=True)  # (closing one waits for that read)
        raise
    if not line:
        child.end(kill=True)
        raise CheckTookTooLong(f"checking the answer against the schema took over "
                               f"{max(1, math.ceil(seconds))} s")
    _give_back(child)
    answer = json.loads(line)
    return answer["output"], answer["reason"], answer["broken"], answer["cut"]


# --- the child's side -------------------------------------------------------------------------


def _serve() -> None:
    """The child's loop: a request per line in, a verdict per line out, until stdin ends.
    Each check is under an alarm whose default action ends the process, even inside a
    C call that never returns to Python."""
    import signal

    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    schemas: dict[str, dict[str, Any]] = {}  # the same dict for the same text: cached validator
    for line in sys.stdin.buffer:
        request = json.loads(line)
        key = request["schema"]
        schema = schemas.get(key)
        if schema is None:
            if len(schemas) >= 64:
                schemas.clear()
            schema = schemas[key] = json.loads(key)
        signal.alarm(int(request["seconds"]))
        output, reason, broken = verdict(schema, request["text"])
        signal.alarm(0)
        # A reason quotes the answer, which may be megabytes: its start is all that is shown.
        sys.stdout.buffer.write(json.dumps({"output": output, "reason": reason[:REASON_SCAN],
                                            "cut": len(reason) > REASON_SCAN,
                                            "broken": broken}).encode() + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    sys.path[:] = json.loads(sys.argv[1])
    _serve()
else:
    import atexit

    atexit.register(_end_idle)
