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


class BadHostHeader(ValueError):
    """A ``Host`` header that is not ``name[:port]`` (e.g. ``[::1`` without its ``]``)."""


def _hostname(host_header: str) -> str:
    try:
        return urlsplit(f"//{host_header}").hostname or ""
    except ValueError:  # urlsplit refuses a malformed IPv6 literal such as "[::1"
        raise BadHostHeader(f"the Host header {host_header[:100]!r} is not a host name "
                            f"with an optional port") from None


def token_matches(header: str | None, token: str) -> bool:
    """Constant-time check of an ``Authorization: Bearer ...`` header."""
    given = ""
    if header and header[:7].lower() == "bearer ":
        given = header[7:].strip()
    return hmac.compare_digest(given.encode(), token.encode())


def loopback_problem(host_header: str | None, origin: str | None) -> str | None:
    """Why a token-less request must be refused (DNS rebinding, CSRF), or ``None``.

    ``Origin: null`` (sandboxed frames, ``data:`` pages, some redirects) is refused like
    another site: nothing says which page sent it. Raises :class:`BadHostHeader` for a
    ``Host`` header that cannot be parsed.
    """
    if not host_header or not is_loopback_host(_hostname(host_header)):
        return "without BRAIN_API_TOKEN the API answers only requests to a loopback host name"
    if origin is not None and not (_is_loopback_origin(origin)
                                   and same_origin(origin, host_header)):
        # Another loopback port or *.localhost name is another origin (another local web
        # app): it may not act here either.
        return "cross-origin requests are refused (set BRAIN_API_TOKEN to allow other origins)"
    return None


def same_origin(origin: str, host_header: str) -> bool:
    """Whether ``Origin`` names this very server (the scheme and the ``Host`` it was asked
    for): a page of this server, not of another port or name."""
    given = origin.rstrip("/").lower()
    return given in (f"http://{host_header}".lower(), f"https://{host_header}".lower())


def _is_loopback_origin(origin: str) -> bool:
    try:
        parts = urlsplit(origin.strip())
        return parts.scheme in ("http", "https") and is_loopback_host(parts.hostname or "")
    except ValueError:
        return False
