"""Database URLs: the default, the forms that are safe to show, and what a SQLite URL names.

A plain SQLite URL (the default, ``sqlite+aiosqlite:///brain.db``) is read here
without SQLAlchemy; anything else (a password, a query, a server) goes through
SQLAlchemy's URL parser, imported then.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlsplit

DEFAULT_URL = "sqlite+aiosqlite:///brain.db"
#: A new SQLite database in memory, private to the store that opens it and gone when it
#: closes (its tables copied from the schema image): what ``brain.testing`` runs on.
MEMORY_URL = "sqlite:///:memory:"
_PASSWORD_QUERY_KEYS = ("password", "passwd", "pwd", "pass", "sslpassword", "sslkey_password")
# A URL safe to show as it is written: no user part, no query, nothing quoted (colons only
# in the database part, as in sqlite:///:memory:, which SQLAlchemy would show as %3Amemory%3A).
_PLAIN = re.compile(r"[\w+]+://[\w. -]*(/[\w./: -]*)?", re.ASCII)
_SCHEME = re.compile(r"([\w+]+)://")
# What the sqlite3 module itself takes from a URL's query (as SQLAlchemy's pysqlite does).
_DRIVER_OPTIONS = ("uri", "timeout", "isolation_level", "detect_types", "check_same_thread",
                   "cached_statements")


def default_url() -> str:
    """``BRAIN_DATABASE_URL``, read now, or the SQLite default ``brain.db``."""
    return os.environ.get("BRAIN_DATABASE_URL") or DEFAULT_URL


def driver_name(url: str) -> str | None:
    """The URL's scheme (``sqlite+aiosqlite``, ``postgresql``...), or ``None`` when it is
    not a database URL."""
    found = _SCHEME.match(url)
    return found.group(1) if found else None


@dataclass(frozen=True)
class SqliteFile:
    """What a SQLite URL names: a file (or a ``file:`` URI), or an in-memory database."""

    #: The database as SQLite opens it (an absolute path, a URI, or ``:memory:``).
    filename: str
    #: The database part of the URL as written (``""`` for none): what start-up checks read.
    database: str
    uri: bool

    @property
    def memory(self) -> bool:
        """Whether the database lives in memory (one connection's, gone when it closes)."""
        return self.filename == ":memory:"


def sqlite_file(url: str) -> SqliteFile:
    """What a SQLite URL names (read as SQLAlchemy's pysqlite dialect reads it)."""
    rest = url.partition("://")[2]
    rest, _, query = rest.partition("?")
    database = unquote(rest.partition("/")[2])
    options = dict(parse_qsl(query))
    uri = options.get("uri", "").lower() in ("true", "1", "yes", "on")
    if uri:
        extra = {k: v for k, v in options.items() if k not in _DRIVER_OPTIONS}
        filename = database + ("?" + "&".join(f"{k}={extra[k]}" for k in sorted(extra))
                               if extra else "")
        return SqliteFile(filename, database, True)
    if not database or database == ":memory:":
        return SqliteFile(":memory:", database, False)
    return SqliteFile(os.path.abspath(database), database, False)


def shown_database(url: str) -> str:
    """The database as a person looks for it: a SQLite file's absolute path, else the URL
    with any password shown as ``***``."""
    if (driver_name(url) or "").split("+")[0] == "sqlite":
        target = sqlite_file(url)
        if not target.uri and not target.memory:
            return target.filename
    return redact_url(url)


def missing_database(url: str) -> str | None:
    """Why a command that only reads finds no database at ``url``, naming the file it looked
    for; ``None`` when there is one to read.

    Only a SQLite file can be missing this way: opening one creates it (and its tables),
    which a read must not. The file is looked at read-only. A file that is not a database,
    or cannot be read, is left for the store's own open to explain. A PostgreSQL database
    is never created by opening it (one without tables is refused there, named).
    """
    if (driver_name(url) or "").split("+")[0] != "sqlite":
        return None
    target = sqlite_file(url)
    path = _uri_path(target.filename) if target.uri else target.filename
    if path is None or path == ":memory:":
        return None
    where = "BRAIN_DATABASE_URL" if os.environ.get("BRAIN_DATABASE_URL") else \
        "the default: brain.db in the current folder; BRAIN_DATABASE_URL names another"
    # exists(), not lexists(): a dangling symlink names no database, and opening it would
    # create the file it points to
    if not os.path.exists(path):
        folder = os.path.dirname(path)
        missing = "" if os.path.isdir(folder) else f"; the folder {folder} does not exist"
        return (f"no database at {path} ({where}{missing}): nothing to read, and "
                f"nothing was created")
    if _holds_no_tables(path):
        return (f"{path} holds no Brain database yet ({where}): nothing to read, "
                f"and nothing was created")
    return None


def _uri_path(filename: str) -> str | None:
    """The file a SQLite URI filename (``file:PATH?...``, as SQLite reads it with ``uri``
    on) names, absolute; ``":memory:"`` for an in-memory one; ``None`` when it cannot be
    told (a ``vfs=`` or a remote authority: left to the store's own open)."""
    if not filename.startswith("file:"):
        return os.path.abspath(filename)  # SQLite takes a name without file: as a path
    parts = urlsplit(filename)
    options = dict(parse_qsl(parts.query))
    if options.get("mode") == "memory" or parts.path == ":memory:" or not parts.path:
        return ":memory:"
    if "vfs" in options or parts.netloc not in ("", "localhost"):
        return None
    return os.path.abspath(unquote(parts.path))


def _holds_no_tables(path: str) -> bool:
    """Whether the SQLite file at ``path`` is an empty database (no schema revision),
    read through a read-only connection; ``False`` when it cannot be told."""
    try:
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return False
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.OperationalError as exc:
        return "no such table" in str(exc)
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    return row is None or row[0] is None


def redact_url(url: str) -> str:
    """``url`` with any password, in its user part or its query, shown as ``***``."""
    if _PLAIN.fullmatch(url):
        return url
    unescaped = _unescaped_at(url)
    if unescaped is not None:  # hide everything up to the last @; the query is not shown
        user, _, host = unescaped
        scheme, _, rest = url.partition("://")
        authority = rest.split("/", 1)[0].split("?", 1)[0]
        return f"{scheme}://{user}:***@{host}" + rest[len(authority):].split("?", 1)[0]
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

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
    if "@" not in url and "?" not in url:
        return []
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

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
