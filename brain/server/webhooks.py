"""Webhook signatures: HMAC-SHA256 over the raw body, in constant time.

``X-Brain-Signature: sha256=<hex>`` or GitHub's ``X-Hub-Signature-256``; with
``X-Brain-Timestamp`` the signed text is ``"{timestamp}.{body}"`` and the
timestamp must be within 300 s. Every refusal looks the same to the caller.

A stamped delivery's signed text, sent as the body of an unstamped delivery,
would verify with the captured signature (a replay that outlives the 300 s
window). So an unstamped delivery whose body starts like a stamped text
(``^[0-9]+\\.``, exactly what :func:`parse_timestamp` accepts, then a dot) is
refused, and ``require_timestamp=True`` refuses every unstamped delivery.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Mapping

MAX_BODY_BYTES = 1024 * 1024
TIMESTAMP_TOLERANCE_SECONDS = 300
# The delivery id column's width; longer ids are stored as their SHA-256 (never cut).
MAX_DELIVERY_ID_CHARS = 200
# Stands in for the secret of an unknown hook, so refusing it costs the same HMAC.
_DUMMY_SECRET = secrets.token_hex(32)
_NOT_STORED = {"authorization", "proxy-authorization", "cookie", "x-brain-signature",
               "x-hub-signature-256", "x-hub-signature"}
# What X-Brain-Timestamp may hold: ASCII digits only (no sign, spaces, "_" or other digits
# that int() would take), so the stamped-looking body test below matches exactly these.
_TIMESTAMP = re.compile(rb"[0-9]+")
_STAMPED_PREFIX = re.compile(rb"[0-9]+\.")


def parse_timestamp(value: str) -> int | None:
    """The ``X-Brain-Timestamp`` value as Unix seconds, or ``None`` when it is not ASCII digits."""
    raw = value.encode("utf-8", "surrogateescape")
    # No Unix time has more than 20 digits (and int() refuses over 4,300).
    return int(raw) if len(raw) <= 20 and _TIMESTAMP.fullmatch(raw) else None


def looks_stamped(body: bytes) -> bool:
    """Whether ``body`` begins like a stamped delivery's signed text (``digits.``)."""
    return _STAMPED_PREFIX.match(body) is not None


def sign(secret: str, body: bytes, timestamp: str | None = None) -> str:
    """The signature header value for ``body`` (for clients and tests)."""
    message = body if timestamp is None else timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify(secret: str | None, body: bytes, headers: Mapping[str, str], *,
           now: float | None = None, require_timestamp: bool = False) -> bool:
    """Whether the request is signed with ``secret`` (``None``: always ``False``, same cost).

    ``headers`` has lower-case names. Unstamped deliveries are refused when
    ``require_timestamp`` is set or when the body looks like a stamped signed text.
    """
    given = headers.get("x-brain-signature") or headers.get("x-hub-signature-256") or ""
    timestamp = headers.get("x-brain-timestamp")
    if timestamp is None:
        # Checked on every path and combined at the end: the HMAC below is computed anyway.
        acceptable = not require_timestamp and not looks_stamped(body)
    else:
        seconds = parse_timestamp(timestamp)
        current = now if now is not None else time.time()
        acceptable = seconds is not None and abs(current - seconds) <= TIMESTAMP_TOLERANCE_SECONDS
    expected = sign(secret or _DUMMY_SECRET, body, timestamp)
    matches = hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode())
    return matches and acceptable and secret is not None


def stored_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers kept with the run: all but credentials and signatures (names lower-cased)."""
    return {k.lower(): v for k, v in headers.items() if k.lower() not in _NOT_STORED}


def delivery_id(headers: Mapping[str, str]) -> str | None:
    """The sender's delivery id, for idempotency.

    An id too long for the column is stored as ``sha256:<hex>`` of the whole id, so two
    long ids that share a prefix stay two deliveries; so is an id that itself starts
    with ``sha256:``, so no short id can pose as a long one's digest.
    """
    value = headers.get("x-brain-delivery") or headers.get("x-github-delivery")
    if not value:
        return None
    if len(value) > MAX_DELIVERY_ID_CHARS or value.startswith("sha256:"):
        digest = hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()
        return f"sha256:{digest}"
    return value

