"""Shared fixtures: every test gets its own SQLite file; nothing touches ./brain.db.

This folder is put on ``sys.path`` so that test files can ``import support`` (shared helpers).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
if str(TESTS) not in sys.path:
    sys.path.append(str(TESTS))  # ``import support`` (``--import-mode=importlib`` adds no test folder)
import support  # noqa: E402  (found through the sys.path entry above)

PG_URL = os.environ.get("BRAIN_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")

# No example database: tests run in parallel (pytest-xdist workers, and other checkouts'
# sessions), and hypothesis' database in ``.hypothesis/`` would be one more store they all
# write. A failure prints its falsifying example instead.
settings.register_profile("brain", database=None)
settings.load_profile("brain")


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A private database per test, and none of the caller's Brain settings."""
    for key in list(os.environ):
        if key.startswith(("BRAIN_", "THE_BRAIN_", "LLM_")):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("BRAIN_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}")
    yield


@pytest.fixture(autouse=True)
def _forget_declared_secret_names() -> Iterator[None]:
    """Secret variables a test's workflows declare must not be withheld from other tests'
    steps (in one process they would be, as they are for every workflow defined in it), and
    secret values a test remembers must not be scrubbed from other tests' outputs."""
    with support.secrets_restored():
        yield


@pytest.fixture
def collect_garbage_first() -> None:
    """Finalise objects left by earlier tests now, under pytest's unraisable-exception hook.

    An asyncio subprocess transport that was never closed complains from ``__del__``
    once its loop is gone; if that happens while pytest parses source to report a
    failure, CPython 3.11's ``ast`` raises ``SystemError: AST constructor recursion
    depth mismatch`` and the whole session stops with INTERNALERROR.

    Not autouse: a full collection costs tens of milliseconds a test. Modules whose tests
    spawn subprocesses in-process opt in with
    ``pytestmark = pytest.mark.usefixtures("collect_garbage_first")``.
    """
    gc.collect()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """The SQLite URL this test's ``BRAIN_DATABASE_URL`` points at."""
    return f"sqlite+aiosqlite:///{tmp_path / 'brain.db'}"


@pytest.fixture
def brain_cmd() -> list[str]:
    """The argv prefix that runs the real ``brain`` command in a subprocess."""
    exe = shutil.which("brain", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "brain.cli"]


def _pg_available() -> bool:
    async def probe() -> bool:
        try:
            import asyncpg
        except ImportError:
            return False
        try:
            conn = await asyncpg.connect(_dsn(PG_URL), timeout=3)
        except Exception:
            return False
        await conn.close()
        return True

    return asyncio.run(probe())


def _dsn(url: str) -> str:
    """``url`` as asyncpg takes it (no SQLAlchemy driver name)."""
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _admin(sql: str) -> None:
    """Run ``sql`` on the server of ``PG_URL``, through its database (CREATE/DROP DATABASE)."""
    import asyncpg

    async def go() -> None:
        conn = await asyncpg.connect(_dsn(PG_URL), timeout=30)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(go())


@contextlib.contextmanager
def _new_database(label: str, template: str | None = None) -> Iterator[str]:
    """A brand-new PostgreSQL database on ``PG_URL``'s server, dropped afterwards: empty, or
    a copy of the database ``template``."""
    from sqlalchemy.engine import make_url

    name = f"brain_test_{label}_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def _pg_server() -> None:
    """PostgreSQL is reachable (CI starts it): skipped locally when none runs, failed in CI."""
    if not _pg_available():
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is not reachable at {PG_URL} (CI must start it)")
        pytest.skip("no PostgreSQL server reachable")


@pytest.fixture(scope="session")
def pg_url(_pg_server: None) -> Iterator[str]:
    """A PostgreSQL database of this test process's own (one per xdist worker, created with
    the current schema, dropped at the end): tests running at the same time, in other workers
    or other sessions, never share one. The tests of one worker do share it, one after
    another, so none depends on another having created the schema first. (An empty database
    is ``fresh_pg_url``'s.)"""
    from support import upgraded_schema

    with _new_database(os.environ.get("PYTEST_XDIST_WORKER", "main")) as url:
        asyncio.run(upgraded_schema(url))
        yield url


@pytest.fixture(scope="session")
def _pg_schema_template(_pg_server: None) -> Iterator[str]:
    """The name of a database of this test process's own at the current schema, that
    ``schema_pg_url`` copies (nobody connects to it once made: a template must be idle)."""
    from sqlalchemy.engine import make_url
    from support import upgraded_schema

    with _new_database(f"tpl_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}") as url:
        asyncio.run(upgraded_schema(url))
        name = make_url(url).database
        assert name is not None
        yield name


@pytest.fixture
def schema_pg_url(_pg_schema_template: str) -> Iterator[str]:
    """A brand-new PostgreSQL database of this test's own at the current schema, dropped
    afterwards: ``fresh_pg_url`` upgraded, copied from a template (running the migrations
    for each test cost about four times as much)."""
    with _new_database("schema", template=_pg_schema_template) as url:
        yield url


@pytest.fixture
def fresh_pg_url(_pg_server: None) -> Iterator[str]:
    """A brand-new, empty PostgreSQL database of this test's own, dropped afterwards (an
    executor serving it takes no other test's runs)."""
    with _new_database("fresh") as url:
        yield url
