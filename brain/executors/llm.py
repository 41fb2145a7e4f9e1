"""LLM steps: one ``POST {base}/chat/completions`` to any OpenAI-compatible server.

LM Studio, Ollama, vLLM, llama.cpp's server and OpenAI all speak this wire
format. Fields left ``None`` fall back to ``LLM_BASE_URL``, ``LLM_API_KEY`` and
``LLM_MODEL``, read where the run (or the serving process) starts
(:class:`~brain.executors.base.LlmDefaults`). httpx is imported only here, when a
workflow has an LLM step.
"""

from __future__ import annotations

import time
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

from brain._errors import StepFailed
from brain._secrets import MIN_SECRET_LENGTH, remember, scrub
from brain.dsl.model import LlmStepSpec, SecretRef
from brain.executors.base import (
    REDACTED,
    LlmDefaults,
    PreparedStep,
    Resolve,
    StepContext,
    StepOutput,
    read_secret,
    tail_margin,
)
from brain.executors.json_budget import StructureCounter, structure_limit
from brain.executors.llm_answer import (
    ERROR_BODY_BYTES,
    answer_content,
    answer_limit,
    count_usage,
    json_of,
    output_bytes,
    read_within,
)
from brain.executors.llm_answer import preview as _preview  # the name tests import
from brain.executors.llm_schema import (
    checked_answer_apart,
    json_object_form,
    reask_text,
    refuses_json_schema,
    response_format,
    warm_checker,
)

if TYPE_CHECKING:
    import ssl

    import httpx

    from brain.executors.steplog import StepLog
    from brain.executors.traced import StepTrace

DEFAULT_BASE_URL = "http://localhost:1234/v1"
_MAX_RETRY_AFTER = 600.0


def _replace_userinfo(url: str, replacement: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, replacement + host, parts.path, parts.query, parts.fragment))


def shown_endpoint(url: str) -> str:
    """An endpoint URL as it may be shown and stored: any user and password replaced by
    ``***`` (database URLs have their own rules: ``brain.store.urls.redact_url``)."""
    return _replace_userinfo(url, "***@")


def _without_userinfo(url: str) -> str:
    return _replace_userinfo(url, "")


def chat_url(base: str) -> str:
    """``{base}/chat/completions``; a trailing slash on the base does not matter."""
    return base.rstrip("/") + "/chat/completions"


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (a number or an HTTP date)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        import email.utils  # an HTTP date: rare, and email is a dozen modules

        try:
            when = email.utils.parsedate_to_datetime(value)
        except (ValueError, TypeError):  # neither seconds nor a date: ignore it
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER)


@lru_cache(maxsize=256)  # a step per run and per try checks the same few URLs
def _check_url(url: str) -> None:
    """A base URL that cannot be requested fails the step now, saying so."""
    import httpx

    try:
        urlsplit(url).port  # noqa: B018 - raises on an out-of-range or malformed port
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as exc:
        try:
            shown = shown_endpoint(url)
        except ValueError:
            shown = "the provider URL"
        raise StepFailed(f"{shown} is not a usable URL ({exc}); check provider_url or "
                         f"LLM_BASE_URL", retryable=False) from None


def _remember_url_password(url: str) -> None:
    """A password in the provider URL is a secret too (scrubbed wherever it shows up)."""
    if "@" not in url:  # no user or password: nothing to remember (the common case, fast)
        return
    import base64
    from urllib.parse import unquote

    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return
    if password:
        password = unquote(password)
        if len(password) < MIN_SECRET_LENGTH:
            raise StepFailed(f"the password in the provider URL is shorter than {MIN_SECRET_LENGTH} "
                             f"characters: too short to keep out of stored outputs", retryable=False)
        remember(password)
        # As an HTTP client sends it (Basic auth), in case a server echoes it back.
        remember(base64.b64encode(f"{unquote(user or '')}:{password}".encode()).decode())


class LlmExecutor:
    """Runs ``llm()`` steps with one pooled ``httpx.AsyncClient`` per run."""

    kind = "llm"

    def __init__(self, defaults: LlmDefaults | None = None) -> None:
        #: ``LLM_MODEL``, ``LLM_BASE_URL``, ``LLM_API_KEY`` (read now when not given).
        self.defaults = defaults or LlmDefaults.from_environment()
        self._client: httpx.AsyncClient | None = None
        #: Endpoints that refused ``response_format`` of type ``json_schema`` in this run.
        self._json_object_urls: set[str] = set()

    def prepare(self, spec: LlmStepSpec, resolve: Resolve, *, mocked: bool = False) -> PreparedStep:
        """Resolve prompt and system; apply the environment fallbacks; build the request."""
        model = spec.model or self.defaults.model
        if not model and not mocked:
            raise StepFailed("no model given: set model= on the llm() step or LLM_MODEL in the "
                             "environment", retryable=False)
        base = spec.provider_url or self.defaults.base_url or DEFAULT_BASE_URL
        if not base.startswith(("http://", "https://")):
            raise StepFailed(f"LLM_BASE_URL must start with http:// or https://, like "
                             f"{DEFAULT_BASE_URL!r} (got {shown_endpoint(base)!r})", retryable=False)
        _check_url(base)
        key: str | None
        secrets: list[str] = []
        if isinstance(spec.api_key, SecretRef):
            key = read_secret(spec.api_key, lenient=mocked)
        elif isinstance(spec.api_key, SecretStr):
            key = spec.api_key.get_secret_value()
        else:
            key = self.defaults.api_key
        if key:
            if len(key) < MIN_SECRET_LENGTH and not mocked:
                raise StepFailed(f"the API key is shorter than {MIN_SECRET_LENGTH} characters: too "
                                 f"short to keep out of stored outputs; use a longer key",
                                 retryable=False)
            remember(key)
            secrets.append(key)
        _remember_url_password(base)
        prompt = resolve(spec.prompt, False)
        system = None if spec.system is None else resolve(spec.system, False)
        messages = ([{"role": "system", "content": system}] if system is not None else [])
        messages.append({"role": "user", "content": prompt})
        body: dict[str, Any] = {"model": model, "messages": messages,
                                "temperature": spec.temperature}
        if spec.max_tokens is not None:
            body["max_tokens"] = spec.max_tokens
        if spec.output_schema is not None:
            body["response_format"] = response_format(spec)
        url = chat_url(base)
        if key:
            url = _without_userinfo(url)  # the Bearer key authenticates; URL credentials would win
        inputs: dict[str, Any] = {"prompt": prompt}
        if system is not None:
            inputs["system"] = system
        inputs.update(model=model, url=shown_endpoint(url), temperature=spec.temperature)
        if spec.max_tokens is not None:
            inputs["max_tokens"] = spec.max_tokens
        if key:
            inputs["api_key"] = REDACTED
        if spec.output_schema is not None:
            inputs["schema"] = spec.schema_name
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        payload = {"url": url, "body": body, "headers": headers,
                   "limit": answer_limit(spec.max_output_bytes),
                   "values": structure_limit(spec.max_output_bytes)}
        return PreparedStep(inputs=inputs, payload=payload, secrets=secrets,
                            reserve_tokens=reserved_tokens(body))

    async def execute(self, spec: LlmStepSpec, prepared: PreparedStep,
                      ctx: StepContext) -> StepOutput:
        """Send the request; return ``choices[0].message.content``.

        With a schema, the output is the validated answer's compact JSON; an answer that
        does not match is shown its error and asked once more (in this same try). A try that
        fails after an answer (it does not match, or the step times out while checking it)
        keeps the last answer as its output.
        """
        body: dict[str, Any] = prepared.payload["body"]
        warm_checker(spec)  # it starts while the model answers
        content = await self._ask(prepared.payload, body, ctx, entered=True)
        if spec.output_schema is None:
            return StepOutput(output=content)
        prepared.output = _kept(content, spec.max_output_bytes)  # if the try ends here
        output, reason = await _checked(spec, content, ctx.log)
        if output is None:
            messages = [*body["messages"], {"role": "assistant", "content": content},
                        {"role": "user", "content": reask_text(reason)}]
            content = await self._ask(prepared.payload, {**body, "messages": messages}, ctx)
            prepared.output = _kept(content, spec.max_output_bytes)
            output, reason = await _checked(spec, content, ctx.log)
        if output is None:  # the last answer is kept, as a failed shell step keeps its stdout
            raise StepFailed(f"answer does not match the schema: {reason}", retryable=False,
                             output=prepared.output)
        return StepOutput(output=output)

    async def _ask(self, payload: dict[str, Any], body: dict[str, Any], ctx: StepContext, *,
                   entered: bool = False) -> str:
        """One question (see :meth:`_request`). A server that refuses ``response_format`` of
        type ``json_schema`` (llama-cpp-python's takes ``json_object`` with a ``schema``) is
        asked in that form instead, here and for the rest of the run. ``entered``: the
        runner let the first request through the step's rate limit already."""
        url: str = payload["url"]
        if "response_format" not in body:
            return await self._request(payload, body, ctx, entered)
        if url in self._json_object_urls:
            return await self._request(payload, json_object_form(body), ctx, entered)
        try:
            return await self._request(payload, body, ctx, entered)
        except _RefusedFormat as refused:
            try:
                content = await self._request(payload, json_object_form(body), ctx, False)
            except _RefusedFormat:
                raise refused from None  # the first refusal says what the server lacks
            self._json_object_urls.add(url)
            return content

    async def _request(self, payload: dict[str, Any], body: dict[str, Any], ctx: StepContext,
                       entered: bool) -> str:
        """One request (see :meth:`_answer`), through the step's rate limit (SPEC §26): it
        waits for room unless ``entered``, and is settled as soon as it is answered, so
        that the step's next request (a re-ask) waits only for the window, not for the
        end of its own try."""
        gate = ctx.gate
        if gate is None:
            return await self._answer(payload, body, ctx.log, ctx.trace)
        if not entered:
            await gate.enter(reserved_tokens(body))
        try:
            content = await self._answer(payload, body, ctx.log, ctx.trace)
        except StepFailed:
            await gate.answered()
            raise
        await gate.answered()
        return content

    async def _answer(self, payload: dict[str, Any], body: dict[str, Any],
                      log: StepLog | None, trace: StepTrace | None = None) -> str:
        """One request: the answer's content text (its usage counted in ``log``); with a
        ``trace``, inside its ``chat MODEL`` span (SPEC §25)."""
        if trace is None:
            return await self._exchange(payload, body, log)
        import asyncio

        call = trace.chat(str(body.get("model") or ""), payload["url"])
        seen: dict[str, Any] = {}
        try:
            content = await self._exchange(payload, body, log, seen)
        except StepFailed as exc:
            call.failed(str(seen.get("error", "invalid_answer")), exc.message)
            raise
        except asyncio.CancelledError:
            call.failed("cancelled")
            raise
        else:
            call.answered(seen.get("answer") or {}, prompt=body.get("messages"), content=content)
        finally:
            call.end()
        return content

    async def _exchange(self, payload: dict[str, Any], body: dict[str, Any],
                        log: StepLog | None, seen: dict[str, Any] | None = None) -> str:
        """:meth:`_answer`'s request; ``seen`` gets the answer's JSON (``answer``) or what
        went wrong (``error``: ``timeout``, the transport error's name, the HTTP status)."""
        import httpx

        seen = {} if seen is None else seen

        if self._client is None:
            # No client-side timeout: the step's timeout_seconds bounds the whole call. No
            # compression asked for: a compressed answer is a bomb to decode (one is still
            # read, within the same bound).
            self._client = httpx.AsyncClient(timeout=None, trust_env=False, verify=_tls_context(),
                                             headers={"Accept-Encoding": "identity"})
        url: str = payload["url"]
        limit: int = payload["limit"]
        shown = shown_endpoint(url)
        try:
            async with self._client.stream("POST", _request_url(url), json=body,
                                           headers=payload["headers"]) as response:
                status = response.status_code
                retry_after = response.headers.get("retry-after")
                if status >= 400:
                    raw, whole = await read_within(response, ERROR_BODY_BYTES, shown)
                else:
                    raw, whole = await read_within(response, limit, shown,
                                                   StructureCounter(payload["values"]))
        except httpx.TimeoutException as exc:
            seen["error"] = "timeout"
            raise StepFailed(f"timed out talking to {shown}: {type(exc).__name__}") from None
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            seen["error"] = type(exc).__name__
            raise StepFailed(f"cannot reach {shown}: {reason}") from None
        if status >= 400:  # its body is at most ERROR_BODY_BYTES
            seen["error"] = str(status)
            if whole:
                count_usage(json_of(raw), log)  # an error may have cost tokens too
            retryable = status == 429 or status >= 500
            text = raw.decode("utf-8", errors="replace")
            error = _RefusedFormat if refuses_json_schema(body, status, text) else StepFailed
            raise error(f"HTTP {status} from {shown}: {_preview(text, cut=not whole)}",
                        retryable=retryable,
                        retry_after=_retry_after(retry_after) if retryable else None,
                        throttled=status == 429)
        if not whole:
            raise StepFailed(f"the answer from {shown} is larger than {limit} bytes, more "
                             f"than an output of max_output_bytes ({output_bytes(limit)} "
                             f"bytes) needs; stopped reading it", retryable=False)
        return answer_content(raw, shown, log, seen)

    async def close(self) -> None:
        """Close the HTTP client (its pooled connections)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def reserved_tokens(body: dict[str, Any]) -> int:
    """What a request reserves in a tokens limit (SPEC §26): its ``max_tokens`` and an
    estimate of its prompt, a token per four characters."""
    chars = sum(len(m.get("content") or "") for m in body.get("messages", ()))
    return int(body.get("max_tokens") or 0) + (chars + 3) // 4


async def _checked(spec: LlmStepSpec, content: str,
                   log: StepLog | None) -> tuple[str | None, str]:
    """:func:`checked_answer_apart`, with a line of the log when the step ends meanwhile
    (its timeout or a cancel), so that the log says what it was doing."""
    import asyncio

    try:
        return await checked_answer_apart(spec, content)
    except asyncio.CancelledError:
        if log is not None:
            log.say("stopped while checking the answer against the schema")
        raise


def _kept(content: str, max_output_bytes: int) -> str:
    """An answer as a failed try keeps it: at most ``max_output_bytes``, secrets scrubbed
    before the cut (no piece of one is left), the rest again when the runner stores it."""
    if len(content) * 4 <= max_output_bytes:  # short enough whatever its characters
        return content
    text = scrub(content[:max_output_bytes + tail_margin()]) or ""
    return text.encode("utf-8")[:max_output_bytes].decode("utf-8", errors="ignore")


@cache
def _tls_context() -> ssl.SSLContext:
    """The TLS settings of every run's client, made once per process: loading the CA bundle
    takes 20-60 ms, which each run's first LLM step used to spend (even over plain HTTP).
    The same as httpx's default with ``trust_env=False``."""
    import ssl

    import certifi

    return ssl.create_default_context(cafile=certifi.where())


@lru_cache(maxsize=256)
def _request_url(url: str) -> httpx.URL:
    """``url`` parsed once: httpx parses a string URL on every request (about 25 µs)."""
    import httpx

    return httpx.URL(url)


class _RefusedFormat(StepFailed):
    """An HTTP error that names the ``response_format`` asked for: the server may take
    another form of it."""
