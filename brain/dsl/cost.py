"""LLM cost (SPEC §26): named rate limits (:class:`Limit`, :func:`limit`) and cached steps
(:class:`Cache`), as a workflow declares them, and the rule of a limit's window.

A limit counts requests and tokens in a sliding window of ``per`` seconds: a request is
let through only when, with it, no window of that length holds more than ``requests``
requests or ``tokens`` tokens (:meth:`Limit.wait_for_room`). Where the uses are kept (in
the process, or in the database for every process) is the runner's and the store's
business; the rule is here, once.

>>> openai = limit("openai", requests=60, tokens=90_000, per="1m")   # doctest: +SKIP
>>> @workflow(limits={"local": Limit(requests=5, per="10s")})       # doctest: +SKIP
... def triage():
...     llm("label", prompt=..., limit="local", cache="7d")
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, model_validator

from brain._clock import parse_duration
from brain._errors import WorkflowDefinitionError
from brain.dsl.nodes import _Lazy

if TYPE_CHECKING:
    from brain.dsl.tracing import Tracer

__all__ = ["Cache", "CacheSpec", "Limit", "declared_limits", "limit", "step_cost_options", "workflow_limits"]

class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Limit(_Frozen):
    """A rate limit (SPEC §26): at most ``requests`` requests and ``tokens`` tokens in any
    window of ``per`` seconds (§16 duration forms: ``"10s"``, ``"1m"``).

    >>> Limit(requests=60, tokens=90_000, per="1m")                  # doctest: +SKIP
    """

    requests: int | None = None
    tokens: int | None = None
    per: float = 60.0

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, data: Any) -> Any:
        if isinstance(data, dict):
            requests, tokens, per = check_limit_values(
                data.get("requests"), data.get("tokens"), data.get("per", "1m"))
            return {**data, "requests": requests, "tokens": tokens, "per": per}
        return data

    @classmethod
    def of(cls, *, requests: int | None = None, tokens: int | None = None,
           per: float | str = "1m") -> Limit:
        """The limit these values give (a :class:`WorkflowDefinitionError` when wrong)."""
        return cls(requests=requests, tokens=tokens, per=per)  # type: ignore[arg-type]

    def wait_for_room(self, uses: list[tuple[float, int, int]], tokens: int, now: float,
                      paused_until: float = 0.0) -> float:
        """How long to wait before one more request reserving ``tokens`` fits (0: now).

        ``uses``: the ``(until, requests, tokens)`` of the uses counted now (each stops
        counting at ``until``); ``paused_until``: a provider's ``Retry-After`` (SPEC §26).
        A request larger than the whole window goes through alone, once nothing else counts.
        """
        if paused_until > now:
            return paused_until - now
        live = sorted(u for u in uses if u[0] > now)
        over_requests = (sum(u[1] for u in live) + 1 - self.requests
                         if self.requests is not None else 0)
        over_tokens = (sum(u[2] for u in live) + tokens - self.tokens
                       if self.tokens is not None and tokens > 0 else 0)
        if over_requests <= 0 and over_tokens <= 0:
            return 0.0
        freed_requests = freed_tokens = 0
        for until, requests, used in live:
            freed_requests += requests
            freed_tokens += used
            if freed_requests >= over_requests and freed_tokens >= over_tokens:
                return until - now
        return live[-1][0] - now if live else 0.0


class CacheSpec(_Frozen):
    """A step's ``cache=`` (SPEC §26): how long an entry serves, and the templates that
    replace the step's resolved inputs in its key (``None``: the inputs)."""

    expire_seconds: float
    key: tuple[str, ...] | None = None


_declared: dict[str, Limit] = {}
_lock = threading.Lock()


def limit(name: str, *, requests: int | None = None, tokens: int | None = None,
          per: float | str = "1m") -> Limit:
    """Declare a rate limit shared by name (module level, before the workflows that use
    it): every step with ``limit=name``, in any workflow of any process sharing the
    database, counts against it.

    >>> limit("openai", requests=60, tokens=90_000, per="1m")        # doctest: +SKIP
    """
    check_limit_name(name)
    made = Limit.of(requests=requests, tokens=tokens, per=per)
    with _lock:
        _declared[name] = made
    return made


def declared_limits() -> Mapping[str, Limit]:
    """The limits declared with :func:`limit` in this process, by name."""
    with _lock:
        return dict(_declared)


def check_limit_name(name: object) -> str:
    """A limit's name: letters, digits, ``_``, ``-`` and ``.``, at most 200 characters."""
    if not isinstance(name, str) or not name or len(name) > 200 or not all(
            c.isascii() and (c.isalnum() or c in "_-.") for c in name):
        raise WorkflowDefinitionError(
            f"a limit's name is letters, digits, '_', '-' and '.' (like 'openai'), "
            f"not {name!r}")
    return name


def workflow_limits(where: str, given: Mapping[str, Limit] | None,
                    used: Iterable[tuple[str, str]]) -> dict[str, Limit]:
    """The limits a workflow's steps use (``used``: ``(step, limit name)``), each from the
    workflow's own ``limits=`` or else a module-level :func:`limit`."""
    own: dict[str, Limit] = {}
    if given is not None:
        if not isinstance(given, Mapping):
            raise WorkflowDefinitionError(f"{where}: limits= takes a dict of names to "
                                          f"Limit(...), not {type(given).__name__}")
        for name, value in given.items():
            check_limit_name(name)
            if not isinstance(value, Limit):
                raise WorkflowDefinitionError(
                    f"{where}: limits[{name!r}] must be a Limit(requests=..., tokens=..., "
                    f"per=...), not {type(value).__name__}")
            own[name] = value
    module = declared_limits()
    found: dict[str, Limit] = {}
    for step, name in used:
        chosen = own.get(name) or module.get(name)
        if chosen is None:
            raise WorkflowDefinitionError(
                f"{where}, step {step!r}: limit {name!r} is not declared: give "
                f"@workflow(limits={{{name!r}: Limit(requests=..., per=...)}}) or call "
                f"limit({name!r}, ...) before the workflow")
        found[name] = chosen
    return found


class Cache:
    """``cache=Cache(expire="7d", key=[...])``: a step's cache with its own key.

    ``expire``: how long an entry serves (§16 duration forms). ``key``: parameters, step
    outputs or texts (templates) that replace the step's resolved inputs in its key; the
    step's kind and fingerprint stay in it. ``cache="7d"`` is ``Cache(expire="7d")``.
    """

    __slots__ = ("expire", "key")

    def __init__(self, expire: float | str = "7d", *, key: Sequence[object] | None = None) -> None:
        self.expire = expire
        self.key = key

    def __repr__(self) -> str:
        return f"Cache(expire={self.expire!r}, key={self.key!r})"


def step_cost_options(tracer: Tracer, step: str, cache: object, limit_name: object,
                      refs: list[str]) -> dict[str, Any]:
    """``cache=`` and ``limit=`` of a step, checked, as :class:`~brain.dsl.model.StepSpec`
    fields (none when unset)."""
    found: dict[str, Any] = {}
    if limit_name is not None:
        if isinstance(limit_name, Limit):
            raise tracer.error(step, "limit= takes the name of a limit (declared with "
                                     "limit(NAME, ...) or @workflow(limits=...)), not a Limit")
        try:
            found["limit"] = check_limit_name(limit_name)
        except WorkflowDefinitionError as exc:
            raise tracer.error(step, f"limit=: {exc}") from None
    if cache is None or cache is False:
        return found
    if not isinstance(cache, Cache):
        cache = Cache(expire=cache)  # type: ignore[arg-type]
    if isinstance(cache.expire, _Lazy):
        raise tracer.error(step, "cache= is never substituted: give a duration like '7d'")
    try:
        seconds = parse_duration(cache.expire)
    except ValueError as exc:
        raise tracer.error(step, f"cache=: {exc}") from None
    if seconds <= 0:
        raise tracer.error(step, "cache=: the expiry must be longer than zero")
    key: tuple[str, ...] | None = None
    if cache.key is not None:
        if isinstance(cache.key, (str, bytes)) or not isinstance(cache.key, Sequence):
            raise tracer.error(step, "Cache(key=...) takes a list of parameters, step outputs "
                                     "or texts")
        key = tuple(tracer.template(step, f"cache key[{i}]", item, refs)
                    for i, item in enumerate(cache.key))
    found["cache"] = CacheSpec(expire_seconds=seconds, key=key)
    return found


def check_limit_values(requests: object, tokens: object, per: object) -> tuple[
        int | None, int | None, float]:
    """``Limit(...)``'s values checked: whole numbers >= 1 (at least one of them) and a
    window longer than zero (§16 duration forms)."""
    for field, value in (("requests", requests), ("tokens", tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise WorkflowDefinitionError(f"Limit: {field} must be a whole number >= 1, "
                                          f"not {value!r}")
    if requests is None and tokens is None:
        raise WorkflowDefinitionError("Limit: give requests=, tokens= or both")
    try:
        seconds = parse_duration(per)
    except ValueError as exc:
        raise WorkflowDefinitionError(f"Limit: per={per!r}: {exc}") from None
    if seconds <= 0:
        raise WorkflowDefinitionError("Limit: per must be longer than zero")
    return requests, tokens, seconds  # type: ignore[return-value]
