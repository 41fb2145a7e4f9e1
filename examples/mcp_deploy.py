"""A typed deploy an agent can call as an MCP tool, with a person's approval in the middle.

    brain mcp serve examples/mcp_deploy.py        # stdio, for a desktop client
    brain serve examples/mcp_deploy.py            # or over HTTP at /mcp

The agent sees one tool, ``deploy``, with ``service`` (required), ``version`` and ``env``
as its typed input and a ``Deployed`` as its result (docs/mcp-server.md). Every call is a
run like any other: stored, visible in the console, resumable. Before anything changes the
run waits for the approval ``go``; a client that can ask its user shows the prompt as a form
(approve, a comment), and the answer is recorded as the decision (``by: "mcp"``). Otherwise
the agent is told the run waits and where a person decides — it cannot approve by itself.

The commands are harmless stand-ins (``echo``): swap in your own.
"""

from typing import Literal

from pydantic import BaseModel

from brain import approval, shell, step, when, workflow


class Deployed(BaseModel):
    service: str
    version: str
    env: str
    approved: bool


@step
def report(service: str, version: str, env: str, approved: bool) -> Deployed:
    return Deployed(service=service, version=version, env=env, approved=approved)


@workflow(mcp=True)
def deploy(service: str, version: str = "latest",
           env: Literal["staging", "prod"] = "staging") -> Deployed:
    """Deploy SERVICE at VERSION to ENV, once a person approves the plan."""
    plan = shell("plan", argv=["echo", f"would deploy {service} {version} to {env}"])
    ok = approval("go", prompt=f"Apply this plan?\n\n{plan}", timeout="4h", default=False)
    with when(ok):
        shell("apply", argv=["echo", f"deployed {service} {version} to {env}"])
    return report(service, version, env, ok)
