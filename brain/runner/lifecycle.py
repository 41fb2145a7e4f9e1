"""What a run does next, decided from what is stored of it: the rules of a run's life.

Pure: no store, no event loop, no I/O. The code that executes runs
(:mod:`~brain.runner.claimed`, :mod:`~brain.runner.now`, the service's takers)
reads a run's record and its steps' states, asks here what to do, and acts on
the :class:`Decision`. Each rule is one small function, so a rule can change in
one place (the next issues refine :func:`changed_since_start` step by step).

>>> run = StoredRun("digest", "abc", steps={"a": StoredStep("succeeded", 1),
...                                         "b": StoredStep("running", 1)})
>>> on_taken(Event.RESUMED, run, Definition("digest", "abc"))
Decision(action=<Action.CONTINUE: 'continue'>, reason=None, steps=('b',), choose_previous=False, end_leftovers=True, event=None)
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from brain._errors import WORKFLOW_CHANGED

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

    @property
    def never_started(self) -> bool:
        """No step has started yet (every one ``pending``, no try)."""
        return all(s.status == _PENDING and s.tries == 0 for s in self.steps.values())


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
    changed = changed_since_start(run, loaded)
    if changed is not None:
        if event is Event.STARTED and run.workflow == loaded.workflow:
            # Queued under another definition (a reload or a deploy since, or another
            # machine's version) and never started: it runs the workflow as loaded now, like
            # any queued run (the store checks that no step of it has started).
            return Decision(Action.RESTAMP)
        return _fail_changed(run, changed, leftovers)
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
                    end_leftovers=leftovers)


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


def changed_since_start(run: StoredRun, loaded: Definition) -> str | None:
    """Why the run may not go on with the loaded definition, or ``None`` when it may.

    The rule today: any change of the definition hash (or another workflow) is a change.
    """
    if run.definition_hash != loaded.definition_hash or run.workflow != loaded.workflow:
        return WORKFLOW_CHANGED
    return None


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
