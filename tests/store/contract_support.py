"""The store contract suite's fixtures and helpers: one store of each kind, opened.

Every ``tests/store/test_contract*.py`` module runs its tests against both databases of
the one store, :class:`brain.store.Store` (every interface of
:mod:`brain.store.interfaces`):

- ``sqlite``: on a file in the test's ``tmp_path``;
- ``postgres``: on a fresh PostgreSQL database of the test's own.

(``brain.testing`` runs the same store on SQLite in memory: ``tests/store/
test_memory_database.py`` checks what differs there, the database's life.)

A module takes the fixtures with ``store = contract.store`` and
``contract_database = contract.contract_database``. Where an implementation is known
to break the contract, the test says so with :func:`xfail_on`, strictly: the day it is
fixed the test fails, and the mark must go.

Nothing here reaches inside a store: edges (an expired lease, a lease taken over, an old
run) are made through the public methods, so the same helper serves every backend.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from brain._owners import this_machine
from brain.results import RunStatus, StepStatus, TriggerData
from brain.store import Store

#: The ids of the ``store`` fixture's params.
BACKENDS = ("sqlite", "postgres")
HASH = "d" * 64
OTHER_HASH = "e" * 64
#: The lease a test's owner holds for as long as the test can take.
LONG = 600.0
#: A lease that ran out before it was written (its owner "died").
EXPIRED = -5.0


def xfail_on(*kinds: str, reason: str,
             raises: type[BaseException] | tuple[type[BaseException], ...] | None = None
             ) -> pytest.MarkDecorator:
    """Run the test on every backend, expecting it to fail (``strict``) on ``kinds``.

    The test itself states the contract; the mark records a known difference of one
    implementation from it (``raises`` pins the failure down where it can).
    """
    unknown = set(kinds) - set(BACKENDS)
    assert not unknown, f"no backend {unknown}"
    params = [pytest.param(kind, id=kind, marks=(
        [pytest.mark.xfail(strict=True, reason=reason, raises=raises)] if kind in kinds else []))
        for kind in BACKENDS]
    return pytest.mark.parametrize("store", params, indirect=True)


@pytest.fixture
def contract_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database URL the test's ``store`` param names: a SQLite file in ``tmp_path``,
    or a fresh PostgreSQL database at the current schema.

    A fixture of its own, and synchronous, because ``schema_pg_url`` makes its database
    with ``asyncio.run`` (which cannot run inside the test's event loop)."""
    kind = request.node.callspec.params["store"]
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'contract.db'}"
    url: str = request.getfixturevalue("schema_pg_url")
    return url


@pytest.fixture(params=BACKENDS)
async def store(contract_database: str) -> AsyncIterator[Store]:
    """An open store on each database, empty; closed after the test."""
    opened = Store(contract_database)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def open_again(store: Store) -> Store:
    """A new, unopened store on the same database."""
    return Store(store.url)


# --- making records ----------------------------------------------------------------------


def new_id() -> str:
    return uuid.uuid4().hex


async def make_run(store: Any, workflow: str = "wf", *, run_id: str | None = None,
                   steps: Sequence[str] = ("one", "two", "three"), kind: str = "shell",
                   owner: str | None = None, lease_seconds: float = LONG,
                   trigger: TriggerData | None = None,
                   previous_run_id: str | None = None) -> str:
    """A run of ``workflow`` with pending ``steps``: queued, or running under ``owner``."""
    run_id = run_id or new_id()
    await store.create_run(run_id=run_id, workflow=workflow, definition_hash=HASH,
                           trigger=trigger or TriggerData(), step_rows=[(s, kind) for s in steps],
                           owner=owner, lease_seconds=lease_seconds,
                           previous_run_id=previous_run_id)
    return run_id


async def ended_run(store: Any, status: RunStatus, workflow: str = "wf", *,
                    error: str | None = None, steps: Sequence[str] = ("one",)) -> str:
    """A run that has ended ``status`` (its steps as they were)."""
    run_id = await make_run(store, workflow, owner="ender:1:a", steps=steps)
    await store.finish_run(run_id, status, error, owner="ender:1:a")
    return run_id


async def taken_over(store: Any, run_id: str, thief: str = "thief:2:b") -> None:
    """Let another executor take ``run_id`` over: its lease runs out, ``thief`` claims it."""
    row = await store.run_row(run_id)
    assert row is not None and row.lease_owner is not None
    ours, _ = await store.heartbeat(run_id, row.lease_owner, EXPIRED)
    assert ours
    assert await store.claim_run(run_id, thief, LONG)


async def finish_step(store: Any, run_id: str, name: str, output: str, *,
                      status: StepStatus = StepStatus.SUCCEEDED, tries: int = 1,
                      at: datetime | None = None, owner: str | None = None) -> None:
    """A quick step recorded once, finished (with its inputs and start time)."""
    from brain._clock import utcnow

    at = at or utcnow()
    await store.step_finished(run_id, name, status=status, tries=tries, ended_at=at,
                              output=output, inputs={"step": name}, started_at=at, owner=owner)


async def tick() -> None:
    """Let the clock move on, so that records written before and after are ordered by
    their times (only the order is ever compared, never a duration)."""
    await asyncio.sleep(0.002)


def dead_local_owner() -> str:
    """A lease owner naming a process of this machine that has exited."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    return f"{this_machine()}:{int(child.stdout)}:dead0000"


def live_local_owner() -> str:
    """A lease owner naming this very process (alive)."""
    import os

    return f"{this_machine()}:{os.getpid()}:live0000"
