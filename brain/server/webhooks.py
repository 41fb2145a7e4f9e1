"""Webhook signatures: HMAC-SHA256 over the raw body, in constant time.

``X-Brain-Signature: sha256=<hex>`` or GitHub's ``X-Hub-Signature-256``; with
``X-Brain-Timestamp`` the signed text is ``"{timestamp}.{body}"`` and the
timestamp must be within 300 s. Every refusal looks the same to the caller.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping

MAX_BODY_BYTES = 1024 * 1024
TIMESTAMP_TOLERANCE_SECONDS = 300
# Stands in for the secret of an unknown hook, so refusing it costs the same HMAC.
_DUMMY_SECRET = secrets.token_hex(32)
_NOT_STORED = {"authorization", "cookie", "x-brain-signature", "x-hub-signature-256",
               "x-hub-signature"}


def sign(secret: str, body: bytes, timestamp: str | None = None) -> str:
    """The signature header value for ``body`` (for clients and tests)."""
    message = body if timestamp is None else timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify(secret: str | None, body: bytes, headers: Mapping[str, str], *,
           now: float | None = None) -> bool:
    """Whether the request is signed with ``secret`` (``None``: always ``False``, same cost)."""
    given = headers.get("x-brain-signature") or headers.get("x-hub-signature-256") or ""
    timestamp = headers.get("x-brain-timestamp")
    fresh = True
    if timestamp is not None:
        try:
            fresh = abs((now if now is not None else time.time()) - int(timestamp)) \
                <= TIMESTAMP_TOLERANCE_SECONDS
        except ValueError:
            fresh = False
    expected = sign(secret or _DUMMY_SECRET, body, timestamp)
    matches = hmac.compare_digest(given.encode(), expected.encode())
    return matches and fresh and secret is not None


def stored_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers kept with the run: all but credentials and signatures (names lower-cased)."""
    return {k.lower(): v for k, v in headers.items() if k.lower() not in _NOT_STORED}


def delivery_id(headers: Mapping[str, str]) -> str | None:
    """The sender's delivery id, for idempotency."""
    value = headers.get("x-brain-delivery") or headers.get("x-github-delivery")
    return value[:200] if value else None
