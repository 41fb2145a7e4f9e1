"""MCP tool steps (SPEC §2, §17): one ``tools/call`` on a server started on stdio
(:mod:`brain.executors.mcp_stdio`) or reached over HTTP (:mod:`brain.executors.mcp_remote`).

By default every step and every try has a server (or session) of its own: started,
initialized, one ``tools/call`` — sent with ``send_request``, because
``ClientSession.call_tool`` would also send ``tools/list`` to validate structured
output — and ended. With ``reuse="run"``, the steps of one execution that resolve to the
same server share one session, started by the first of them and ended with the
execution (the run's end, failure, cancel, or its letting go while it waits); one that
died is started afresh by the next step or try. The SDK is imported only when a step
runs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import SecretStr

from brain._errors import StepFailed
from brain._secrets import MIN_SECRET_LENGTH, remember, url_password_forms
from brain.dsl.mcp import header_value_fits
from brain.dsl.model import McpStepSpec, SecretRef, sensitive_header
from brain.executors.base import (
    REDACTED,
    PreparedStep,
    Resolve,
    StepContext,
    StepOutput,
    read_secret,
    resolve_values,
)
from brain.executors.mcp_session import LiveSession, Server, tool_output

__all__ = ["McpExecutor", "tool_output"]



class McpExecutor:
    """Runs ``mcp_tool()`` steps; keeps the sessions its run's steps share."""

    kind = "mcp_tool"

    def __init__(self) -> None:
        self._shared: dict[tuple[Any, ...], LiveSession] = {}
        self._retired: list[LiveSession] = []

    def prepare(self, spec: McpStepSpec, resolve: Resolve, *, mocked: bool = False) -> PreparedStep:
        """Fill in the command's words (or read the URL, headers and bearer token), the
        top-level string args and the env values."""
        secrets: list[str] = []
        # Top-level strings and secrets are resolved; other values keep their types.
        templated = {k: v for k, v in spec.args.items() if isinstance(v, (str, SecretRef))}
        real, shown = resolve_values(templated, resolve, secrets, mocked=mocked)
        args = {k: real.get(k, v) for k, v in spec.args.items()}
        shown_args = {k: shown.get(k, v) for k, v in spec.args.items()}
        if spec.server_command is None:
            place, inputs = _remote_place(spec, secrets, mocked)
        else:
            words = [spec.server_command[0],
                     *(resolve(w, False) for w in spec.server_command[1:])]
            if any("\x00" in word for word in words):
                raise StepFailed("a server_command word contains a NUL byte", retryable=False)
            env, shown_env = resolve_values(spec.env, resolve, secrets, mocked=mocked)
            place = {"words": words, "env": env}
            inputs = {"server_command": words}
            if shown_env:
                inputs["env"] = shown_env
        inputs.update(tool=spec.tool, args=shown_args)
        if spec.reuse == "run":
            inputs["reuse"] = "run"
        return PreparedStep(inputs=inputs, payload={**place, "args": args}, secrets=secrets)

    async def execute(self, spec: McpStepSpec, prepared: PreparedStep,
                      ctx: StepContext) -> StepOutput:
        """Call the tool once on the step's own session, or on the run's shared one."""
        payload = prepared.payload
        if spec.reuse == "run":
            key = _server_key(payload, ctx)
            live = self._shared.get(key)
            if live is None or live.ended:
                if live is not None:
                    self._retired.append(live)  # ended at the run's end, with the others
                live = self._shared[key] = LiveSession(_server(spec, payload, ctx))
            live.server.expect_output(spec.max_output_bytes)
            try:
                return await live.call(spec.tool, payload["args"], ctx)
            except StepFailed as exc:
                prepared.stderr = exc.stderr
                raise
        live = LiveSession(_server(spec, payload, ctx))
        try:
            result = await live.call(spec.tool, payload["args"], ctx)
        except BaseException:
            await live.close()
            prepared.stderr = live.stderr()
            raise
        await live.close()
        return StepOutput(output=result.output, stderr=live.stderr())

    async def close(self) -> None:
        """End the sessions the run's steps shared."""
        shared, self._shared = [*self._shared.values(), *self._retired], {}
        self._retired = []
        await asyncio.gather(*(live.close() for live in shared), return_exceptions=True)


def _server(spec: McpStepSpec, payload: dict[str, Any], ctx: StepContext) -> Server:
    """Where a step's session goes (over HTTP, answers are read as far as the step's
    ``max_output_bytes`` needs)."""
    if "url" in payload:
        from brain.executors.mcp_remote import RemoteServer

        return RemoteServer(payload["url"], payload["headers"], payload["transport"],
                            shown=payload["shown"], max_output_bytes=spec.max_output_bytes)
    from brain.executors.mcp_stdio import StdioServer

    return StdioServer(payload["words"], payload["env"], ctx)


def _server_key(payload: dict[str, Any], ctx: StepContext) -> tuple[Any, ...]:
    """What makes two steps' servers the same (SPEC §17): the command's words, env and
    folder, or the URL, transport and headers; never two runs'."""
    if "url" in payload:
        return (ctx.run_id, payload["transport"], payload["url"],
                tuple(sorted(payload["headers"].items())))
    return (ctx.run_id, "stdio", tuple(payload["words"]), tuple(sorted(payload["env"].items())),
            ctx.workflow_dir)


def _secret_value(value: SecretRef | SecretStr | str, what: str, secrets: list[str],
                  mocked: bool) -> str:
    """A secret's value (a ``secret()`` read now, or literal), remembered for scrubbing."""
    if isinstance(value, SecretRef):
        text = read_secret(value, lenient=mocked)
        if not header_value_fits(text):
            raise StepFailed(f"secret {value.env} cannot be sent as {what}: it must be "
                             f"printable ASCII (no line breaks) of at most 8192 characters",
                             retryable=False)
    else:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if len(text) < MIN_SECRET_LENGTH and not mocked:
            raise StepFailed(f"{what} is shorter than {MIN_SECRET_LENGTH} characters: too short "
                             f"to keep out of stored outputs; use a longer value", retryable=False)
        remember(text)
    secrets.append(text)
    return text


def _remote_place(spec: McpStepSpec, secrets: list[str],
                  mocked: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The URL, headers and transport of a step on a server reached over HTTP, and how
    they are shown (secrets as ``***``)."""
    from brain.executors.llm import shown_endpoint
    from brain.executors.mcp_remote import url_problem

    assert spec.url is not None
    if isinstance(spec.url, SecretRef):
        url, shown_url = _secret_value(spec.url, "the url", secrets, mocked), REDACTED
    else:
        url = spec.url
    problem = None if mocked else url_problem(url)
    if problem is not None:  # scrubbed when stored, as every error is
        raise StepFailed(problem, retryable=False)
    if not isinstance(spec.url, SecretRef):
        _remember_password(url, secrets, mocked)
        shown_url = shown_endpoint(url)
    headers: dict[str, str] = {}
    shown: dict[str, str] = {}
    for name, value in spec.headers.items():
        hidden = isinstance(value, SecretRef) or sensitive_header(name)
        headers[name] = (_secret_value(value, f"the {name} header", secrets, mocked) if hidden
                         else str(value))
        shown[name] = REDACTED if hidden else headers[name]
    if spec.bearer is not None:
        headers["Authorization"] = "Bearer " + _secret_value(spec.bearer, "the bearer token",
                                                             secrets, mocked)
        shown["Authorization"] = "Bearer " + REDACTED
    inputs: dict[str, Any] = {"url": shown_url, "transport": spec.transport}
    if shown:
        inputs["headers"] = shown
    return ({"url": url, "headers": headers, "transport": spec.transport, "shown": shown_url},
            inputs)


def _remember_password(url: str, secrets: list[str], mocked: bool) -> None:
    """A password in the URL is a secret too (scrubbed wherever it shows up, and as the
    ``Basic`` header it becomes); one too short to scrub safely fails the step."""
    forms = url_password_forms(url)
    if not forms:
        return
    password = forms[0]
    if len(password) < MIN_SECRET_LENGTH and not mocked:
        raise StepFailed(f"the password in the url is shorter than {MIN_SECRET_LENGTH} "
                         f"characters: too short to keep out of stored outputs", retryable=False)
    for form in forms:
        remember(form)
    secrets.append(password)
