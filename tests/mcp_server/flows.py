"""Workflows the MCP server tests offer as tools (loaded by path, like ``brain serve`` does)."""

import asyncio

from pydantic import BaseModel

from brain import approval, shell, step, when, workflow


class Greeting(BaseModel):
    text: str
    loud: bool


@step
def greet(name: str, loud: bool) -> Greeting:
    text = f"hello {name}"
    return Greeting(text=text.upper() if loud else text, loud=loud)


@workflow(mcp=True)
def hello(name: str, loud: bool = False) -> Greeting:
    """Greet NAME, loudly when asked."""
    return greet(name, loud)


@workflow(mcp=True)
def broken() -> str:
    """Always fails."""
    return shell("boom", argv=["sh", "-c", "echo going down >&2; exit 3"])


@step
async def nap(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return f"rested {seconds}s"


@workflow(mcp=True)
def slow(seconds: float = 1.0) -> str:
    """Rest for SECONDS, three times."""
    nap(seconds)
    nap(seconds)
    return nap(seconds)


@workflow(mcp=True)
def deploy(service: str) -> str | None:
    """Deploy SERVICE once a person approves."""
    ok = approval("go", prompt=f"Deploy {service} to production?")
    with when(ok):
        done = shell("apply", argv=["echo", f"deployed {service}"])
    return done


@workflow
def hidden() -> str:
    """Not offered: no mcp=True."""
    return shell("quiet", argv=["true"])
