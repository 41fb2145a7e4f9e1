"""``mcp_tool()``: one tool call on an MCP server, started on stdio or reached over HTTP
(SPEC §2, §17)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr

from brain import placeholders, shell_check
from brain.dsl.cost import step_cost_options
from brain.dsl.helpers import common_options, env_templates
from brain.dsl.model import McpStepSpec, SecretRef
from brain.dsl.nodes import StepNode, _Lazy
from brain.dsl.tracing import Tracer, require_tracer

TRANSPORTS = ("stdio", "streamable-http", "sse")
REUSES = ("step", "run")


def _nested_literal(tracer: Tracer, step: str, key: str, value: object) -> object:
    """A nested ``args`` value: passed as written, so no node may hide inside it."""
    if isinstance(value, (_Lazy, SecretRef)):
        raise tracer.error(step, f"args[{key!r}]: step outputs, trigger fields and secrets may "
                                 f"only be top-level args values (nested values are passed as "
                                 f"written)")
    if isinstance(value, (list, tuple)):
        return [_nested_literal(tracer, step, key, v) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise tracer.error(step, f"args[{key!r}]: dict keys must be strings, not {k!r}")
            out[k] = _nested_literal(tracer, step, key, v)
        return out
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise tracer.error(step, f"args[{key!r}]: {type(value).__name__} is not JSON data")


def _server_words(tracer: Tracer, name: str, server_command: object, refs: list[str]) -> list[str]:
    """``server_command`` as the words of the program to start (templates in all but the
    first, which must be written literally), checked like ``argv=``."""
    if isinstance(server_command, str):
        try:
            words = shlex.split(server_command)
        except ValueError as exc:
            raise tracer.error(name, f"server_command cannot be split into words: {exc}") from None
    elif isinstance(server_command, _Lazy):
        raise tracer.error(name, "server_command cannot be a step output: the program must be "
                                 "written in the workflow")
    elif isinstance(server_command, Sequence):
        words = [tracer.template(name, f"server_command[{i}]", w, []) for i, w in
                 enumerate(server_command)]
    else:
        raise tracer.error(name, "server_command must be a string or a list of words")
    if not words or not words[0].strip():
        raise tracer.error(name, "empty server_command")
    if placeholders.has_placeholders(words[0]):
        raise tracer.error(name, f"a placeholder cannot stand in the program to run "
                                 f"({words[0]!r}): write the executable literally")
    words = [words[0], *(tracer.template(name, "server_command", w, refs) for w in words[1:])]
    problem = shell_check.argv_problem(words)
    if problem:
        raise tracer.error(name, f"server_command: {problem}")
    return words


def _literal(tracer: Tracer, step: str, field: str, value: object) -> str | SecretRef:
    """A value that is never substituted (SPEC §17): literal text or a ``secret()``."""
    if isinstance(value, SecretRef):
        return value
    if isinstance(value, _Lazy):
        raise tracer.error(step, f"{field} is never substituted: write it literally or use "
                                 f"secret('ENV_NAME'), not a step output or trigger field")
    if not isinstance(value, str):
        raise tracer.error(step, f"{field} must be a string or secret('ENV_NAME'), not "
                                 f"{type(value).__name__}")
    if placeholders.has_placeholders(value):
        raise tracer.error(step, f"{field} is never substituted, and {value!r} holds a "
                                 f"placeholder: write it literally or use secret('ENV_NAME')")
    if "\x00" in value or "\r" in value or "\n" in value:
        raise tracer.error(step, f"{field} must not contain NUL or line breaks")
    return value


#: The longest header value (or bearer token) a step sends.
HEADER_CHARS = 8192


def url_problem(url: str) -> str | None:
    """Why ``url`` can never be requested (scheme, characters, port, host), or ``None``."""
    if not url.startswith(("http://", "https://")):
        return "url must start with http:// or https://"
    if any(not 33 <= ord(c) < 127 for c in url):
        return "url must be ASCII with no spaces or control characters (percent-encode them)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on an out-of-range or malformed port
    except ValueError as exc:
        return f"url is malformed: {exc}"
    if not parts.hostname:
        return "url has no host"
    return None


def _header_value(tracer: Tracer, step: str, field: str, value: object) -> str | SecretRef:
    """A header value or bearer token: literal ASCII text (or a secret, checked when the
    step starts)."""
    text = _literal(tracer, step, field, value)
    if isinstance(text, str) and not header_value_fits(text):
        raise tracer.error(step, f"{field} must be printable ASCII of at most {HEADER_CHARS} "
                                 f"characters")
    return text


def header_value_fits(text: str) -> bool:
    """Whether ``text`` can be sent as a header value: printable ASCII (tabs allowed), no
    line breaks, at most :data:`HEADER_CHARS` characters."""
    return len(text) <= HEADER_CHARS and all(32 <= ord(c) < 127 or c == "\t" for c in text)


def _remote(tracer: Tracer, name: str, url: object, headers: Mapping[str, object] | None,
            bearer: object, transport: str) -> dict[str, Any]:
    """The checked fields of a step on a server reached over HTTP."""
    target = _literal(tracer, name, "url", url)
    if isinstance(target, str):
        problem = url_problem(target)
        if problem:
            raise tracer.error(name, f"{problem} (got {target!r})")
    if transport == "stdio":
        transport = "streamable-http"
    values: dict[str, str | SecretRef] = {}
    for key, value in (headers or {}).items():
        if not isinstance(key, str) or not key or len(key) > 200 \
                or any(not 33 <= ord(c) < 127 or c in ':()<>@,;\\"/[]?={}' for c in key):
            raise tracer.error(name, f"bad header name {key!r}: letters, digits and "
                                     f"!#$%&'*+-.^_`|~ only")
        values[key] = _header_value(tracer, name, f"headers[{key!r}]", value)
    if any(k.lower() == "authorization" for k in values) and bearer is not None:
        raise tracer.error(name, "give the Authorization header or bearer=, not both")
    token: SecretRef | SecretStr | None
    if bearer is None or isinstance(bearer, SecretRef):
        token = bearer
    else:
        literal = _header_value(tracer, name, "bearer", bearer)
        token = literal if isinstance(literal, SecretRef) else SecretStr(literal)
    return {"url": target, "headers": values, "bearer": token, "transport": transport}


def _arguments(tracer: Tracer, name: str, args: Mapping[str, object] | None,
               refs: list[str]) -> dict[str, object]:
    """``args``: top-level strings and step outputs as templates, secrets as they are,
    anything else passed as written."""
    values: dict[str, object] = {}
    for key, value in (args or {}).items():
        if not isinstance(key, str):
            raise tracer.error(name, f"args keys must be strings, not {key!r}")
        if isinstance(value, SecretRef):
            values[key] = value
        elif isinstance(value, (str, _Lazy)):
            values[key] = tracer.template(name, f"args[{key!r}]", value, refs)
        else:
            values[key] = _nested_literal(tracer, name, key, value)
    return values


def mcp_tool(name: str, server_command: str | Sequence[str] | None = None,
             tool: str | None = None, *, url: str | SecretRef | None = None,
             args: Mapping[str, object] | None = None, env: Mapping[str, object] | None = None,
             headers: Mapping[str, object] | None = None, bearer: str | SecretRef | None = None,
             transport: str = "stdio", reuse: str = "step", timeout_seconds: float | None = 30,
             retries: int = 0, retry_delay_seconds: float = 1.0,
             max_output_bytes: int | None = None, after: Sequence[object] | None = None,
             when: object = None, cache: object = None, limit: str | None = None) -> StepNode:
    """Call one tool on an MCP server: started on stdio for this step alone
    (``server_command``), or reached over HTTP (``url``, streamable HTTP, or legacy SSE
    with ``transport="sse"``).

    ``server_command`` is split into words now, like a shell would (no shell
    runs); a placeholder fills its own word and never adds words. Top-level
    string values of ``args`` are substituted; other values keep their types.
    ``url``, ``headers`` and ``bearer`` are literal text or ``secret()``, never
    substituted. ``reuse="run"`` shares one server (or session) between the
    steps of a run that resolve to the same one. ``cache=`` and ``limit=`` as for
    ``llm()`` (SPEC §26).

    >>> notes = mcp_tool("recall", server_command="python -m memory_vault.mcp",  # doctest: +SKIP
    ...                  tool="recall", args={"query": trigger.body, "limit": 10})
    >>> issues = mcp_tool("issues", url="https://mcp.example.com/mcp",  # doctest: +SKIP
    ...                   bearer=secret("GITHUB_MCP_TOKEN"), tool="list_issues")
    """
    tracer = require_tracer("mcp_tool")
    name = tracer.check_name(name)
    refs: list[str] = []
    opts = common_options(tracer, name, timeout_seconds, retries, retry_delay_seconds,
                          max_output_bytes)
    if transport not in TRANSPORTS:
        raise tracer.error(name, f"transport must be one of {', '.join(TRANSPORTS)}, not "
                                 f"{transport!r}")
    if reuse not in REUSES:
        raise tracer.error(name, f"reuse must be 'step' (the default) or 'run', not {reuse!r}")
    if (server_command is None) == (url is None):
        raise tracer.error(name, "give exactly one of server_command= (a server started on "
                                 "stdio) or url= (a server reached over HTTP)")
    place: dict[str, Any]
    if server_command is not None:
        if transport != "stdio":
            raise tracer.error(name, f"transport={transport!r} needs url=, not server_command=")
        if headers or bearer is not None:
            raise tracer.error(name, "headers= and bearer= are for servers reached by url=")
        place = {"server_command": tuple(_server_words(tracer, name, server_command, refs))}
    else:
        if env:
            raise tracer.error(name, "env= is for servers started by server_command=")
        place = _remote(tracer, name, url, headers, bearer, transport)
    if not isinstance(tool, str) or not tool:
        raise tracer.error(name, "tool must be the tool's name, a non-empty string")
    if placeholders.has_placeholders(tool):
        raise tracer.error(name, f"the tool name is never substituted; {tool!r} holds a "
                                 f"placeholder")
    arg_values = _arguments(tracer, name, args, refs)
    env_values = env_templates(tracer, name, env, refs)
    cost = step_cost_options(tracer, name, cache, limit, refs)
    after_names = tracer.after_names(name, after)
    spec = McpStepSpec(
        name=name, **tracer.placement(name, refs, after_names, when), **place, tool=tool,
        args=arg_values, env=env_values, reuse=reuse, **opts, **cost)  # type: ignore[arg-type]
    return tracer.add(spec)
