"""What a run does next, decided from what is stored of it: the rules of a run's life.

Pure: no store, no event loop, no I/O. The code that executes runs
(:mod:`~brain.runner.claimed`, :mod:`~brain.runner.now`, the service's takers)
reads a run's record and its steps' states, asks here what to do, and acts on
the :class:`Decision`. Each rule is one small function, so a rule can change in
one place (the next issues refine :func:`changed_since_start` step by step).

>>> run = StoredRun("digest", "abc", steps={"a": StoredStep("succeeded", 1),
...                                         "b": StoredStep("running", 1)})
>>> on_taken(Event.RESUMED, run, Definition("digest", "abc"))
Decision(action=<Action.CONTINUE: 'continue'>, reason=None, steps=('b',), choose_previous=False, end_leftovers=True, event=None, adopt=None)

A run that goes on after its workflow changed (SPEC §24) goes on with the loaded definition
when every step it started is unchanged (:func:`changed_since_start`, the continue rule);
the :class:`Adoption` of the decision says what the store records first.
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from brain._errors import WORKFLOW_CHANGED
from brain.dsl.fingerprint import WorkflowPrint, what_changed

#: Step statuses as stored (kept as text here: this module reads plain data).
_SUCCEEDED, _PENDING = "succeeded", "pending"
_FINISHED = frozenset({"succeeded", "failed", "cancelled"})


class Event(StrEnum):
    """Why a run is taken to be executed (the value is the word its log line uses)."""

    #: A queued run taken for the first time.
    STARTED = "started"
    #: A retry (a queued run with ``retry_of``) taken for the first time.
    RETRIED = "retried"
    #: Taken again after its executor stopped: it died (lease expired) or stalled.
    RESUMED = "resumed"
    #: Let go of while its steps waited, and queued again once a wait ended.
    WOKEN = "continued"


def event_of(*, first_start: bool, woken: bool, retry_of: str | None = None) -> Event:
    """The :class:`Event` of a claim: a first start (a retry's too), a wake or a resume."""
    if first_start:
        return Event.RETRIED if retry_of is not None else Event.STARTED
    return Event.WOKEN if woken else Event.RESUMED


class Action(StrEnum):
    """What to do with a run."""

    #: Execute it: ``steps`` go back to ``pending`` first, the others keep their state.
    CONTINUE = "continue"
    #: Give the queued run the loaded definition first, then decide again (if the store
    #: refuses, a step has started after all: :func:`restamp_refused` decides).
    RESTAMP = "restamp"
    #: End it ``cancelled`` (``reason``): its unfinished steps end cancelled, none starts.
    CANCEL = "cancel"
    #: End it ``failed`` with ``reason``: ``steps`` end skipped with that reason.
    FAIL = "fail"
    #: It waits: nothing to execute until a wait ends (watch it, fire its timers).
    PARK = "park"
    #: Claim it and execute it (as ``event``).
    TAKE = "take"
    #: Someone else executes it: look again later.
    WATCH = "watch"
    #: Nothing to do: it ended, or is not this process's to execute (``reason``).
    NOTHING = "nothing"


@dataclass(frozen=True)
class Decision:
    """A decision about a run: an :class:`Action` and what it needs."""

    action: Action
    reason: str | None = None
    #: ``CONTINUE``: the steps to put back to ``pending``; ``FAIL``: the steps that end skipped.
    steps: tuple[str, ...] = ()
    #: ``CONTINUE``: choose now the run ``{previous.X}`` reads (and store the choice).
    choose_previous: bool = False
    #: End the process groups an earlier try left on this machine, before anything else.
    end_leftovers: bool = False
    #: ``TAKE``: as what the run is taken.
    event: Event | None = None
    #: ``CONTINUE`` on the loaded definition, after a change the run may go on with: what
    #: the store records first (SPEC §24).
    adopt: Adoption | None = None


@dataclass(frozen=True)
class Adoption:
    """A run takes the loaded definition of its workflow (SPEC §24): its hash and
    fingerprints, the versions it continued on (the new one last), its steps not started
    yet as pending rows ``(name, kind, position)`` as the definition has them now, and the
    pending steps it no longer has (they end skipped: :data:`~brain.dsl.fingerprint.REMOVED`)."""

    definition_hash: str
    step_prints: str
    continued_on: tuple[str, ...]
    fresh: tuple[tuple[str, str, int], ...]
    removed: tuple[str, ...]


@dataclass(frozen=True)
class StoredStep:
    """One step as stored: its status and how many tries it has had."""

    status: str
    tries: int = 0


@dataclass(frozen=True)
class StoredRun:
    """What is stored of a run that the rules read: its workflow and definition, whether
    a cancel was asked for, the run it retries, the run ``{previous.X}`` reads, its steps,
    and its waits (the steps still ``waiting``, and those whose wait ended failed)."""

    workflow: str
    definition_hash: str
    cancel_requested: bool = False
    retry_of: str | None = None
    previous_run_id: str | None = None
    steps: Mapping[str, StoredStep] = field(default_factory=dict)
    waiting: frozenset[str] = frozenset()
    failed_waits: frozenset[str] = frozenset()
    #: The fingerprints of the definition it runs on (JSON text; ``None``: recorded before
    #: they were kept) and the versions it continued on (SPEC §24).
    step_prints: str | None = None
    continued_on: tuple[str, ...] = ()

    @property
    def never_started(self) -> bool:
        """No step has started yet (every one ``pending``, no try)."""
        return all(s.status == _PENDING and s.tries == 0 for s in self.steps.values())

    def started(self) -> frozenset[str]:
        """The steps that have started or ended (a try, or not ``pending``), a ``for_each``
        instance (``name[3]``) as its step."""
        return frozenset(n.split("[", 1)[0] for n, s in self.steps.items()
                         if s.tries > 0 or s.status != _PENDING)


@dataclass(frozen=True)
class Definition:
    """The workflow as this process has it loaded now: its name, its definition hash and
    whether a step reads ``{previous.X}``."""

    workflow: str
    definition_hash: str
    reads_previous: bool = False
    #: The retries of its child steps (SPEC §22), by step name: a child that failed while
    #: nobody executed the run is tried again with a new child while they allow.
    child_retries: Mapping[str, int] = field(default_factory=dict)
    #: What each step does (SPEC §24; ``None``: not known, any change of the hash counts)
    #: and the version of its file as loaded.
    prints: WorkflowPrint | None = None
    version: str | None = None

    def differs(self, run: StoredRun) -> bool:
        """Whether ``run`` was recorded under another definition than this one."""
        return (run.definition_hash != self.definition_hash or run.workflow != self.workflow
                or (run.step_prints is not None and self.prints is not None
                    and run.step_prints != self.prints.text))


def on_taken(event: Event, run: StoredRun, loaded: Definition | None) -> Decision:
    """What a run just claimed does (see :class:`Event`): cancelled while nobody executed
    it, not this process's (its workflow is not loaded), changed since it started, or
    executed — with its unfinished steps reset and ``{previous.X}`` chosen if it is
    chosen now."""
    leftovers = event is Event.RESUMED  # a try of it may have left processes running here
    if run.cancel_requested:
        # Cancelled while nobody executed it (its executor froze or died): it ends here,
        # and none of its steps starts again.
        return Decision(Action.CANCEL, "cancelled", end_leftovers=leftovers)
    if loaded is None:
        return Decision(Action.NOTHING, f"workflow {run.workflow!r} is not loaded here",
                        end_leftovers=leftovers)
    adopt = None
    if loaded.differs(run):
        if event is Event.STARTED and run.workflow == loaded.workflow:
            # Queued under another definition (a reload or a deploy since, or another
            # machine's version) and never started: it runs the workflow as loaded now, like
            # any queued run (the store checks that no step of it has started).
            return Decision(Action.RESTAMP)
        changed = changed_since_start(run, loaded)
        if changed is not None:
            return _fail_changed(run, changed, leftovers)
        adopt = adoption(run, loaded)
    retried = retried_children(run, loaded)
    # a wait's step keeps its state: it is awaited (or its failure fails the run)
    keep = run.waiting | (run.failed_waits - retried)
    # (a pending step has nothing to reset: no end, output or error)
    reset = tuple(n for n, s in run.steps.items()
                  if n not in keep and s.status not in (_SUCCEEDED, _PENDING))
    # A retry keeps its original's choice, even "none" (its succeeded steps used it); a run
    # whose executor died before any step started chooses now, as a first start does.
    choose = (loaded.reads_previous and run.previous_run_id is None and run.retry_of is None
              and (event is Event.STARTED or run.never_started))
    return Decision(Action.CONTINUE, steps=reset, choose_previous=choose,
                    end_leftovers=leftovers, adopt=adopt)


def retried_children(run: StoredRun, loaded: Definition) -> frozenset[str]:
    """The child steps (SPEC §22) whose child failed while nobody executed the run and
    whose retries allow another try (a new child): they start again, not fail the run.
    A ``for_each`` instance (``summarize[3]``) counts its own tries."""
    retried = set()
    for name in run.failed_waits:
        retries = loaded.child_retries.get(name.split("[", 1)[0])
        step = run.steps.get(name)
        if retries is not None and step is not None and step.tries <= retries:
            retried.add(name)
    return frozenset(retried)


def changed_since_start(run: StoredRun, loaded: Definition,
                        kept: frozenset[str] | None = None) -> str | None:
    """Why the run may not go on with the loaded definition, or ``None`` when it may
    (SPEC §24): every step it started or ended (``kept``, when given: the steps that keep
    their outputs) must have the same fingerprint and the same upstream steps; the first
    that does not, in definition order, is named with what changed. A run recorded before
    fingerprints were kept (or another workflow) may go on only with the same hash.
    """
    if not loaded.differs(run):
        return None
    if run.workflow != loaded.workflow or run.step_prints is None or loaded.prints is None:
        return WORKFLOW_CHANGED
    old = WorkflowPrint.parse(run.step_prints)
    started = run.started() if kept is None else kept
    for name in [*old.steps, *sorted(started - set(old.steps))]:
        if name in started:
            what = what_changed(old.step(name), loaded.prints.step(name))
            if what is not None:
                return f"{WORKFLOW_CHANGED}: step {name!r} ({what})"
    return None


def retry_refusal(run: StoredRun, loaded: Definition, rerun: frozenset[str] = frozenset()
                  ) -> str | None:
    """Why a retry of ``run`` (ended) may not run on the loaded definition, or ``None``:
    the steps it keeps (those that succeeded, but for ``rerun``) must be unchanged."""
    kept = frozenset(n.split("[", 1)[0] for n, s in run.steps.items()
                     if s.status == _SUCCEEDED) - rerun
    return changed_since_start(run, loaded, kept=kept)


def adoption(run: StoredRun, loaded: Definition) -> Adoption:
    """What the store records when ``run`` goes on with the loaded definition (the rule
    allowed it): the definition, the new version appended, the steps not started yet as
    now written, the pending steps no longer defined."""
    assert loaded.prints is not None
    started = run.started()
    fresh = tuple((name, p.kind, i) for i, (name, p) in enumerate(loaded.prints.steps.items())
                  if name not in started)
    removed = tuple(n for n, s in run.steps.items()
                    if loaded.prints.step(n) is None and s.status == _PENDING)
    versions = run.continued_on + ((loaded.version,) if loaded.version is not None else ())
    return Adoption(loaded.definition_hash, loaded.prints.text, versions, fresh, removed)


def restamp_refused(run: StoredRun) -> Decision:
    """The store refused to give a queued run the loaded definition (a step of it has
    started): it fails as changed."""
    return _fail_changed(run, WORKFLOW_CHANGED, False)


def _fail_changed(run: StoredRun, reason: str, leftovers: bool) -> Decision:
    skip = tuple(n for n, s in run.steps.items() if s.status != _SUCCEEDED)
    return Decision(Action.FAIL, reason, steps=skip, end_leftovers=leftovers)


def after_execution(*, parked: bool, stalled: bool) -> Decision:
    """What a run executed in this process does once its execution returned: it waits
    (``PARK``: wait for it in the foreground), its database stalled past the lease (``TAKE``
    it again once the lease ran out), or it is done."""
    if parked:
        return Decision(Action.PARK)
    if stalled:
        return Decision(Action.TAKE, "the database stalled past the lease", event=Event.RESUMED)
    return Decision(Action.NOTHING, "executed")


def on_look(status: str, *, lease_expired: bool) -> Decision:
    """A run waited for in the foreground, looked at again (its ``status`` and whether its
    lease expired): ended, to be taken here (woken from its waits, or its executor died),
    still waiting, or executed by someone else."""
    if status in _FINISHED:
        return Decision(Action.NOTHING, "ended")
    if status == "queued":
        return Decision(Action.TAKE, event=Event.WOKEN)
    if status == "running" and lease_expired:
        return Decision(Action.TAKE, event=Event.RESUMED)
    if status == "waiting":
        return Decision(Action.PARK)
    return Decision(Action.WATCH)


def on_stall_look(status: str, *, lease_expired: bool, ours: bool) -> Decision:
    """A run this process stopped executing because its database stalled, looked at again
    (``ours``: the lease is held under an owner id of this process): taken again once the
    lease ran out, left to whoever took it or ended it meanwhile."""
    if status != "running":
        return Decision(Action.NOTHING, f"it is {status} now")
    if not lease_expired:
        return Decision(Action.WATCH) if ours else \
            Decision(Action.NOTHING, "another executor took it")
    return Decision(Action.TAKE, event=Event.RESUMED)


def may_resume(status: str) -> bool:
    """Whether a run may be resumed (it has not ended)."""
    return status not in _FINISHED


def cancel_ends_leftovers(before: str | None, *, active: bool, after: str) -> bool:
    """Whether a cancel just ended a running run nobody executed any more (its executor
    died or froze past its lease): the processes it left on this machine end too."""
    return active and before == "running" and after == "cancelled"
