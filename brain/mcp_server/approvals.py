"""Approvals asked through MCP elicitation (SPEC §23): the question, who can be asked, and
the answer turned into a decision.

An ``approval`` step waiting in a run an MCP call follows is put to the client's user as a
form — approve or not, and a comment — when the client declared it can ask (the
``elicitation`` capability). The answer is recorded through the application core
(:meth:`~brain.service.api.BrainApi.decide`, ``by="mcp"``), exactly as a decision from the
console: the first decision wins. A user who declines or dismisses the form decides nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult

from brain._errors import RunConflict

if TYPE_CHECKING:
    from mcp.server import ServerRequestContext

    from brain.service.api import BrainApi

#: ``by`` of a decision taken through MCP.
BY_MCP = "mcp"
#: What :func:`record` says when the user decided nothing: a person decides elsewhere.
UNDECIDED = ("the user declined to decide", "the user dismissed the question", "no answer",
             "the answer did not say approve true or false")

#: The form a user answers: approve or reject, and an optional comment.
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve",
                    "description": "true to approve, false to reject"},
        "comment": {"type": "string", "title": "Comment", "description": "optional"},
    },
    "required": ["approve"],
}


def can_ask(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared that it can put a form to its user."""
    caps = ctx.session.client_capabilities
    asks = caps.elicitation if caps is not None else None
    # A capability naming neither mode means form (the spec's reading for older clients).
    return asks is not None and (asks.form is not None or asks.url is None)


def question(run_id: str, step: str, prompt: str) -> ElicitRequestFormParams:
    """The form for the approval ``step`` of run ``run_id``."""
    return ElicitRequestFormParams(
        message=f"The Brain: run {run_id} waits for your approval of step {step!r}.\n\n{prompt}",
        requested_schema=DECISION_SCHEMA)


def ask(run_id: str, step: str, prompt: str) -> ElicitRequest:
    """:func:`question` as an input request (the 2026-07-28 era's ``input_requests`` entry)."""
    return ElicitRequest(params=question(run_id, step, prompt))


@dataclass(frozen=True)
class Pending:
    """What a call asked about, carried between its rounds in the sealed ``requestState``."""

    run_id: str
    step: str

    def state(self) -> str:
        """As ``requestState`` text (sealed by the SDK before it leaves)."""
        return json.dumps({"run_id": self.run_id, "step": self.step}, separators=(",", ":"))

    @classmethod
    def from_state(cls, state: str) -> Pending | None:
        """Back from ``requestState`` text (verified by the SDK); ``None`` if not ours."""
        try:
            data = json.loads(state)
            return cls(run_id=str(data["run_id"]), step=str(data["step"]))
        except (ValueError, KeyError, TypeError):
            return None


async def record(api: BrainApi, run_id: str, step: str, answer: object) -> str:
    """Record ``answer`` (an :class:`ElicitResult`) as the decision of ``step``: what
    happened, in a few words (``approved``, ``rejected``, ``declined``, ``already
    decided``...)."""
    if not isinstance(answer, ElicitResult) or answer.action != "accept":
        action = answer.action if isinstance(answer, ElicitResult) else None
        return {"decline": UNDECIDED[0], "cancel": UNDECIDED[1]}.get(action or "", UNDECIDED[2])
    content = answer.content or {}
    approve = content.get("approve")
    if not isinstance(approve, bool):
        return UNDECIDED[3]
    comment = content.get("comment")
    try:
        await api.decide(run_id, step, approved=approve,
                         comment=comment if isinstance(comment, str) and comment else None,
                         by=BY_MCP)
    except RunConflict as exc:  # first decision wins: someone decided already
        return str(exc)
    return "approved" if approve else "rejected"
