"""``BrainMcp``: The Brain's MCP server (SPEC §23), on the official SDK's low-level
``Server``, calling the application core (:class:`~brain.service.api.BrainApi`) only.

A ``tools/call`` of a workflow's tool validates its arguments, starts a run
(``trigger.event = "mcp"``), reports progress as its steps end, and answers when the run
ends — or, after ``BRAIN_MCP_WAIT_SECONDS``, with the run's state (``brain_run`` reads it
later). An approval the run waits for is put to the client's user when the client can ask
(:mod:`.approvals`): in the 2026-07-28 era as an ``input_required`` answer (the client asks
and calls again; any serving process takes the answer), on a connection with a back-channel
(stdio) as an ``elicitation/create`` request. Otherwise the answer says what the run waits
for and where a person decides.

Cancelling: a call whose handler the SDK cancels for its client cancels its run (not when
the server itself stops): in the 2026-07-28 era over HTTP the client closes the call's
stream; on a connection (stdio) the client sends ``notifications/cancelled``, which the
SDK matches to that connection's own request. Over stateless HTTP a handshake-era
``notifications/cancelled`` arrives as a request of its own, with nothing that ties it to
the client that made the call (every client numbers its requests from 0 or 1, and they
share the bearer token): it cancels nothing, rather than another client's run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp.server import Server, ServerRequestContext
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    InputRequiredResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from brain._errors import RunNotFound, WorkflowInputError
from brain._version import __version__
from brain.mcp_server import answers, approvals, tools
from brain.mcp_server.errors import Scrubbed, scrubbing_errors
from brain.results import FINISHED_RUN, RunResult, StepStatus, TriggerData
from brain.store.queue import QueueFull

if TYPE_CHECKING:
    from brain.service.api import BrainApi
    from brain.workflow import Workflow

log = logging.getLogger("brain.mcp")

#: The server's name, as clients see it (and the audience of its sealed request state).
SERVER_NAME = "the-brain"
#: How long a sealed ``requestState`` stays good: a person may take a while to decide.
STATE_TTL_SECONDS = 7 * 24 * 3600.0

#: Where a person can see a run, for a call (``None`` when nothing serves pages).
ConsoleLink = Callable[[ServerRequestContext[Any, Any], str], "str | None"]


def state_key(token: str | None, database_url: str) -> bytes:
    """The key that seals ``requestState``: every process serving one database with one
    token derives the same (so any of them takes a client's next round). Without a token
    the loopback-only rule (SPEC §7) already lets any local caller decide, so the seal then
    guards only against mistakes (another tool, other arguments, a stale round)."""
    material = f"the-brain mcp request state\0{token or ''}\0{database_url}".encode()
    return hashlib.sha256(material).digest()


class BrainMcp:
    """The MCP server of a set of workflows: ``server`` is the SDK's low-level ``Server``.

    ``api`` gives the application core for a call (a serving process's, so a reload's
    workflows are seen); ``wait_seconds`` is ``BRAIN_MCP_WAIT_SECONDS``; ``console`` gives
    a run's console address for a call, if there is one; ``key`` seals ``requestState``.
    """

    def __init__(self, api: Callable[[], BrainApi], *, wait_seconds: float, key: bytes,
                 console: ConsoleLink | None = None) -> None:
        self._api = api
        self.wait_seconds = wait_seconds
        self._console = console
        #: Set when the server stops: a call cancelled then leaves its run alone.
        self.closing = False
        self.server: Server[Any] = Server(SERVER_NAME, version=__version__, title="The Brain",
                                          description="Workflows of The Brain as tools",
                                          on_list_tools=self.list_tools,
                                          on_call_tool=self.call_tool)
        # The SDK's default middleware (its OpenTelemetry spans) sees only scrubbed tool
        # names, request ids and errors (:mod:`.errors`); the client gets errors scrubbed too.
        self.server.middleware[:] = [Scrubbed(m) for m in self.server.middleware]
        self.server.middleware.append(scrubbing_errors)
        security = RequestStateSecurity(keys=[key], ttl=STATE_TTL_SECONDS)
        self.server.middleware.append(RequestStateBoundary(security,
                                                           default_audience=SERVER_NAME))

    def _offered(self) -> dict[str, Workflow]:
        return tools.offered(self._api().workflows.values())

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         params: PaginatedRequestParams | None) -> ListToolsResult:
        """Every ``mcp=True`` workflow's tool, and ``brain_run``."""
        return ListToolsResult(tools=tools.tools(self._api().workflows.values()))

    async def call_tool(self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
                        ) -> CallToolResult | InputRequiredResult:
        """A ``tools/call``: a workflow's tool starts (or, on a later round, goes on
        following) a run; ``brain_run`` reads one."""
        api = self._api()
        tools.check_json(params.name, params.arguments)
        if params.name == tools.RUN_TOOL:
            run_id, wait = tools.run_arguments(params.arguments)
            try:
                full = await api.full_id(run_id)
            except RunNotFound as exc:
                raise MCPError(INVALID_PARAMS, str(exc)) from None
            pending = approvals.Pending.from_state(params.request_state or "")
            if pending is not None and pending.run_id != full:
                raise MCPError(INVALID_PARAMS, "requestState is about another run")
            return await self._follow(ctx, api, full, typed=True, wait=wait, cancels=False,
                                      asked=await _answer(api, params, pending))
        wf = self._offered().get(params.name)
        if wf is None:
            raise MCPError(INVALID_PARAMS, f"unknown tool {params.name!r}")
        typed = wf.output_schema is not None
        pending = approvals.Pending.from_state(params.request_state or "")
        if pending is not None:  # a later round: the answer to what the last one asked
            return await self._follow(ctx, api, pending.run_id, typed=typed,
                                      wait=self.wait_seconds,
                                      asked=await _answer(api, params, pending))
        try:
            valid = wf.validate_params(params.arguments or {})
            trigger = TriggerData(event="mcp", headers={"mcp-tool": wf.name})
            run_id, _ = await api.start(wf, trigger, trigger_key="mcp", params=valid,
                                        trace_parent=trace_parent(params.meta))
        except WorkflowInputError as exc:
            raise tools.invalid_arguments(wf.name, exc) from None
        except QueueFull as exc:
            return CallToolResult(content=[TextContent(
                type="text", text=f"too many queued runs ({exc}); try again later")],
                is_error=True)
        return await self._follow(ctx, api, run_id, typed=typed, wait=self.wait_seconds)

    async def _follow(self, ctx: ServerRequestContext[Any, Any], api: BrainApi, run_id: str, *,
                      typed: bool, wait: float, cancels: bool = True,
                      asked: dict[str, str] | None = None
                      ) -> CallToolResult | InputRequiredResult:
        """Follow run ``run_id`` for up to ``wait`` seconds: progress as steps end, its
        approvals asked, the answer when it ends or when the time is up."""
        asked = dict(asked or {})
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        reported = -1
        last: RunResult | None = None
        try:
            while True:
                if _unanswered(asked):  # declined or dismissed: a person decides elsewhere
                    return self._going(ctx, await api.run(run_id), _note(asked))
                async for run in api.watch(run_id, wait):
                    last = run
                    done = answers.steps_ended(run)
                    if done > reported and run.steps:
                        reported = done
                        await ctx.session.report_progress(done, len(run.steps),
                                                          _progress_message(run))
                    if run.status in FINISHED_RUN:
                        return answers.ended(run, typed=typed)
                    step = _approval_to_ask(run, asked)
                    if step is None:
                        continue
                    prompt = str((run.steps[step].waiting_for or {}).get("prompt", ""))
                    if not approvals.can_ask(ctx):
                        return self._going(ctx, run, "its approval cannot be asked here")
                    if modern:
                        return InputRequiredResult(
                            input_requests={step: approvals.ask(run.run_id, step, prompt)},
                            request_state=approvals.Pending(run.run_id, step).state())
                    try:
                        answer = await ctx.session.elicit_form(
                            approvals.question(run.run_id, step, prompt).message,
                            approvals.DECISION_SCHEMA, related_request_id=ctx.request_id)
                    except NoBackChannelError:
                        return self._going(ctx, run, "its approval cannot be asked here")
                    asked[step] = await approvals.record(api, run.run_id, step, answer)
                    break  # look again: the decision changes the run
                else:  # the time is up
                    assert last is not None
                    return self._going(ctx, last, _note(asked))
        except asyncio.CancelledError:
            # The SDK cancels a handler for its client only (its stream closed, or its
            # notifications/cancelled on this connection); the server stopping sets closing.
            if cancels and not self.closing:
                await _cancel_shielded(api, run_id)
            raise

    def _going(self, ctx: ServerRequestContext[Any, Any], run: RunResult,
               note: str | None) -> CallToolResult:
        console = self._console(ctx, run.run_id) if self._console is not None else None
        return answers.going_on(run, console=console, note=note)


async def _answer(api: BrainApi, params: CallToolRequestParams,
                  pending: approvals.Pending | None) -> dict[str, str] | None:
    """On a later round (2026-07-28 era), record the client's answer to what the last round
    asked (the approval ``pending`` names, sealed in ``requestState``): what happened, by
    step, for the call to go on from; ``None`` on a first round."""
    if pending is None:
        return None
    answer = (params.input_responses or {}).get(pending.step)
    return {pending.step: await approvals.record(api, pending.run_id, pending.step, answer)}


async def _cancel_shielded(api: BrainApi, run_id: str) -> None:
    task = asyncio.ensure_future(api.cancel(run_id))
    with contextlib.suppress(Exception):
        await asyncio.shield(task)


def _approval_to_ask(run: RunResult, asked: dict[str, str]) -> str | None:
    for step in run.steps.values():
        if (step.status == StepStatus.WAITING and step.name not in asked
                and (step.waiting_for or {}).get("kind") == "approval"):
            return step.name
    return None


def _unanswered(asked: dict[str, str]) -> bool:
    return any(outcome in approvals.UNDECIDED for outcome in asked.values())


def _note(asked: dict[str, str]) -> str | None:
    return "; ".join(f"{step}: {outcome}" for step, outcome in asked.items()) or None


def _progress_message(run: RunResult) -> str:
    ended = [s for s in run.steps.values() if s.status not in (StepStatus.PENDING,
                                                               StepStatus.RUNNING,
                                                               StepStatus.WAITING)]
    if not ended:
        return f"run {run.run_id} {run.status.value}"
    last = max(ended, key=lambda s: s.ended_at.timestamp() if s.ended_at else 0.0)
    return f"step {last.name} {last.status.value}"


def trace_parent(meta: object) -> dict[str, str] | None:
    """The W3C trace context a client sent in a call's ``params._meta`` (``traceparent``,
    ``tracestate``), which its run's trace continues when traces are on (SPEC §25)."""
    if not isinstance(meta, dict):
        return None
    found = {k: v for k in ("traceparent", "tracestate")
             if isinstance(v := meta.get(k), str)}
    return found or None
