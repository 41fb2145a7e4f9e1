"""Who may call: the bearer token, and the loopback-only rules when no token is set."""

from __future__ import annotations

import hmac
import ipaddress
import os
from urllib.parse import urlsplit

LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def api_token() -> str | None:
    """``BRAIN_API_TOKEN`` (or ``THE_BRAIN_API_TOKEN``), read now."""
    return os.environ.get("BRAIN_API_TOKEN") or os.environ.get("THE_BRAIN_API_TOKEN") or None


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or address, no port) is this machine's loopback."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hostname(host_header: str) -> str:
    return urlsplit(f"//{host_header}").hostname or ""


def token_matches(header: str | None, token: str) -> bool:
    """Constant-time check of an ``Authorization: Bearer ...`` header."""
    given = ""
    if header and header[:7].lower() == "bearer ":
        given = header[7:].strip()
    return hmac.compare_digest(given.encode(), token.encode())


def loopback_problem(host_header: str | None, origin: str | None) -> str | None:
    """Why a token-less request must be refused (DNS rebinding, CSRF), or ``None``."""
    if not host_header or not is_loopback_host(_hostname(host_header)):
        return "without BRAIN_API_TOKEN the API answers only requests to a loopback host name"
    if origin and origin != "null":
        origin_host = urlsplit(origin).hostname or ""
        if not is_loopback_host(origin_host):
            return "cross-site requests are refused (set BRAIN_API_TOKEN to allow other origins)"
    return None
