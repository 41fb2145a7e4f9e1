"""The immutable description a traced workflow becomes (pydantic models).

Data moves one way: the tracer builds these, the runner only reads them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from brain.dsl.cost import CacheSpec, Limit
from brain.dsl.params import ParamsSpec
from brain.dsl.triggers import TriggerSpec, WebhookTrigger

DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class SecretRef(_Frozen):
    """A value read from the environment variable ``env`` when the step starts.

    Made by :func:`brain.secret`; always shown and stored as ``***``.
    """

    env: str

    def _misuse(self) -> str:
        from brain._errors import WorkflowDefinitionError

        raise WorkflowDefinitionError(
            f"secret({self.env!r}) can only stand for an api_key, an env value or an "
            f"args value, never inside other text")

    __str__ = _misuse

    def __format__(self, spec: str) -> str:
        return self._misuse()


class ParamRef(_Frozen):
    """A run parameter given whole as a ``@step`` argument (SPEC §21): the function gets
    its typed (JSON) value, not its text. ``path``: the parameter and fields it reads."""

    path: tuple[str, ...]

    @property
    def template(self) -> str:
        """The placeholder it stands for, ``{params.NAME...}``."""
        return "{params." + ".".join(self.path) + "}"


class Condition(_Frozen):
    """``when=NODE`` (or ``when(~NODE)``): run only if step ``step``'s output holds
    (does not hold, when ``negated``)."""

    step: str
    negated: bool = False

    def describe(self) -> str:
        """``{step}`` or ``not {step}``, as shown in graphs and errors."""
        return ("not " if self.negated else "") + "{" + self.step + "}"


class ForEachSpec(_Frozen):
    """A ``for_each`` block: its ``steps`` run once per element of ``items``.

    ``items`` is a literal list, or the template ``{NAME}`` of a step whose
    output is a JSON array (``items_step``). Elements are ``{each.ITEM_NAME}``.
    """

    index: int
    items: str | list[Any]
    items_step: str | None = None
    item_name: str = "item"
    max_parallel: int = 4
    steps: tuple[str, ...] = ()


class StepSpec(_Frozen):
    """What every step has, whatever its kind.

    ``upstream`` is every step this one waits for; ``refs`` those whose output
    it reads (data edges: a skipped one skips this step too); ``when`` its
    conditions (all must hold); ``group`` its ``for_each`` block, if any.
    """

    name: str
    kind: str
    position: int
    upstream: tuple[str, ...] = ()
    refs: tuple[str, ...] = ()
    when: tuple[Condition, ...] = ()
    group: int | None = None
    #: Set on the copy of a block's step that runs one instance (``review[3]``: 3).
    instance: int | None = None
    timeout_seconds: float | None = None
    retries: int = 0
    retry_delay_seconds: float = 1.0
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    previous_refs: tuple[str, ...] = ()
    #: ``cache=`` and ``limit=`` (SPEC §26), on the kinds that take them.
    cache: CacheSpec | None = None
    limit: str | None = None


class ShellStepSpec(StepSpec):
    """A ``shell()`` step: ``command`` through ``/bin/sh -c`` or ``argv`` without a shell."""

    kind: Literal["shell"] = "shell"
    command: str | None = None
    argv: tuple[str, ...] | None = None
    stdin: str | None = None
    env: dict[str, str | SecretRef] = Field(default_factory=dict)
    cwd: str | None = None
    quote: bool = True


class FunctionStepSpec(StepSpec):
    """A ``@step`` function call; ``arguments`` are the bound arguments, templates inside."""

    kind: Literal["step"] = "step"
    function: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    func: Callable[..., Any] = Field(exclude=True, repr=False)


class LlmStepSpec(StepSpec):
    """An ``llm()`` step: one chat completion from an OpenAI-compatible endpoint.

    ``None`` fields fall back to ``LLM_MODEL``, ``LLM_BASE_URL`` and
    ``LLM_API_KEY`` when the step starts. A literal key is kept as a
    ``SecretStr`` so it never shows in dumps.
    """

    kind: Literal["llm"] = "llm"
    prompt: str
    system: str | None = None
    model: str | None = None
    provider_url: str | None = None
    api_key: SecretRef | SecretStr | None = None
    temperature: float = 0.7
    max_tokens: int | None = None
    #: ``schema=`` (SPEC §18): the JSON Schema the answer must match, sent as the request's
    #: ``response_format``; the pydantic model it came from, if any (validates the answer;
    #: not dumped: the schema stands for it); the ``json_schema.name`` to send.
    output_schema: dict[str, Any] | None = None
    schema_model: type[BaseModel] | None = Field(default=None, exclude=True, repr=False)
    schema_name: str | None = Field(default=None, exclude=True)


#: Words that make a header's literal value a secret all the same (``Authorization``,
#: ``X-Api-Key``, ``Cookie``...).
SENSITIVE_HEADER_WORDS = ("authorization", "cookie", "token", "key", "secret", "password",
                          "auth", "credential", "session")


def sensitive_header(name: str) -> bool:
    """Whether a header's value is a secret by its name (see :data:`SENSITIVE_HEADER_WORDS`)."""
    return any(word in name.lower() for word in SENSITIVE_HEADER_WORDS)


#: Step options added after the first release, at their defaults (left out of the hash).
_LATER_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("url", None), ("headers", {}), ("bearer", None), ("transport", "stdio"),
    ("reuse", "step"), ("output_schema", None), ("cache", None), ("limit", None))


class McpStepSpec(StepSpec):
    """An ``mcp_tool()`` step: one ``tools/call`` on an MCP server, either started on stdio
    (``server_command``) or reached over HTTP (``url``, SPEC §17).

    ``server_command`` is already split into words; each word is a template
    (never the first). Only top-level string values of ``args`` are templates.
    ``url``, ``headers`` and ``bearer`` are never substituted: literal text or secrets.
    ``reuse``: ``"step"`` (a server or session per step and try) or ``"run"`` (one per
    run, shared by the steps that resolve to the same server).
    """

    kind: Literal["mcp_tool"] = "mcp_tool"
    server_command: tuple[str, ...] | None = None
    url: str | SecretRef | None = None
    headers: dict[str, str | SecretRef] = Field(default_factory=dict)
    bearer: SecretRef | SecretStr | None = None
    transport: Literal["stdio", "streamable-http", "sse"] = "stdio"
    reuse: Literal["step", "run"] = "step"
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str | SecretRef] = Field(default_factory=dict)

    def literal_secrets(self) -> list[str]:
        """Secrets written literally in the step: the values of its sensitive headers (see
        :func:`sensitive_header`), the password in its URL and the ``Basic`` credentials
        it becomes."""
        from brain._secrets import url_password_forms

        found = [v for k, v in self.headers.items() if isinstance(v, str) and sensitive_header(k)]
        return found + (url_password_forms(self.url) if isinstance(self.url, str) else [])


class SleepStepSpec(StepSpec):
    """A ``sleep()`` step: waits ``seconds``, or until the time ``until`` resolves to
    (a template), without holding an executor (SPEC §16)."""

    kind: Literal["sleep"] = "sleep"
    seconds: float | None = None
    until: str | None = None


class ApprovalStepSpec(StepSpec):
    """An ``approval()`` step: waits for a person's yes or no to ``prompt`` (a template);
    ``timeout_seconds`` is how long, ``default`` the answer after that (``None``: fail)."""

    kind: Literal["approval"] = "approval"
    prompt: str
    default: bool | None = None


class WaitForStepSpec(StepSpec):
    """A ``wait_for()`` step: waits for ``signal`` with the key ``key`` resolves to (a
    template; ``None`` matches a signal without one); ``default`` is the output after
    ``timeout_seconds`` (``None``: fail)."""

    kind: Literal["wait_for"] = "wait_for"
    signal: str
    key: str | None = None
    default: str | None = None


class WorkflowStepSpec(StepSpec):
    """A call of another workflow while this one is traced (SPEC §22): a child run of
    ``workflow`` with ``arguments`` (its parameters; templates inside, resolved when the
    step starts). ``child`` is the called workflow itself (not dumped: its name stands for
    it)."""

    kind: Literal["workflow"] = "workflow"
    workflow: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    child: Any = Field(default=None, exclude=True, repr=False)


#: The kinds of step that wait (SPEC §16), each with what it waits for as shown and counted
#: (``waiting_for.kind``, the ``kind`` label of ``brain_runs_waiting``).
WAIT_KINDS = {"sleep": "sleep", "approval": "approval", "wait_for": "signal"}

AnyStepSpec = Annotated[ShellStepSpec | FunctionStepSpec | LlmStepSpec | McpStepSpec
                        | SleepStepSpec | ApprovalStepSpec | WaitForStepSpec | WorkflowStepSpec,
                        Field(discriminator="kind")]


class GraphGroup(_Frozen):
    """A ``for_each`` block as the graph shows it: what it loops over, and its steps."""

    label: str
    steps: tuple[str, ...]
    max_parallel: int


class WorkflowGraph(_Frozen):
    """``nodes``: step names in call order; ``edges``: ``(upstream, downstream)`` pairs;
    ``conditions``: each conditioned step's conditions (``{main}``, ``not {main}``);
    ``groups``: the ``for_each`` blocks."""

    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    conditions: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    groups: tuple[GraphGroup, ...] = ()


class WorkflowSpec(_Frozen):
    """A whole traced workflow.

    ``params_schema`` / ``output_schema``: the JSON Schemas of its parameters and return
    type (SPEC §21), from ``params`` (not dumped: the schemas stand for it); ``output``: what
    it returns, as an output template (see :mod:`brain.dsl.output`), ``None`` for nothing.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True,
                              arbitrary_types_allowed=True)

    name: str
    description: str | None = None
    steps: tuple[AnyStepSpec, ...]
    triggers: tuple[TriggerSpec, ...] = ()
    max_concurrent_runs: int | None = None
    #: A text of ``{trigger...}`` placeholders (SPEC §19): the limit then counts the runs
    #: whose key resolved to the same text.
    concurrency_key: str | None = None
    #: ``@workflow(mcp=True)``: served as a tool by The Brain's MCP server (SPEC §23).
    mcp: bool = False
    source_file: str | None = None
    groups: tuple[ForEachSpec, ...] = ()
    params_schema: dict[str, Any] = Field(default_factory=lambda: ParamsSpec().schema)
    output_schema: dict[str, Any] | None = None
    output: Any = None
    params: ParamsSpec = Field(default_factory=ParamsSpec, exclude=True, repr=False)
    #: The rate limits its steps use (SPEC §26), by name: its own ``limits=`` and the
    #: module-level ``limit()`` declarations they name.
    limits: dict[str, Limit] = Field(default_factory=dict)

    @property
    def graph(self) -> WorkflowGraph:
        """The DAG as plain data."""
        edges = tuple((up, s.name) for s in self.steps for up in s.upstream)
        conditions = {s.name: tuple(c.describe() for c in s.when) for s in self.steps if s.when}
        groups = tuple(GraphGroup(label="for_each " + (g.items if isinstance(g.items, str)
                                                       else f"[{len(g.items)} items]"),
                                  steps=g.steps, max_parallel=g.max_parallel)
                       for g in self.groups)
        return WorkflowGraph(nodes=tuple(s.name for s in self.steps), edges=edges,
                             conditions=conditions, groups=groups)

    def definition_hash(self) -> str:
        """A digest of what the workflow declares (SPEC §11): its name and its steps.

        Step names, kinds, options, references, and the *qualified* name of each
        ``@step`` function — never its module, which differs between a host
        app's ``import flows`` and ``brain worker``'s loader (named after the
        file's path), so one file in two checkouts is one workflow. The file
        path, description, triggers and run limits do not change how a run
        executes, so they are not part of it either.
        """
        steps = []
        for step in self.steps:
            data = step.model_dump(mode="json")
            if isinstance(step, FunctionStepSpec):
                data["function"] = getattr(step.func, "__qualname__", data["function"])
            # refs follow from the templates; conditions and groups count only when used,
            # so workflows written before they existed keep their hash.
            data.pop("refs", None)
            for key in ("when", "group", "instance"):
                if data.get(key) in ((), [], None):
                    data.pop(key, None)
            # Options added later count only when set, for the same reason.
            for key, default in _LATER_DEFAULTS:
                if key in data and data[key] == default:
                    del data[key]
            steps.append(data)
        shape: dict[str, Any] = {"name": self.name, "steps": steps}
        if self.groups:
            shape["groups"] = [g.model_dump(mode="json") for g in self.groups]
        # Parameters and the returned value count only when declared (older workflows
        # keep their hash).
        if self.params.names:
            shape["params"] = self.params_schema
        if self.output is not None:
            shape["output"] = self.output
            shape["output_schema"] = self.output_schema
        text = json.dumps(shape, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @cached_property
    def declared_secrets(self) -> tuple[frozenset[str], tuple[str, ...]]:
        """What the workflow declares secret: the variables of its webhook secrets and
        ``secret()`` values, and its literal ``api_key=`` values."""
        names = {t.secret_env for t in self.triggers if isinstance(t, WebhookTrigger)}
        literals: list[str] = []

        def walk(value: Any) -> None:
            if isinstance(value, SecretRef):
                names.add(value.env)
            elif isinstance(value, SecretStr):
                literals.append(value.get_secret_value())
            elif isinstance(value, BaseModel):
                for field in type(value).model_fields:
                    walk(getattr(value, field))
            elif isinstance(value, dict):
                for item in value.values():
                    walk(item)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    walk(item)

        for step in self.steps:
            walk(step)
            if isinstance(step, McpStepSpec):
                literals.extend(step.literal_secrets())
        return frozenset(names), tuple(literals)
