"""The Brain: workflows as decorated Python functions, every run recorded.

>>> from brain import workflow, shell
>>> @workflow
... def hello():
...     who = shell("who", command="echo world")
...     shell("greet", argv=["echo", f"hello {who}"])
"""

from brain._errors import (
                           BrainError,
                           PlaceholderError,
                           RunNotFound,
                           StepFailed,
                           StoreError,
                           WorkflowDefinitionError,
                           WorkflowInputError,
                           WorkflowLoadError,
)
from brain._version import __version__
from brain.dsl import (
                           Cache,
                           Limit,
                           StepNode,
                           WorkflowGraph,
                           approval,
                           cron,
                           every,
                           for_each,
                           limit,
                           llm,
                           mcp_tool,
                           parallel,
                           secret,
                           shell,
                           sleep,
                           step,
                           trigger,
                           wait_for,
                           watch,
                           webhook,
                           when,
)
from brain.results import RunResult, RunStatus, StepResult, StepStatus, TriggerData
from brain.workflow import Workflow, workflow

__all__ = [
    "BrainError", "Cache", "Limit", "PlaceholderError", "RunNotFound", "RunResult", "RunStatus", "StepFailed",
    "StepNode", "StepResult", "StepStatus", "StoreError", "TriggerData", "Workflow",
    "WorkflowDefinitionError", "WorkflowGraph", "WorkflowInputError", "WorkflowLoadError",
    "__version__", "approval", "cron", "every", "for_each", "limit", "llm", "mcp_tool", "parallel",
    "secret", "shell", "sleep", "step", "trigger", "wait_for", "watch", "webhook", "when", "workflow",
]
