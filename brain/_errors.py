"""The exception hierarchy: catch ``BrainError`` for anything The Brain raises."""

from __future__ import annotations


class BrainError(Exception):
    """Root of every error The Brain raises on purpose."""


class WorkflowDefinitionError(BrainError):
    """A workflow cannot be traced: raised when it is decorated, never at run time."""


class PlaceholderError(BrainError):
    """A placeholder cannot be resolved at run time (a missing trigger field, a NUL byte)."""


class StepFailed(BrainError):
    """A step failed; ``message`` is the reason stored with the step.

    Executors raise it with the text a user should read; ``stderr`` carries the
    tail of the step's error stream when there is one, ``output`` what it printed
    on its standard output before it failed (kept, not passed on); ``retryable=False``
    fails the step at once whatever its ``retries``; ``retry_after`` asks for at
    least that many seconds before the next try (an HTTP ``Retry-After``); ``throttled``:
    the provider said too many requests (HTTP 429), so the step's rate limit pauses for
    ``retry_after`` (SPEC §26).
    """

    def __init__(self, message: str, *, stderr: str | None = None, retryable: bool = True,
                 retry_after: float | None = None, output: str | None = None,
                 throttled: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.throttled = throttled
        self.stderr = stderr
        self.output = output
        self.retryable = retryable
        self.retry_after = retry_after


class StoreError(BrainError):
    """The run store cannot be used (a wrong URL, an old schema, an unknown run)."""


class RunNotFound(StoreError):
    """No run matches the given id or prefix."""


class StepNotFound(RunNotFound):
    """The run has no step of that name."""


class WorkflowLoadError(BrainError):
    """A workflow file cannot be imported or traced, or names no usable workflow."""


class LeaseLost(StoreError):
    """This executor no longer holds the run's lease: another one took it, or it ended.

    Raised by the store's lease-conditional writes; the runner stops the run's
    work at once and writes nothing more.
    """


def innermost(exc: BaseException) -> BaseException:
    """The first non-group exception inside (possibly nested) exception groups: what a
    task group's failure is really about."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


#: Why a run of a workflow whose definition changed since it started cannot go on.
WORKFLOW_CHANGED = "workflow changed since the run started"


class RunConflict(StoreError):
    """A run cannot do what was asked in its state: retry one still active or one that
    succeeded, or one whose workflow changed since."""


class WorkflowInputError(BrainError, ValueError):
    """A run's parameters do not validate against its workflow's (SPEC §21): nothing was
    queued or stored.

    ``errors`` lists each problem as pydantic gives it: ``{"loc": [...], "msg": ...,
    "type": ...}``; ``str(e)`` is one line per field (``service: Field required``).
    """

    def __init__(self, errors: list[dict[str, object]], workflow: str | None = None) -> None:
        self.errors = errors
        self.workflow = workflow
        super().__init__("\n".join(_error_line(e) for e in errors) or "invalid parameters")


def _error_line(error: dict[str, object]) -> str:
    loc = error.get("loc") or ()
    where = ".".join(str(p) for p in loc) if isinstance(loc, (list, tuple)) else str(loc)
    return f"{where or 'params'}: {error.get('msg', 'invalid')}"
