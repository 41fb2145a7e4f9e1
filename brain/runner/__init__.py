"""Running workflows: start a run now, execute a queued one, resume an abandoned one.

The parts, each small: :mod:`~brain.runner.lifecycle` (what a run does next, pure),
:mod:`~brain.runner.plan` (what may start, pure, growing by ``for_each`` instances),
:mod:`~brain.runner.attempt` (one step and its retries), :mod:`~brain.runner.blocks`
(a ``for_each`` block's expansion and gathering), :mod:`~brain.runner.lease`,
:mod:`~brain.runner.ending` (the run's end), :mod:`~brain.runner.engine` (the loop
tying them), :mod:`~brain.runner.claimed` (a claimed run), :mod:`~brain.runner.now`
(a run now) and
:mod:`~brain.runner.queueing` (queued runs).
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
from brain.runner.events import EventHandler, LogEvent, LogHandler, StepEvent
from brain.runner.now import run_workflow_now
from brain.runner.workflows import RunnableWorkflow

__all__ = ["WORKFLOW_CHANGED", "EventHandler", "LogEvent", "LogHandler", "RunnableWorkflow",
           "StepEvent", "cancel_run", "end_leftover_processes", "execute_claimed", "execute_run",
           "lease_seconds", "new_owner", "resume_run", "run_workflow_now"]
