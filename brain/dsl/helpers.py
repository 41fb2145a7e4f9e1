"""Step helpers: ``shell()``, ``llm()`` and ``secret()``; each records a step (``mcp_tool()``
is in :mod:`brain.dsl.mcp`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, SecretStr

from brain import placeholders, shell_check
from brain._errors import WorkflowDefinitionError
from brain.dsl.cost import step_cost_options
from brain.dsl.model import LlmStepSpec, SecretRef, ShellStepSpec
from brain.dsl.nodes import StepNode, _Lazy
from brain.dsl.tracing import Tracer, require_tracer
from brain.shell_check.environment import env_problem


def secret(env: str) -> SecretRef:
    """A secret read from environment variable ``env`` when the step starts.

    It may stand for an ``env`` value, an ``args`` value or an ``api_key``;
    it is always shown and stored as ``***``.
    """
    if not isinstance(env, str) or not env or "=" in env or "\x00" in env:
        shown = repr(env) if isinstance(env, str) else f"a {type(env).__name__}"
        raise WorkflowDefinitionError(
            f"secret() takes the name of an environment variable written in the workflow, "
            f"like secret('GITHUB_TOKEN'), not {shown}")
    return SecretRef(env=env)


def common_options(tracer: Tracer, name: str, timeout_seconds: float | None, retries: int,
                   retry_delay_seconds: float, max_output_bytes: int | None) -> dict[str, object]:
    """Check and gather the options every step takes."""
    if timeout_seconds is not None and not timeout_seconds > 0:
        raise tracer.error(name, f"timeout_seconds must be positive, not {timeout_seconds}")
    if not isinstance(retries, int) or retries < 0:
        raise tracer.error(name, f"retries must be a whole number >= 0, not {retries!r}")
    if retry_delay_seconds < 0:
        raise tracer.error(name, "retry_delay_seconds must not be negative")
    opts: dict[str, object] = {"timeout_seconds": timeout_seconds, "retries": retries,
                               "retry_delay_seconds": retry_delay_seconds}
    if max_output_bytes is not None:
        if max_output_bytes <= 0:
            raise tracer.error(name, "max_output_bytes must be positive")
        opts["max_output_bytes"] = max_output_bytes
    return opts


def shell(name: str, command: object = None, *, argv: Sequence[object] | None = None,
          stdin: object = None, env: Mapping[str, object] | None = None, cwd: str | None = None,
          quote: bool = True, timeout_seconds: float | None = 60, retries: int = 0,
          retry_delay_seconds: float = 1.0, max_output_bytes: int | None = None,
          after: Sequence[object] | None = None, when: object = None, cache: object = None,
          limit: str | None = None) -> StepNode:
    """A shell step; its output is stdout without trailing newlines.

    ``command`` runs through ``/bin/sh -c`` with each placeholder's value
    shell-quoted; ``argv`` runs with no shell at all. ``cache="7d"`` (or
    :class:`~brain.Cache`) reuses the output of an earlier identical run of the step;
    ``limit="NAME"`` counts each try against a named rate limit (SPEC §26).

    >>> @workflow                                    # doctest: +SKIP
    ... def hello():
    ...     who = shell("who", command="whoami")
    ...     shell("greet", argv=["echo", f"hello {who}"])
    """
    tracer = require_tracer("shell")
    name = tracer.check_name(name)
    refs: list[str] = []
    opts = common_options(tracer, name, timeout_seconds, retries, retry_delay_seconds,
                          max_output_bytes)
    cmd_text: str | None = None
    argv_items: tuple[str, ...] | None = None
    if (command is None) == (argv is None):
        raise tracer.error(name, "give exactly one of command= (run by /bin/sh) or argv= (no shell)")
    if command is not None:
        cmd_text = tracer.template(name, "command", command, refs)
        if not cmd_text.strip():
            raise tracer.error(name, "empty command")
        if quote:
            problem = shell_check.shell_problem(cmd_text)
            if problem:
                raise tracer.error(name, problem)
    else:
        if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence):
            raise tracer.error(name, "argv must be a list of strings, e.g. argv=['ls', '-l']")
        argv_items = tuple(tracer.template(name, f"argv[{i}]", a, refs) for i, a in enumerate(argv))
        if not argv_items or not argv_items[0].strip():
            raise tracer.error(name, "empty command: argv needs at least the program to run")
        if placeholders.has_placeholders(argv_items[0]):
            raise tracer.error(name, f"a placeholder cannot stand in the program to run "
                                     f"(argv[0] is {argv_items[0]!r}): write the executable "
                                     f"literally and pass values as later argv items")
        problem = shell_check.argv_problem(argv_items)
        if problem:
            raise tracer.error(name, f"argv: {problem}")
    stdin_text = None if stdin is None else tracer.template(name, "stdin", stdin, refs)
    if stdin_text is not None:
        # What reads the step's input must read it as data, not as its program (sh, python3).
        problem = shell_check.stdin_problem(cmd_text if cmd_text is not None
                                            else argv_items or (), stdin_text)
        if problem:
            raise tracer.error(name, problem)
    env_values = env_templates(tracer, name, env, refs)
    if cwd is not None and not isinstance(cwd, str):
        raise tracer.error(name, "cwd must be a string path")
    cost = step_cost_options(tracer, name, cache, limit, refs)
    after_names = tracer.after_names(name, after)
    spec = ShellStepSpec(
        name=name, **tracer.placement(name, refs, after_names, when),
        command=cmd_text, argv=argv_items, stdin=stdin_text, env=env_values, cwd=cwd,
        quote=quote, **opts, **cost)  # type: ignore[arg-type]
    return tracer.add(spec)


def _plain(tracer: Tracer, step: str, field: str, value: object) -> str | None:
    """A field that is never substituted (model, URL): a plain string or ``None``."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, _Lazy):
        raise tracer.error(step, f"{field} is never substituted: give a plain string, "
                                 f"not a step output or trigger field")
    raise tracer.error(step, f"{field} must be a string, not {type(value).__name__}")


def llm(name: str, prompt: object, *, system: object = None, model: str | None = None,
        provider_url: str | None = None, api_key: str | SecretRef | None = None,
        temperature: float = 0.7, max_tokens: int | None = None,
        timeout_seconds: float | None = 120, retries: int = 0, retry_delay_seconds: float = 1.0,
        max_output_bytes: int | None = None, after: Sequence[object] | None = None,
        when: object = None, schema: type[BaseModel] | dict[str, Any] | None = None,
        cache: object = None, limit: str | None = None) -> StepNode:
    """An LLM step: ``POST {provider_url}/chat/completions`` on any OpenAI-compatible server.

    ``model``, ``provider_url`` and ``api_key`` fall back to ``LLM_MODEL``,
    ``LLM_BASE_URL`` and ``LLM_API_KEY`` when ``None``. The output is
    ``choices[0].message.content``.

    ``schema`` (a pydantic model class or a JSON Schema dict) asks for a structured
    answer: it is sent as ``response_format``, the answer must be JSON valid against it
    (the model is asked once more if not), and the output is that JSON, compact. A
    ``@step`` parameter annotated with the model receives it parsed.

    ``cache="7d"`` (or :class:`~brain.Cache`) answers an identical request from an
    earlier answer instead of asking the model again; ``limit="NAME"`` waits for room
    in a named rate limit, reserving ``max_tokens`` plus the prompt's estimate (SPEC §26).

    >>> summary = llm("summary", prompt=f"Two sentences: {notes}",    # doctest: +SKIP
    ...               model="ministral-3b", max_tokens=400)
    >>> verdict = llm("verdict", prompt=f"Is this urgent? {notes}",    # doctest: +SKIP
    ...               schema=Verdict)       # class Verdict(BaseModel): urgent: bool
    """
    tracer = require_tracer("llm")
    name = tracer.check_name(name)
    refs: list[str] = []
    opts = common_options(tracer, name, timeout_seconds, retries, retry_delay_seconds,
                          max_output_bytes)
    prompt_text = tracer.template(name, "prompt", prompt, refs)
    system_text = None if system is None else tracer.template(name, "system", system, refs)
    model_name = _plain(tracer, name, "model", model)
    url = _plain(tracer, name, "provider_url", provider_url)
    if url is not None and not url.startswith(("http://", "https://")):
        raise tracer.error(name, f"provider_url must start with http:// or https://, like "
                                 f"'http://localhost:1234/v1' (got {url!r})")
    key: SecretRef | SecretStr | None
    if api_key is None or isinstance(api_key, SecretRef):
        key = api_key
    elif isinstance(api_key, str):
        key = SecretStr(api_key)
    else:
        raise tracer.error(name, "api_key must be a string or secret('ENV_NAME')")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not 0 <= temperature <= 2:
        raise tracer.error(name, f"temperature must be a number from 0 to 2, not {temperature!r}")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise tracer.error(name, f"max_tokens must be a whole number >= 1, not {max_tokens!r}")
    output_schema, schema_model, schema_name = (None, None, None) if schema is None \
        else _answer_schema(tracer, name, schema)
    cost = step_cost_options(tracer, name, cache, limit, refs)
    after_names = tracer.after_names(name, after)
    spec = LlmStepSpec(
        name=name, **tracer.placement(name, refs, after_names, when), prompt=prompt_text, system=system_text,
        model=model_name, provider_url=url, api_key=key, temperature=float(temperature),
        max_tokens=max_tokens, output_schema=output_schema, schema_model=schema_model,
        schema_name=schema_name, **opts, **cost)  # type: ignore[arg-type]
    return tracer.add(spec)


def _answer_schema(tracer: Tracer, step: str, schema: object
                   ) -> tuple[dict[str, Any], type[BaseModel] | None, str]:
    """``schema=`` as (its JSON Schema, its pydantic model if any, its ``json_schema.name``)."""
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            json_schema = schema.model_json_schema()
        except Exception as exc:  # a field type with no JSON Schema, an undefined forward ref
            raise tracer.error(step, f"schema={schema.__name__} has no JSON Schema: {exc}") from None
        # The name OpenAI accepts: ^[a-zA-Z0-9_-]{1,64}$ (a class name may hold other letters).
        return json_schema, schema, re.sub(r"[^a-zA-Z0-9_-]", "_", schema.__name__)[:64] or "answer"
    if not isinstance(schema, dict):
        hint = " (the class, not an instance)" if isinstance(schema, BaseModel) else ""
        raise tracer.error(step, f"schema must be a pydantic model class{hint} or a JSON Schema "
                                 f"dict, not {type(schema).__name__}")
    try:
        # Stored and hashed as JSON; a copy, so later changes to the caller's dict do not count.
        plain = json.loads(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise tracer.error(step, f"schema must be JSON data (a JSON Schema dict): {exc}") from None
    from jsonschema.exceptions import SchemaError  # only for workflows that use a dict schema
    from jsonschema.validators import validator_for

    try:
        validator_for(plain).check_schema(plain)
    except SchemaError as exc:
        where = "".join(f"[{p!r}]" for p in exc.path)
        raise tracer.error(step, f"schema is not a valid JSON Schema: {exc.message}"
                                 + (f" at schema{where}" if where else "")) from None
    return plain, None, "answer"


def env_templates(tracer: Tracer, step: str, env: Mapping[str, object] | None,
                   refs: list[str]) -> dict[str, str | SecretRef]:
    """``env=`` values as templates (or secrets), with checked variable names; a
    placeholder may not fill a variable that chooses code (``PATH``, ``LD_PRELOAD``...,
    the table of :mod:`brain.shell_check.environment`)."""
    values: dict[str, str | SecretRef] = {}
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not key or "=" in key or "\x00" in key:
            raise tracer.error(step, f"bad environment variable name {key!r}")
        if isinstance(value, SecretRef):
            values[key] = value  # the operator's own environment: trusted
            continue
        text = tracer.template(step, f"env[{key!r}]", value, refs)
        problem = env_problem(key, text)
        if problem:
            raise tracer.error(step, problem)
        values[key] = text
    return values
