"""Edges found by review: ids that cannot be forged or overflow a query, passwords in
database URLs, and log lines any client can cause, throttled."""

from __future__ import annotations

import asyncio
import hashlib
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brain._errors import RunNotFound
from brain.cli.logs import Throttle
from brain.server.webhooks import delivery_id
from brain.store import Store
from brain.store.store import redact_url


@given(long_id=st.text(min_size=201, max_size=400))
def test_no_short_delivery_id_poses_as_a_long_ones_digest(long_id: str) -> None:
    digest = "sha256:" + hashlib.sha256(long_id.encode("utf-8", "surrogateescape")).hexdigest()
    assert delivery_id({"x-brain-delivery": long_id}) != delivery_id({"x-brain-delivery": digest})


def test_a_run_id_longer_than_any_run_id_is_not_found(db_url: str) -> None:
    async def go() -> None:
        async with Store(db_url) as store:
            with pytest.raises(RunNotFound, match="32 hexadecimal"):
                await store.get_run("a" * 60000)

    asyncio.run(go())


@pytest.mark.parametrize("url", [
    "postgresql+asyncpg://u@127.0.0.1:1/db?password=SuperSecretPw123",
    "postgresql+asyncpg://u:SuperSecretPw123@127.0.0.1:1/db",
    "postgresql+asyncpg://u@127.0.0.1:1/db?sslpassword=SuperSecretPw123&x=1",
    "postgresql+asyncpg://u:Db@SuperSecretPw123@127.0.0.1:1/db",
])
def test_database_passwords_are_redacted_wherever_they_are_written(url: str) -> None:
    assert "SuperSecretPw123" not in redact_url(url)
    assert "***" in redact_url(url)


def test_client_caused_log_lines_are_throttled() -> None:
    throttle = Throttle()

    def record(message: str) -> logging.LogRecord:
        name = "uvicorn.error" if message[0].isupper() else "brain.server"
        return logging.LogRecord(name, logging.WARNING, __file__, 1, message, None, None)

    passed = [throttle.filter(record("Exceeded concurrency limit.")) for _ in range(1000)]
    assert passed.count(True) == 1
    assert throttle.filter(record("something the operator must see"))
    assert throttle.filter(record("something the operator must see"))
    upgrade = [throttle.filter(record("Unsupported upgrade request.")) for _ in range(1000)]
    assert upgrade.count(True) == 1


def test_a_timestamp_too_long_for_any_time_is_refused_not_an_error() -> None:
    from brain.server.webhooks import parse_timestamp

    assert parse_timestamp("9" * 5000) is None
    assert parse_timestamp("1700000000") == 1700000000
