"""LLM steps: one ``POST {base}/chat/completions`` to any OpenAI-compatible server.

LM Studio, Ollama, vLLM, llama.cpp's server and OpenAI all speak this wire
format. Fields left ``None`` fall back to ``LLM_BASE_URL``, ``LLM_API_KEY`` and
``LLM_MODEL``, read when the step starts. httpx is imported only here, when a
workflow has an LLM step.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

from brain._errors import StepFailed
from brain._secrets import MIN_SECRET_LENGTH, longest, remember, scrub
from brain.dsl.model import LlmStepSpec, SecretRef
from brain.executors.base import (
    REDACTED,
    PreparedStep,
    Resolve,
    StepContext,
    StepOutput,
    read_secret,
    tail_margin,
)
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

DEFAULT_BASE_URL = "http://localhost:1234/v1"
_BODY_PREVIEW = 300
_PREVIEW_SCAN = 16384
#: The most bytes of an error answer read: its preview and usage are in its first few.
_ERROR_BODY_BYTES = 65536
_MAX_RETRY_AFTER = 600.0
#: An answer may be this many times bigger than its content: JSON writes a character of
#: text in at most 6 bytes (``\u0001``; ``\ud83d\ude00`` is 12 bytes for 4 of UTF-8).
ANSWER_BYTES_PER_OUTPUT_BYTE = 6
#: Room in an answer for what is not its content: ids, usage, and the ``reasoning_content``
#: of a reasoning model (tens of thousands of tokens).
ANSWER_MARGIN_BYTES = 1 << 20
#: The most tokens one answer's ``usage`` may report per kind; more is not a real count.
MAX_USAGE_TOKENS = 10**9
EMPTY_CONTENT = ("the model returned empty content; a reasoning model likely needs larger "
                 "max_tokens and timeout_seconds (e.g. max_tokens=8000, timeout_seconds=600)")


def answer_limit(max_output_bytes: int) -> int:
    """The most bytes of an HTTP answer read for a step whose output may be
    ``max_output_bytes``: its content at its most escaped, plus room for the rest."""
    return ANSWER_BYTES_PER_OUTPUT_BYTE * max_output_bytes + ANSWER_MARGIN_BYTES


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


def _preview(text: str, *, cut: bool = False) -> str:
    """The start of a body, on one line, scrubbed of secrets: only its first
    :data:`_PREVIEW_SCAN` characters are read (scrubbing megabytes would hold the loop).
    ``cut``: ``text`` is already the start of a longer body."""
    cut = cut or len(text) > _PREVIEW_SCAN
    # Scrubbed before its whitespace is folded (a secret may hold a newline or two spaces),
    # and after (folding may put together a secret's words).
    text = scrub(" ".join((scrub(text[:_PREVIEW_SCAN]) or "").split())) or ""
    if cut:  # its last characters may be the start of a secret the cut split: dropped
        text = text[:max(len(text) - longest(), 0)]
    return text[:_BODY_PREVIEW] + ("…" if cut or len(text) > _BODY_PREVIEW else "")


def _shown_body(raw: bytes) -> str:
    """:func:`_preview` of a body as received (only its start is decoded)."""
    return _preview(raw[:_PREVIEW_SCAN].decode("utf-8", errors="replace"),
                    cut=len(raw) > _PREVIEW_SCAN)


class LlmExecutor:
    """Runs ``llm()`` steps with one pooled ``httpx.AsyncClient`` per run."""

    kind = "llm"

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None
        #: Endpoints that refused ``response_format`` of type ``json_schema`` in this run.
        self._json_object_urls: set[str] = set()

    def prepare(self, spec: LlmStepSpec, resolve: Resolve, *, mocked: bool = False) -> PreparedStep:
        """Resolve prompt and system; apply the environment fallbacks; build the request."""
        model = spec.model or os.environ.get("LLM_MODEL") or None
        if not model and not mocked:
            raise StepFailed("no model given: set model= on the llm() step or LLM_MODEL in the "
                             "environment", retryable=False)
        base = spec.provider_url or os.environ.get("LLM_BASE_URL") or DEFAULT_BASE_URL
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
            key = os.environ.get("LLM_API_KEY") or None
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
                   "limit": answer_limit(spec.max_output_bytes)}
        return PreparedStep(inputs=inputs, payload=payload, secrets=secrets)

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
        content = await self._ask(prepared.payload, body, ctx.log)
        if spec.output_schema is None:
            return StepOutput(output=content)
        prepared.output = _kept(content, spec.max_output_bytes)  # if the try ends here
        output, reason = await _checked(spec, content, ctx.log)
        if output is None:
            messages = [*body["messages"], {"role": "assistant", "content": content},
                        {"role": "user", "content": reask_text(reason)}]
            content = await self._ask(prepared.payload, {**body, "messages": messages}, ctx.log)
            prepared.output = _kept(content, spec.max_output_bytes)
            output, reason = await _checked(spec, content, ctx.log)
        if output is None:  # the last answer is kept, as a failed shell step keeps its stdout
            raise StepFailed(f"answer does not match the schema: {reason}", retryable=False,
                             output=prepared.output)
        return StepOutput(output=output)

    async def _ask(self, payload: dict[str, Any], body: dict[str, Any],
                   log: StepLog | None) -> str:
        """One question (see :meth:`_answer`). A server that refuses ``response_format`` of
        type ``json_schema`` (llama-cpp-python's takes ``json_object`` with a ``schema``) is
        asked in that form instead, here and for the rest of the run."""
        url: str = payload["url"]
        if "response_format" not in body:
            return await self._answer(payload, body, log)
        if url in self._json_object_urls:
            return await self._answer(payload, json_object_form(body), log)
        try:
            return await self._answer(payload, body, log)
        except _RefusedFormat as refused:
            try:
                content = await self._answer(payload, json_object_form(body), log)
            except _RefusedFormat:
                raise refused from None  # the first refusal says what the server lacks
            self._json_object_urls.add(url)
            return content

    async def _answer(self, payload: dict[str, Any], body: dict[str, Any],
                      log: StepLog | None) -> str:
        """One request: the answer's content text (its usage counted in ``log``)."""
        import httpx

        if self._client is None:
            # No client-side timeout: the step's timeout_seconds bounds the whole call. No
            # compression asked for: a compressed answer is a bomb to decode (one is still
            # read, within the same bound).
            self._client = httpx.AsyncClient(timeout=None, trust_env=False, verify=_tls_context(),
                                             headers={"Accept-Encoding": "identity"})
        url: str = payload["url"]
        limit: int = payload["limit"]
        try:
            async with self._client.stream("POST", _request_url(url), json=body,
                                           headers=payload["headers"]) as response:
                status = response.status_code
                retry_after = response.headers.get("retry-after")
                raw, whole = await _read_within(
                    response, _ERROR_BODY_BYTES if status >= 400 else limit, url)
        except httpx.TimeoutException as exc:
            raise StepFailed(f"timed out talking to {shown_endpoint(url)}: "
                             f"{type(exc).__name__}") from None
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise StepFailed(f"cannot reach {shown_endpoint(url)}: {reason}") from None
        if status >= 400:  # its body is at most _ERROR_BODY_BYTES
            if whole:
                _count_usage(_json_of(raw), log)  # an error may have cost tokens too
            retryable = status == 429 or status >= 500
            text = raw.decode("utf-8", errors="replace")
            error = _RefusedFormat if refuses_json_schema(body, status, text) else StepFailed
            raise error(f"HTTP {status} from {shown_endpoint(url)}: {_preview(text, cut=not whole)}",
                        retryable=retryable,
                        retry_after=_retry_after(retry_after) if retryable else None)
        if not whole:
            raise StepFailed(f"the answer from {shown_endpoint(url)} is larger than {limit} bytes, "
                             f"more than an output of max_output_bytes ({_output_bytes(limit)} "
                             f"bytes) needs; stopped reading it", retryable=False)
        data = _json_of(raw)
        if data is _NOT_JSON:
            raise StepFailed(f"the answer from {shown_endpoint(url)} is not JSON: "
                             f"{_shown_body(raw)}", retryable=False)
        _count_usage(data, log)
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            content = False
        if content is False or not (content is None or isinstance(content, str)):
            raise StepFailed(f"the answer from {shown_endpoint(url)} has no "
                             f"choices[0].message.content text: {_shown_body(raw)}",
                             retryable=False)
        if not content:
            raise StepFailed(EMPTY_CONTENT, retryable=False)
        return str(content)

    async def close(self) -> None:
        """Close the HTTP client (its pooled connections)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


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


_NOT_JSON = object()


def _output_bytes(limit: int) -> int:
    """The ``max_output_bytes`` an answer ``limit`` was made for (see :func:`answer_limit`)."""
    return (limit - ANSWER_MARGIN_BYTES) // ANSWER_BYTES_PER_OUTPUT_BYTE


async def _read_within(response: httpx.Response, limit: int, url: str) -> tuple[bytes, bool]:
    """The body of ``response`` as it comes, decoded, and whether it is whole: reading stops
    past ``limit`` bytes (or before any, when its announced length is over), so whatever a
    server sends, no more than ``limit`` plus one read is held."""
    decode = _decoder(response.headers.get("content-encoding"), url)
    if decode is None:
        announced = response.headers.get("content-length", "")
        if announced.isdigit() and int(announced) > limit:
            return b"", False
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        part = chunk if decode is None else decode(chunk, limit - size + 1)
        parts.append(part)
        size += len(part)
        if size > limit:
            return b"".join(parts)[:limit], False
    return b"".join(parts), True


def _decoder(encoding: str | None, url: str) -> Callable[[bytes, int], bytes] | None:
    """How to decode a body sent with Content-Encoding ``encoding`` yielding at most the
    bytes asked for at each step (``None``: not encoded). gzip and deflate are read (a server
    may compress though asked not to); any other coding fails the step, saying so."""
    codings = [c for c in (encoding or "").lower().replace(" ", "").split(",")
               if c and c != "identity"]
    if not codings:
        return None
    if codings not in (["gzip"], ["x-gzip"], ["deflate"]):
        raise StepFailed(f"the answer from {shown_endpoint(url)} is encoded as {encoding!r}, "
                         f"which an llm() step does not read (it asks for no encoding)",
                         retryable=False)
    import zlib

    unpack = zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or a zlib header, as it comes

    def decode(data: bytes, most: int) -> bytes:
        try:
            return unpack.decompress(data, most)
        except zlib.error as exc:
            raise StepFailed(f"the answer from {shown_endpoint(url)} does not decode as "
                             f"{encoding}: {exc}", retryable=False) from None

    return decode


class _LongNumber:
    """A JSON integer too long to be any count (``int()`` of over 4300 digits raises)."""

    __slots__ = ("digits",)

    def __init__(self, digits: str) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"{self.digits[:12]}… ({len(self.digits)} digits)"


def _whole_number(text: str) -> int | _LongNumber:
    return int(text) if len(text) <= 30 else _LongNumber(text)


def _json_of(raw: bytes) -> Any:
    """The body parsed as JSON, or :data:`_NOT_JSON` when it is not JSON."""
    try:
        return json.loads(raw, parse_int=_whole_number)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # nested past the limit
        return _NOT_JSON


def _sane_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) \
        and 0 <= value <= MAX_USAGE_TOKENS


def _count_usage(data: Any, log: StepLog | None) -> None:
    """Count an answer's ``usage`` (SPEC §18) in the step's log: whole numbers from 0 to
    :data:`MAX_USAGE_TOKENS`; any other value is left out, with a line of the log saying so."""
    if log is None or not isinstance(data, dict):
        return
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return
    counts: dict[str, int] = {}
    for kind in ("prompt_tokens", "completion_tokens"):
        if kind not in usage:
            continue
        value = usage[kind]
        if _sane_count(value):
            counts[kind] = value
        else:
            shown = json.dumps(value, default=repr, ensure_ascii=False)
            shown = shown[:40] + ("…" if len(shown) > 40 else "")
            log.say(f"usage: {kind} ignored, not a whole number from 0 to "
                    f"{MAX_USAGE_TOKENS}: {shown}")
    if counts:
        log.count_usage(counts.get("prompt_tokens", 0), counts.get("completion_tokens", 0))
