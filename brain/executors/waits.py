"""Steps that wait (SPEC §16): what a ``sleep``, ``approval`` or ``wait_for`` step waits for.

:meth:`WaitExecutor.prepare` resolves the step into a :class:`WaitRequest` (the wake
time, the prompt, the signal and its key, when it times out). The durable wait itself
is the runner's: it records the step ``waiting`` and lets go of the run. ``execute``
is the wait as ``brain.testing`` runs it, without a clock or a person: a sleep ends at
once, an approval or a signal takes its default or fails naming the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from brain._clock import duration_text, utcnow
from brain._errors import StepFailed
from brain._secrets import REDACTED, scrub
from brain.dsl.model import WAIT_KINDS, ApprovalStepSpec, SleepStepSpec, StepSpec, WaitForStepSpec
from brain.dsl.waits import parse_until
from brain.executors.base import PreparedStep, Resolve, StepContext, StepOutput
from brain.results import StepStatus, WaitEnd


@dataclass(frozen=True)
class WaitRequest:
    """What a step waits for, resolved when it starts waiting.

    ``due``: when its timer falls due (a sleep's wake time, or the timeout), if it has one;
    ``on_due``: how the step ends then; ``shown``: the step's ``waiting_for`` in the run JSON.
    """

    kind: str
    due: datetime | None
    on_due: WaitEnd | None
    signal: str | None = None
    key: str | None = None
    shown: dict[str, Any] | None = None


def iso(when: datetime) -> str:
    """A time in UTC as ISO 8601 (``2026-12-03T09:00:00+00:00``)."""
    return when.astimezone(UTC).isoformat()


def _timeout(spec: StepSpec, default: str | None, now: datetime,
             shown: dict[str, Any]) -> tuple[datetime | None, WaitEnd | None]:
    """When the wait times out, and how it ends then: its default (decided by ``timeout``),
    or failed (``no decision within 4h``)."""
    if spec.timeout_seconds is None:
        return None, None
    due = now + timedelta(seconds=spec.timeout_seconds)
    shown["timeout_at"] = iso(due)
    decision: dict[str, Any] = {"by": "timeout"}
    if default is not None:
        if spec.kind == "approval":
            decision = {"approved": default == "true", "comment": None, "by": "timeout"}
        return due, WaitEnd(StepStatus.SUCCEEDED.value, default, decision)
    error = f"no decision within {duration_text(spec.timeout_seconds)}"
    if isinstance(spec, WaitForStepSpec):
        error += f" (signal {spec.signal!r})"
    return due, WaitEnd(StepStatus.FAILED.value, error, decision)


class WaitExecutor:
    """The step kinds that wait; see the module."""

    #: The runner waits for these durably (a store record and a timer), not by ``execute``.
    durable = True

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def prepare(self, spec: Any, resolve: Resolve, *, mocked: bool = False) -> PreparedStep:
        """Resolve what the step waits for; a bad ``until`` fails the step."""
        now = utcnow()
        shown: dict[str, Any] = {"kind": WAIT_KINDS[spec.kind]}
        if isinstance(spec, SleepStepSpec):
            if spec.until is not None:
                text = resolve(spec.until, False)
                try:
                    wake = parse_until(text).astimezone(UTC)
                except ValueError as exc:
                    raise StepFailed(str(exc), retryable=False) from None
            else:
                wake = now + timedelta(seconds=spec.seconds or 0.0)
            shown["until"] = iso(wake)
            request = WaitRequest("sleep", wake, WaitEnd(StepStatus.SUCCEEDED.value, iso(wake)),
                                  shown=shown)
            return PreparedStep(inputs={"until": iso(wake)}, payload={"wait": request})
        if isinstance(spec, ApprovalStepSpec):
            prompt = scrub(resolve(spec.prompt, False)) or ""
            shown["prompt"] = prompt
            default = None if spec.default is None else ("true" if spec.default else "false")
            due, on_due = _timeout(spec, default, now, shown)
            request = WaitRequest("approval", due, on_due, shown=shown)
            return PreparedStep(inputs={"prompt": prompt}, payload={"wait": request})
        assert isinstance(spec, WaitForStepSpec)
        key = None if spec.key is None else resolve(spec.key, False)
        shown_key = scrub(key)  # the key itself is kept only as a digest (it is matched)
        if key is not None and REDACTED in key and shown_key == key:
            # The key was built from text this run read with a secret already scrubbed out
            # (a served run reads its trigger from the store; step outputs are stored
            # scrubbed): its real value is known to nobody here, and a match on the
            # scrubbed text would let any other secret stand in for the one it hid.
            raise StepFailed(
                f"the key of step {spec.name!r} ({shown_key!r}) holds a secret this run has "
                f"only as ***: no signal can be matched to it safely; build the key from "
                f"values that hold no secret", retryable=False)
        shown.update(signal=spec.signal, key=shown_key)
        due, on_due = _timeout(spec, spec.default, now, shown)
        request = WaitRequest("signal", due, on_due, signal=spec.signal, key=key, shown=shown)
        return PreparedStep(inputs={"signal": spec.signal, "key": shown_key},
                            payload={"wait": request})

    async def execute(self, spec: Any, prepared: PreparedStep, ctx: StepContext) -> StepOutput:
        """The wait without a clock or a person (``brain.testing``): a sleep's output is its
        wake time at once; an approval or a signal takes its default, or fails."""
        request: WaitRequest = prepared.payload["wait"]
        end = request.on_due
        if end is not None and end.status == StepStatus.SUCCEEDED.value:
            return StepOutput(output=end.text)
        what = "a decision" if request.kind == "approval" else f"signal {request.signal!r}"
        raise StepFailed(f"step {spec.name!r} waits for {what}: mock it "
                         f"(mocks={{{spec.name.split('[')[0]!r}: ...}}) or give it a timeout "
                         f"and a default", retryable=False)


def wait_executors() -> dict[str, WaitExecutor]:
    """One executor per kind of step that waits."""
    return {kind: WaitExecutor(kind) for kind in WAIT_KINDS}
