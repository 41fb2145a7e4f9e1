"""Database URLs: the default, and the forms that are safe to show."""

from __future__ import annotations

import os

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

DEFAULT_URL = "sqlite+aiosqlite:///brain.db"
_PASSWORD_QUERY_KEYS = ("password", "passwd", "pwd", "pass", "sslpassword", "sslkey_password")


def default_url() -> str:
    """``BRAIN_DATABASE_URL``, read now, or the SQLite default ``brain.db``."""
    return os.environ.get("BRAIN_DATABASE_URL") or DEFAULT_URL


def redact_url(url: str) -> str:
    """``url`` with any password, in its user part or its query, shown as ``***``."""
    unescaped = _unescaped_at(url)
    if unescaped is not None:  # hide everything up to the last @; the query is not shown
        user, _, host = unescaped
        scheme, _, rest = url.partition("://")
        authority = rest.split("/", 1)[0].split("?", 1)[0]
        return f"{scheme}://{user}:***@{host}" + rest[len(authority):].split("?", 1)[0]
    try:
        parsed = make_url(url)
    except ArgumentError:
        return "<unparseable database URL>"
    hidden = {k: "***" for k in parsed.query if k.lower() in _PASSWORD_QUERY_KEYS}
    if hidden:
        parsed = parsed.update_query_dict(hidden)
    return parsed.render_as_string(hide_password=True).replace("%2A%2A%2A", "***")


def _unescaped_at(url: str) -> tuple[str, str, str] | None:
    """``(user, password, host)`` when the URL's password holds an unescaped ``@`` (which
    URL parsers split at the wrong ``@``), else ``None``."""
    authority = url.partition("://")[2].split("/", 1)[0].split("?", 1)[0]
    if authority.count("@") < 2:
        return None
    userinfo, host = authority.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    return user, password, host


def url_passwords(url: str) -> list[str]:
    """Every password written in a database URL (user part and query)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return []
    found = [parsed.password] if parsed.password else []
    unescaped = _unescaped_at(url)
    if unescaped is not None and unescaped[1]:
        found.append(unescaped[1])
    for key, value in parsed.query.items():
        if key.lower() in _PASSWORD_QUERY_KEYS:
            found.extend([value] if isinstance(value, str) else list(value))
    return [str(v) for v in found]
