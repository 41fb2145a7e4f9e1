"""The one small interface every step kind implements.

An executor turns a step spec into resolved inputs (``prepare``) and then does
the work (``execute``). Executors return results or raise :class:`StepFailed`;
they never touch the store or the server: the runner records.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from brain._errors import StepFailed
from brain._secrets import MIN_SECRET_LENGTH, longest, remember, scrub
from brain.dsl.model import SecretRef
from brain.executors.steplog import StepLog
from brain.executors.traced import StepTrace, trace_environment

#: ``resolve(text, shell_quote)`` fills in a template for the current run.
Resolve = Callable[[str, bool], str]

REDACTED = "***"
RUN_ID_VARIABLE = "BRAIN_RUN_ID"


@dataclass(frozen=True)
class ProcessGroup:
    """A process group a step's try started: its id (its leader's pid) and when the leader
    started (clock ticks since boot, field 22 of ``/proc/PID/stat``). The start time tells
    the group's leader from a later process that got the same pid."""

    pgid: int
    started: int


@dataclass(frozen=True)
class LlmDefaults:
    """What an ``llm()`` step that does not say otherwise uses (``LLM_MODEL``,
    ``LLM_BASE_URL``, ``LLM_API_KEY``), read once where a run or a service starts."""

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> LlmDefaults:
        """Read them from ``environ`` (the process's environment by default); empty is unset."""
        env = os.environ if environ is None else environ
        return cls(env.get("LLM_MODEL") or None, env.get("LLM_BASE_URL") or None,
                   env.get("LLM_API_KEY") or None)


class RequestGate(Protocol):
    """The rate limit a step's requests pass (SPEC §26). The runner lets one request
    through before each try and settles what is left when the try ends; an executor that
    makes more (an LLM step asking once more, or again in another form) enters for each,
    and settles each as its answer arrives."""

    async def enter(self, tokens: int = 0) -> None:
        """Wait for room for one more request reserving ``tokens``, and take it."""
        ...

    async def answered(self) -> None:
        """The requests let through so far were answered (their usage is in the step's
        log): they count ``per`` seconds from now."""
        ...

    def outlived(self, on_end: Callable[[Callable[[], None]], None]) -> None:
        """The try ends but its work goes on (a sync function's thread): its requests
        count until that work ends, which ``on_end(callback)`` reports by calling
        ``callback`` (from any thread)."""
        ...


@dataclass(frozen=True)
class StepContext:
    """What an executor may know about the run around it."""

    workflow_dir: str
    protected_env: frozenset[str] = frozenset()
    #: The run's id, given to step processes as ``BRAIN_RUN_ID`` (so a resume can find
    #: processes a dead executor left running, see ``process.run_process_groups``).
    run_id: str = ""
    #: Told of every process group the step starts, the moment it starts (see
    #: ``process.announce_group``): the runner records it, so that whoever resumes the run
    #: on this machine can end it, and kills it at once if the run's lease is lost. What it
    #: returns completes once the record is committed (raising ``LeaseLost`` when the run
    #: is no longer this executor's): until then the step's program is held at a gate.
    on_process: Callable[[ProcessGroup], Awaitable[None]] | None = None
    #: The step's log (SPEC §20): what its programs and functions print, line by line, as
    #: they print it. ``None`` where nothing keeps a log.
    log: StepLog | None = None
    #: The try's span (SPEC §25), when traces are on (see :mod:`brain.executors.traced`).
    trace: StepTrace | None = None
    #: The step's rate limit (SPEC §26), when it has one.
    gate: RequestGate | None = None


@dataclass
class PreparedStep:
    """A step with its placeholders filled in.

    ``inputs`` is what gets stored and shown (secrets as ``***``); ``payload``
    holds the real values for ``execute``; ``secrets`` lists secret values to
    scrub from anything recorded.
    """

    inputs: dict[str, Any]
    payload: dict[str, Any]
    secrets: list[str] = field(default_factory=list)
    #: Set by an executor that has an error stream, so a timed-out or cancelled try can
    #: store it too; ``output``: likewise, what it printed on its standard output so far.
    stderr: str | None = None
    output: str | None = None
    #: The tokens a request of this step reserves in a rate limit (SPEC §26): an LLM
    #: step's ``max_tokens`` plus its prompt's estimate.
    reserve_tokens: int = 0
    #: Whether its requests pass its rate limit: a mocked step's reach no provider.
    limited: bool = True


@dataclass(frozen=True)
class StepOutput:
    """A step's output text and the tail of its error stream, if any."""

    output: str
    stderr: str | None = None


class Executor(Protocol):
    """One per step kind (``shell``, ``step``; ``llm`` and ``mcp_tool`` slot in the same way)."""

    kind: str

    def prepare(self, spec: Any, resolve: Resolve, *, mocked: bool = False) -> PreparedStep:
        """Resolve the spec's placeholders and secrets for this run.

        ``mocked``: the step will not really run (``brain.testing``), so what
        only the real work needs (a secret's value, a model name) may be absent.
        """
        ...

    async def execute(self, spec: Any, prepared: PreparedStep, ctx: StepContext) -> StepOutput:
        """Do the work; raise :class:`StepFailed` with a readable reason on failure."""
        ...


def read_secret(ref: SecretRef, *, lenient: bool = False) -> str:
    """The value of a secret, read from the environment now (``***`` if unset and lenient).

    The value joins those scrubbed from everything this process stores. One
    shorter than 8 characters fails the step: it cannot be scrubbed safely.
    """
    value = os.environ.get(ref.env)
    if value is None and lenient:
        return REDACTED
    if value is None:
        raise StepFailed(f"secret {ref.env} is not set in the environment", retryable=False)
    if len(value) < MIN_SECRET_LENGTH:
        if lenient:
            return REDACTED
        raise StepFailed(f"secret {ref.env} is shorter than {MIN_SECRET_LENGTH} characters: too "
                         f"short to keep out of stored outputs; use a longer value", retryable=False)
    remember(value)
    return value


def resolve_values(values: Mapping[str, str | SecretRef], resolve: Resolve, secrets: list[str], *,
                   mocked: bool = False) -> tuple[dict[str, str], dict[str, str]]:
    """``env``-style values: templates resolved, secrets read (and noted for scrubbing).

    Returns the real values and the ones to show (secrets as ``***``). A NUL
    byte fails the step: no environment or argument can carry it.
    """
    real: dict[str, str] = {}
    shown: dict[str, str] = {}
    for key, value in values.items():
        if isinstance(value, SecretRef):
            real[key] = read_secret(value, lenient=mocked)
            secrets.append(real[key])
            shown[key] = REDACTED
        else:
            real[key] = shown[key] = resolve(value, False)
        if "\x00" in real[key]:
            raise StepFailed(f"the value of {key} contains a NUL byte", retryable=False)
    return real, shown


#: Extra bytes kept before a tail is cut, so a secret the cut would split is scrubbed whole.
TAIL_MARGIN = 4096


def tail_margin() -> int:
    """How many bytes to keep beyond a tail's limit: room for the longest known secret."""
    return max(TAIL_MARGIN, 4 * longest())


def run_marker(ctx: StepContext) -> dict[str, str]:
    """The variable that marks a step's processes as this run's, and, when traces are on,
    the try's trace context (``TRACEPARENT``, ``TRACESTATE``: SPEC §25)."""
    marker = {RUN_ID_VARIABLE: ctx.run_id} if ctx.run_id else {}
    return marker | trace_environment(ctx.trace) if ctx.trace is not None else marker


def tail_text(data: bytes, limit: int = 8192) -> str | None:
    """The last ``limit`` bytes of ``data`` as text (secrets scrubbed before the cut, so
    no fragment of one survives it), or ``None`` when empty."""
    if not data:
        return None
    text = scrub(data[-(limit + tail_margin()):].decode("utf-8", errors="replace")) or ""
    if len(data) > limit:
        # The text was cut (here or by whoever kept it): its first characters may be the end
        # of a secret, which no scrubbing can recognise. Every whole secret is scrubbed
        # first (dropping characters first could cut one that began after the cut, leaving
        # its end); scrubbing only shortens, so that end is still within the first
        # longest() characters, which are dropped. Then the rest is cut to the limit
        # (cutting scrubbed text leaves nothing to find).
        text = text[longest():]
    return text.encode("utf-8")[-limit:].decode("utf-8", errors="ignore")


def head_text(data: bytes, limit: int, *, whole: bool = True) -> str:
    """The first ``limit`` bytes of ``data`` as text; when that cuts it, secrets are
    scrubbed before the cut, so no beginning of one survives it.

    ``data`` should hold :func:`tail_margin` bytes beyond the limit (a secret the cut
    splits is then there whole, and scrubbed); ``whole``: it is all there was (else its
    last characters may be the start of a secret cut short, and are dropped too). Text
    not cut is returned as it is: whoever stores it scrubs it."""
    if len(data) <= limit:
        return data.decode("utf-8", errors="replace")
    text = scrub(data[:limit + tail_margin()].decode("utf-8", errors="replace")) or ""
    if not whole or len(data) > limit + tail_margin():
        # Scrubbing only shortens: a secret cut short at the end of what was kept lies
        # within its last longest() characters.
        text = text[:len(text) - longest()]
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


def cut(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text``, secrets scrubbed before the cut."""
    return (scrub(text) or "")[:limit]
