"""Running workflows: start a run now, execute a queued one, resume an abandoned one.

The parts, each small: :mod:`~brain.runner.lifecycle` (what a run does next, pure),
:mod:`~brain.runner.plan` (what may start, pure, growing by ``for_each`` instances),
:mod:`~brain.runner.attempt` (one step and its retries), :mod:`~brain.runner.blocks`
(a ``for_each`` block's expansion and gathering), :mod:`~brain.runner.lease`,
:mod:`~brain.runner.ending` (the run's end), :mod:`~brain.runner.engine` (the loop
tying them), :mod:`~brain.runner.claimed` (a claimed run), :mod:`~brain.runner.now`
(a run now) and :mod:`~brain.runner.queueing` (queued runs). What a run executes with is
its :class:`~brain.runner.context.RunContext`; what it tells as it goes, it tells a
:class:`~brain.runner.observe.RunObserver`.
"""

from __future__ import annotations

from brain._errors import WORKFLOW_CHANGED
from brain._owners import new_owner
from brain.runner.claimed import (
    cancel_run,
    end_leftover_processes,
    execute_claimed,
    execute_run,
    lease_seconds,
    resume_run,
)
from brain.runner.context import RunContext, Settings
from brain.runner.events import (
    EventHandler,
    LogEvent,
    LogHandler,
    ProgressEvent,
    RunEvent,
    StepEvent,
    WaitEvent,
)
from brain.runner.now import run_workflow_now
from brain.runner.observe import Observers, RunObserver
from brain.runner.workflows import RunnableWorkflow

__all__ = ["WORKFLOW_CHANGED", "EventHandler", "LogEvent", "LogHandler", "Observers",
           "ProgressEvent", "RunContext", "RunEvent", "RunObserver", "RunnableWorkflow",
           "Settings", "StepEvent", "WaitEvent", "cancel_run", "end_leftover_processes",
           "execute_claimed", "execute_run", "lease_seconds", "new_owner", "resume_run",
           "run_workflow_now"]
