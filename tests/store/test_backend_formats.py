"""The SQLite backend writes what SQLAlchemy's SQLite dialect wrote (files from before read
back the same, and tools reading with SQLAlchemy see the same values), and every statement
renders for both databases."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import insert, select

from brain.results import RunStatus, StepStatus, TriggerData
from brain.store import Store, queries
from brain.store.backend import POSTGRESQL, SQLITE
from brain.store.tables import runs, steps

_STORED_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}")


def test_times_and_flags_are_stored_as_sqlalchemy_stored_them(tmp_path: Path) -> None:
    db = tmp_path / "formats.db"
    plus_two = datetime(2030, 5, 6, 9, 8, 7, tzinfo=timezone(timedelta(hours=2)))

    async def write() -> None:
        async with Store(f"sqlite:///{db}") as store:
            await store.create_run(run_id="a" * 32, workflow="wf", definition_hash="d" * 64,
                                   trigger=TriggerData(headers={"k": "v"}),
                                   step_rows=[("one", "shell")], owner="me:1:a")
            await store.step_finished("a" * 32, "one", status=StepStatus.SUCCEEDED, tries=1,
                                      ended_at=plus_two, started_at=plus_two, inputs={"x": [1]},
                                      output="out", owner="me:1:a")
            await store.finish_run("a" * 32, RunStatus.SUCCEEDED, owner="me:1:a")

    asyncio.run(write())
    with sqlite3.connect(db) as conn:
        created, ended, flag, headers = conn.execute(
            "SELECT created_at, ended_at, cancel_requested, trigger_headers FROM brain_runs"
        ).fetchone()
        started, inputs = conn.execute("SELECT started_at, inputs FROM brain_steps").fetchone()
    assert _STORED_TIME.fullmatch(created) and _STORED_TIME.fullmatch(ended)
    assert started == "2030-05-06 07:08:07.000000"  # UTC, no offset, microseconds always
    assert (flag, headers, inputs) == (0, '{"k": "v"}', '{"x": [1]}')

    async def read_with_sqlalchemy() -> tuple[datetime, datetime]:
        async with Store(f"sqlite:///{db}") as store, store.engine.connect() as conn:
            row = (await conn.execute(select(steps.c.started_at, steps.c.ended_at))).one()
            return row.started_at, row.ended_at

    assert asyncio.run(read_with_sqlalchemy()) == (plus_two, plus_two)


def test_rows_sqlalchemy_wrote_read_back_the_same(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    when = datetime(2024, 2, 3, 4, 5, 6, 789, tzinfo=UTC)

    async def go() -> None:
        async with Store(url) as store:
            async with store.engine.begin() as conn:
                await conn.execute(insert(runs), dict(
                    id="b" * 32, workflow="old", definition_hash="h", status="succeeded",
                    trigger_event="manual", trigger_body="", trigger_headers="{}",
                    created_at=when, started_at=when, ended_at=when + timedelta(seconds=1),
                    cancel_requested=True, lease_owner=None))
                await conn.execute(insert(steps), dict(
                    run_id="b" * 32, name="s", position=0, kind="shell", status="succeeded",
                    tries=2, inputs='{"a": 1}', output="o", started_at=when, ended_at=when))
            got = await store.get_run("b" * 32)
            assert (got.created_at, got.started_at) == (when, when)
            assert got.ended_at == when + timedelta(seconds=1)
            assert got.created_at.tzinfo == UTC
            assert got.steps["s"].inputs == {"a": 1} and got.steps["s"].tries == 2
            row = await store.run_row("b" * 32)
            assert row is not None and row.cancel_requested is True
            assert await store.latest_succeeded_run("old", when + timedelta(days=1)) == "b" * 32

    asyncio.run(go())


def test_every_statement_renders_for_both_databases() -> None:
    statements = [v for k, v in vars(queries).items() if k.isupper() and isinstance(v, str)]
    statements += list(queries.PRUNE)
    statements += [queries.claim_next("(:w0)"),
                   queries.step_finished(inputs=False, started_at=True)]
    for sql in statements:
        for dialect in (SQLITE, POSTGRESQL):
            rendered = dialect.render(sql)
            assert "{" not in rendered and "}" not in rendered, rendered
    assert "SKIP LOCKED" in POSTGRESQL.render(queries.claim_next("(:w0)"))
    assert "now()" not in SQLITE.render(queries.CLAIM_RUN)
