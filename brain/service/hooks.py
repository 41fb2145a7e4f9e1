"""Webhook routes: which workflow and trigger each ``/hooks/{path}`` reaches."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from brain._errors import WorkflowLoadError
from brain.dsl.triggers import WebhookTrigger

if TYPE_CHECKING:
    from brain.workflow import Workflow


@dataclass(frozen=True)
class Hook:
    """A webhook route: the workflow and its trigger."""

    workflow: Workflow
    trigger: WebhookTrigger

    @property
    def secret(self) -> str | None:
        """The HMAC secret, read from the environment now (``None`` when unset)."""
        return os.environ.get(self.trigger.secret_env) or None


def hook_routes(workflows: Mapping[str, Workflow]) -> dict[str, Hook]:
    """``/hooks/{path}`` → hook; a duplicate path is an error naming both workflows."""
    routes: dict[str, Hook] = {}
    for wf in workflows.values():
        for trig in wf.triggers:
            if isinstance(trig, WebhookTrigger):
                path = (trig.path or wf.name).strip("/")
                if path in routes:
                    raise WorkflowLoadError(
                        f"webhook path /hooks/{path} is used by both {routes[path].workflow.name!r} "
                        f"and {wf.name!r}")
                routes[path] = Hook(wf, trig)
    return routes
