"""What a database error becomes: one kind of error, whichever database is behind the store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from brain._errors import StoreError
from brain.results import TriggerData
from brain.store import Store
from brain.store.errors import ConstraintViolation, DatabaseError


async def _make(store: Store, run_id: str) -> None:
    await store.create_run(run_id=run_id, workflow="wf", definition_hash="d" * 64,
                           trigger=TriggerData(), step_rows=[("one", "shell")])


def test_a_repeated_row_is_a_constraint_violation(tmp_path: Path) -> None:
    async def go() -> None:
        async with Store(f"sqlite:///{tmp_path / 'dup.db'}") as store:
            await _make(store, "a" * 32)
            with pytest.raises(ConstraintViolation, match="refused a write"):
                await _make(store, "a" * 32)

    asyncio.run(go())
    assert issubclass(ConstraintViolation, DatabaseError) and issubclass(DatabaseError, StoreError)


def test_a_corrupt_file_is_a_database_error(tmp_path: Path) -> None:
    db = tmp_path / "broken.db"

    async def go() -> None:
        async with Store(f"sqlite:///{db}") as store:
            for n in range(200):
                await _make(store, f"{n:032x}")
        # Closed: every page is in the file itself (no write-ahead log left).
        data = bytearray(db.read_bytes())
        for page in range(2, len(data) // 4096):  # every page but the header page
            data[page * 4096:(page + 1) * 4096] = bytes([0xA5]) * 4096
        db.write_bytes(bytes(data))
        store = Store(f"sqlite:///{db}")
        await store.open(check_schema=False)
        try:
            with pytest.raises(DatabaseError, match="the database cannot be used"):
                await store.list_runs(limit=1000)
        finally:
            await store.close()

    asyncio.run(go())
