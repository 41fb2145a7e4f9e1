"""The tools The Brain's MCP server offers (SPEC §23): one per ``@workflow(mcp=True)``
workflow, and ``brain_run``.

A workflow's tool is named after it; its description is the workflow's, its
``inputSchema`` the parameters' schema (SPEC §21). A typed workflow (one with a return
annotation) also has an ``outputSchema``: an object holding the run's id and status and, once
it succeeded, its output as ``result`` (MCP wants an object there, and a call that answers
before the run ends must still fit the schema it promised).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, Tool, ToolAnnotations

from brain._errors import WorkflowInputError
from brain.results import RunStatus
from brain.service.json_limits import value_problem

if TYPE_CHECKING:
    from brain.workflow import Workflow

#: The built-in tool that reads a run: its status, or its result once it ended.
RUN_TOOL = "brain_run"

_STATUS = {"type": "string", "enum": [s.value for s in RunStatus],
           "description": "the run's status"}
_WAITING = {"type": "array", "description": "the steps the run waits for (while it waits)",
            "items": {"type": "object", "additionalProperties": True}}


def run_envelope(result_schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``outputSchema`` of a tool whose answers are runs: ``run_id``, ``status``,
    ``result`` (``result_schema``, any JSON value without one) once the run succeeded,
    ``waiting_for`` and ``console`` while it goes on. ``$defs`` of ``result_schema`` move to
    the root, so its references still resolve."""
    result = copy.deepcopy(dict(result_schema)) if result_schema is not None else {}
    defs = result.pop("$defs", None)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "run_id": {"type": "string", "description": "the run's id"},
            "status": _STATUS,
            "result": {**result, "description": result.get(
                "description", "what the workflow returned (once the run succeeded)")},
            "waiting_for": _WAITING,
            "console": {"type": "string", "description": "where a person can see the run"},
        },
        "required": ["run_id", "status"],
    }
    if defs:
        schema["$defs"] = defs
    return schema


def workflow_tool(wf: Workflow) -> Tool:
    """The tool of workflow ``wf``."""
    output = wf.output_schema
    return Tool(name=wf.name, description=wf.description or f"Run the workflow {wf.name}.",
                input_schema=dict(wf.params_schema),
                output_schema=run_envelope(output) if output is not None else None)


RUN_TOOL_SPEC = Tool(
    name=RUN_TOOL,
    description=("The status of a run of The Brain (queued, running, waiting, succeeded, "
                 "failed, cancelled) and, once it ended, its result or error. Waits up to "
                 "wait_seconds for the run to end first."),
    input_schema={
        "type": "object",
        "properties": {
            "run_id": {"type": "string", "description": "the run's id (a unique prefix will do)"},
            "wait_seconds": {"type": "number", "minimum": 0, "default": 0,
                             "description": "how long to wait for the run's end"},
        },
        "required": ["run_id"],
        "additionalProperties": False,
    },
    output_schema=run_envelope(None),
    annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
)


def offered(workflows: Iterable[Workflow]) -> dict[str, Workflow]:
    """The workflows offered as tools: those declared ``mcp=True`` (none by default), by
    name; a workflow named like the built-in tool is left out."""
    return {wf.name: wf for wf in workflows if wf.spec.mcp and wf.name != RUN_TOOL}


def tools(workflows: Iterable[Workflow]) -> list[Tool]:
    """Every tool: the workflows' (sorted by name), then ``brain_run``."""
    found = offered(workflows)
    return [*(workflow_tool(found[name]) for name in sorted(found)), RUN_TOOL_SPEC]


def invalid_arguments(tool: str, exc: WorkflowInputError) -> MCPError:
    """The protocol error for arguments that do not fit a tool's parameters: one line per
    field in the message, the fields as ``data.errors`` (``loc``, ``msg``, ``type``)."""
    errors = [{"loc": [p if isinstance(p, int) else str(p) for p in _parts(e.get("loc"))],
               "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))} for e in exc.errors]
    return MCPError(INVALID_PARAMS, f"invalid arguments for {tool}: {exc}",
                    data={"errors": errors})


def check_json(tool: str, arguments: Mapping[str, Any] | None) -> None:
    """The protocol error for arguments the API would refuse as JSON (SPEC §7's rules,
    :mod:`brain.service.json_limits`: no ``NaN``/``Infinity``, no absurd numbers, no deep
    nesting, no lone surrogates), naming the field; nothing when they pass."""
    found = value_problem(dict(arguments or {}))
    if found is None:
        return
    where, problem = found
    field = ".".join(str(p) for p in where) or "arguments"
    raise MCPError(INVALID_PARAMS, f"invalid arguments for {tool}: {field}: {problem}",
                   data={"errors": [{"loc": list(where), "msg": problem, "type": "json_refused"}]})


def _parts(loc: object) -> tuple[object, ...]:
    if isinstance(loc, (list, tuple)):
        return tuple(loc)
    return () if loc is None else (loc,)


def run_arguments(arguments: Mapping[str, Any] | None) -> tuple[str, float]:
    """``brain_run``'s ``run_id`` and ``wait_seconds`` (0 to a day), or the protocol error
    naming what is wrong."""
    args = dict(arguments or {})
    unknown = sorted(set(args) - {"run_id", "wait_seconds"})
    problems = [f"{name}: unknown argument" for name in unknown]
    run_id = args.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        problems.append("run_id: a run's id (text) is required")
    wait = args.get("wait_seconds", 0)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 86400:
        problems.append("wait_seconds: a number of seconds from 0 to 86400")
    if problems:
        raise MCPError(INVALID_PARAMS, f"invalid arguments for {RUN_TOOL}: " + "; ".join(problems))
    assert isinstance(run_id, str)
    return run_id, float(wait)
