"""Executors, one per step kind, behind the interface in :mod:`brain.executors.base`."""

from __future__ import annotations

from brain.executors.base import Executor, LlmDefaults, PreparedStep, StepContext, StepOutput
from brain.executors.function import FunctionExecutor
from brain.executors.shell import ShellExecutor


def default_executors(llm: LlmDefaults | None = None) -> dict[str, Executor]:
    """A fresh mapping of step kind to executor (one set per run); ``llm``: what ``llm()``
    steps use by default (read from the environment now when not given)."""
    from brain.executors.child import ChildExecutor
    from brain.executors.llm import LlmExecutor
    from brain.executors.mcp import McpExecutor
    from brain.executors.waits import wait_executors

    return {"shell": ShellExecutor(), "step": FunctionExecutor(), "llm": LlmExecutor(llm),
            "mcp_tool": McpExecutor(), "workflow": ChildExecutor(), **wait_executors()}


__all__ = ["Executor", "LlmDefaults", "PreparedStep", "StepContext", "StepOutput", "default_executors"]
