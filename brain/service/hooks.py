"""Webhook routes: which workflow and trigger each ``/hooks/{path}`` reaches, and the
parameters a delivery's body gives its run."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def body_params(body: str, params_schema: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters a delivery's body gives its run: when the body is a JSON object, its
    keys that name a parameter of the workflow (``params_schema``'s properties) with their
    values; the other keys are ignored. Any other body gives none (defaults apply).

    >>> body_params('{"service": "api", "ref": "main"}', {"properties": {"service": {}}})
    {'service': 'api'}
    """
    names = params_schema.get("properties") or {}
    if not names or not body.lstrip().startswith("{"):
        return {}
    try:
        value = json.loads(body, parse_constant=_not_json)
    except (ValueError, RecursionError):  # not JSON after all (or NaN): the body is text
        return {}
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if k in names}
