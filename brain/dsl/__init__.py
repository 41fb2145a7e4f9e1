"""The workflow language: step helpers, triggers, tracing and the workflow model (plain
specs). ``@workflow`` and the runnable :class:`brain.Workflow` live in :mod:`brain.workflow`."""

from brain.dsl.cost import Cache, Limit, limit
from brain.dsl.helpers import llm, secret, shell
from brain.dsl.mcp import mcp_tool
from brain.dsl.model import WorkflowGraph, WorkflowSpec
from brain.dsl.nodes import StepNode, trigger
from brain.dsl.step import step
from brain.dsl.tracing import for_each, parallel, when
from brain.dsl.triggers import cron, every, watch, webhook
from brain.dsl.waits import approval, sleep, wait_for

__all__ = ["Cache", "Limit", "StepNode", "WorkflowGraph", "WorkflowSpec", "approval", "cron",
           "every", "for_each",
           "limit", "llm", "mcp_tool", "parallel", "secret", "shell", "sleep", "step", "trigger",
           "wait_for", "watch", "webhook", "when"]
