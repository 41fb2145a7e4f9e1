"""The workflow language: decorators, helpers, tracing and the workflow model."""

from brain.dsl.helpers import llm, mcp_tool, secret, shell
from brain.dsl.model import WorkflowGraph, WorkflowSpec
from brain.dsl.nodes import StepNode, trigger
from brain.dsl.step import step
from brain.dsl.tracing import parallel
from brain.dsl.triggers import cron, every, watch, webhook
from brain.dsl.workflow import Workflow, workflow

__all__ = ["StepNode", "Workflow", "WorkflowGraph", "WorkflowSpec", "cron", "every", "llm",
           "mcp_tool", "parallel", "secret", "shell", "step", "trigger", "watch", "webhook",
           "workflow"]
