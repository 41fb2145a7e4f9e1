"""Steps that wait (SPEC §16): ``sleep()``, ``approval()`` and ``wait_for()``.

They are traced like any step (``when=``, ``after=``, inside ``parallel()`` and
``for_each``); the runner records them ``waiting`` and lets go of the run until
their time, decision or signal comes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from brain import placeholders
from brain._clock import parse_duration
from brain.dsl.helpers import common_options
from brain.dsl.model import ApprovalStepSpec, SleepStepSpec, WaitForStepSpec
from brain.dsl.nodes import StepNode, _Lazy
from brain.dsl.tracing import Tracer, require_tracer

#: What a signal's name may hold: it is a part of a URL (``POST /api/signals/{signal}``).
SIGNAL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")
#: :data:`SIGNAL_NAME` in words, for the messages that refuse a name.
SIGNAL_NAME_RULE = "letters, digits and . _ : - (at most 200 characters)"


def parse_until(text: str) -> datetime:
    """An ISO 8601 time with an offset (``2026-12-03T09:00:00+01:00``, ``...Z``).

    Raises ``ValueError`` saying what is wrong.
    """
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"until={text!r} is not an ISO 8601 time like "
                         f"'2026-12-03T09:00:00+00:00'") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"until={text!r} has no offset: add one, like +00:00 or Z")
    try:  # a time at the very edge of the calendar has no UTC form (9999-12-31T23:00-01:00)
        when.astimezone(UTC) + timedelta(days=1)
        when.astimezone(UTC) - timedelta(days=1)
    except OverflowError:
        raise ValueError(f"until={text!r} is out of range") from None
    return when


def _duration(tracer: Tracer, name: str, field: str, value: object,
              positive: bool = False) -> float:
    if isinstance(value, _Lazy):
        raise tracer.error(name, f"{field} is never substituted: give seconds or text like "
                                 f"'10m', not a step output or trigger field")
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise tracer.error(name, f"{field}: {exc}") from None
    if positive and seconds <= 0:
        raise tracer.error(name, f"{field} must be longer than zero")
    return seconds


def _options(tracer: Tracer, name: str, timeout: object, timeout_seconds: float | None,
             retries: int, retry_delay_seconds: float) -> dict[str, object]:
    """The options every step takes (SPEC §1). ``timeout_seconds`` is another name for a
    wait's ``timeout``; ``retries`` are accepted and never used: a wait that ends failed
    (it timed out) is not tried again."""
    if timeout is not None and timeout_seconds is not None:
        raise tracer.error(name, "give timeout= or timeout_seconds=, not both")
    if timeout_seconds is not None:
        timeout = timeout_seconds
    opts = common_options(tracer, name, None, retries, retry_delay_seconds, None)
    opts["timeout_seconds"] = (None if timeout is None
                               else _duration(tracer, name, "timeout", timeout, positive=True))
    return opts


def sleep(name: str, duration: object = None, *, until: object = None,
          after: Sequence[object] | None = None, when: object = None, retries: int = 0,
          retry_delay_seconds: float = 1.0, timeout_seconds: float | None = None) -> StepNode:
    """Wait ``duration`` (seconds, or text like ``"10m"``, ``"1h30m"``) or ``until`` a time
    (ISO 8601 with an offset; a placeholder is resolved when the step starts), holding no
    executor meanwhile. The output is the UTC wake time; a time already past goes on at once.

    >>> sleep("settle", "10m")                                  # doctest: +SKIP
    >>> sleep("at-nine", until=trigger.headers["X-Start-At"])    # doctest: +SKIP
    """
    tracer = require_tracer("sleep")
    name = tracer.check_name(name)
    refs: list[str] = []
    if (duration is None) == (until is None):
        raise tracer.error(name, "give exactly one of a duration (sleep('wait', '10m')) or "
                                 "until= (an ISO 8601 time)")
    if timeout_seconds is not None:
        raise tracer.error(name, "a sleep has no timeout: it ends at its time")
    opts = _options(tracer, name, None, None, retries, retry_delay_seconds)
    seconds = None if duration is None else _duration(tracer, name, "duration", duration)
    until_text = None
    if until is not None:
        until_text = tracer.template(name, "until", until, refs)
        if not placeholders.has_placeholders(until_text):
            try:
                parse_until(until_text)
            except ValueError as exc:
                raise tracer.error(name, str(exc)) from None
    after_names = tracer.after_names(name, after)
    spec = SleepStepSpec(name=name, **tracer.placement(name, refs, after_names, when),
                         seconds=seconds, until=until_text, **opts)  # type: ignore[arg-type]
    return tracer.add(spec)


def approval(name: str, prompt: object, *, timeout: object = None, default: bool | None = None,
             after: Sequence[object] | None = None, when: object = None, retries: int = 0,
             retry_delay_seconds: float = 1.0,
             timeout_seconds: float | None = None) -> StepNode:
    """Wait for a person to approve or reject ``prompt`` (placeholders filled in, secrets
    scrubbed), in the console, with ``brain approve RUN_ID NAME`` or through the API. The
    output is ``true`` or ``false``, so ``when=`` takes it. After ``timeout`` the output is
    ``default``; without a default the step fails.

    >>> ok = approval("go", prompt=f"Apply this plan?\\n\\n{plan}", timeout="4h",  # doctest: +SKIP
    ...               default=False)
    >>> with when(ok):                                                            # doctest: +SKIP
    ...     shell("apply", argv=["terraform", "apply", "-auto-approve"])
    """
    tracer = require_tracer("approval")
    name = tracer.check_name(name)
    refs: list[str] = []
    prompt_text = tracer.template(name, "prompt", prompt, refs)
    if default is not None and not isinstance(default, bool):
        raise tracer.error(name, f"default must be True, False or None, not {default!r}")
    opts = _options(tracer, name, timeout, timeout_seconds, retries, retry_delay_seconds)
    if default is not None and opts["timeout_seconds"] is None:
        raise tracer.error(name, "default= is the answer after timeout=: give a timeout too")
    after_names = tracer.after_names(name, after)
    spec = ApprovalStepSpec(name=name, **tracer.placement(name, refs, after_names, when),
                            prompt=prompt_text, default=default, **opts)  # type: ignore[arg-type]
    return tracer.add(spec)


def wait_for(name: str, signal: str, *, key: object = None, timeout: object = None,
             default: object = None, after: Sequence[object] | None = None,
             when: object = None, retries: int = 0, retry_delay_seconds: float = 1.0,
             timeout_seconds: float | None = None) -> StepNode:
    """Wait for the signal ``signal`` (``POST /api/signals/SIGNAL`` or ``brain signal``) sent
    with the key ``key`` resolves to (``None``: a signal sent without a key). The output is
    the signal's body. After ``timeout`` the output is ``default`` (text, or JSON data kept
    as compact JSON); without a default the step fails.

    >>> ci = wait_for("ci", signal="ci-finished",                        # doctest: +SKIP
    ...               key=trigger.headers["X-Commit"], timeout="1h")
    """
    tracer = require_tracer("wait_for")
    name = tracer.check_name(name)
    refs: list[str] = []
    if not isinstance(signal, str) or not SIGNAL_NAME.match(signal):
        shown = repr(signal) if isinstance(signal, str) else f"of type {type(signal).__name__}"
        raise tracer.error(name, f"bad signal name {shown}: the signal is written literally, "
                                 f"{SIGNAL_NAME_RULE}")
    key_text = None if key is None else tracer.template(name, "key", key, refs)
    opts = _options(tracer, name, timeout, timeout_seconds, retries, retry_delay_seconds)
    seconds = opts["timeout_seconds"]
    default_text: str | None = None
    if default is not None:
        if isinstance(default, _Lazy):
            raise tracer.error(name, "default is never substituted: give text or JSON data")
        if seconds is None:
            raise tracer.error(name, "default= is the output after timeout=: give a timeout too")
        if isinstance(default, str):
            default_text = default
        else:
            try:
                default_text = json.dumps(default, ensure_ascii=False, separators=(",", ":"),
                                          allow_nan=False)
            except (TypeError, ValueError):
                raise tracer.error(name, f"default must be text or JSON data, not "
                                         f"{type(default).__name__}") from None
    after_names = tracer.after_names(name, after)
    spec = WaitForStepSpec(name=name, **tracer.placement(name, refs, after_names, when),
                           signal=signal, key=key_text, default=default_text,
                           **opts)  # type: ignore[arg-type]
    return tracer.add(spec)
