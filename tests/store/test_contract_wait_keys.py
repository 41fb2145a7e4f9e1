"""The store contract, signal keys that hold secrets (SPEC §16, §11): a waiting step is matched
by the digest of its real key, never by its scrubbed text.

A step waits with ``key=prefix + secret + suffix``. A signal sent with the key as it is
shown (``prefix***suffix``), or with a key one character away from the real one, continues
nothing; the real key continues it. Two ways a step comes to wait:

- with the real key, as a run resolves it from what it has in full (an in-process run's
  trigger, ``brain run --body``): it is kept as the SHA-256 of that key;
- (a run that has its key only scrubbed never waits: its step fails, see
  tests/runner/test_wait_key_scrubbed.py).

Every test runs on SQLite and PostgreSQL (see ``contract_support``); the
last one upgrades a database holding waiting steps of the old kind (migration 0011).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store import contract_support as contract
from store.contract_support import LONG, new_id
from support import remembered, upgraded_schema

from brain._clock import utcnow
from brain._secrets import scrub
from brain.results import StepStatus, TriggerData
from brain.store import Store

store = contract.store
contract_database = contract.contract_database

OWNER = "me:1:a"
#: A secret's characters, and those around it in a key: apart, so that a change to the
#: text around a secret can never make another copy of it.
SECRET_CHARS = string.ascii_letters + string.digits
AROUND_CHARS = "-_/:.=#@ "

secrets_ = st.text(SECRET_CHARS, min_size=8, max_size=40)
arounds = st.text(AROUND_CHARS, max_size=12)


def only_secret(secret: str) -> contextlib.AbstractContextManager[None]:
    """The process knows ``secret`` alone for the block (each example its own)."""
    return remembered(secret, alone=True)


@st.composite
def one_away(draw: st.DrawFn, text: str, start: int, stop: int, chars: str) -> str:
    """``text`` with one character changed, left out or added, at a place in
    ``[start, stop]``, the new character drawn from ``chars``."""
    how = draw(st.sampled_from(["change", "drop", "add"] if stop > start else ["add"]))
    if how == "add":
        at = draw(st.integers(start, stop))
        return text[:at] + draw(st.sampled_from(chars)) + text[at:]
    at = draw(st.integers(start, stop - 1))
    if how == "drop":
        return text[:at] + text[at + 1:]
    new = draw(st.sampled_from([c for c in chars if c != text[at]]))
    return text[:at] + new + text[at + 1:]


@st.composite
def keyed(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    """A secret, a key holding it, and keys one character away from that key: inside the
    secret (no longer holding it), and in the text around it (the secret intact)."""
    secret, before, after = draw(secrets_), draw(arounds), draw(arounds)
    key = before + secret + after
    inside = draw(one_away(key, len(before), len(before) + len(secret), SECRET_CHARS))
    outside = draw(st.sampled_from([(0, len(before)), (len(key) - len(after), len(key))]))
    around = draw(one_away(key, *outside, AROUND_CHARS))
    return secret, key, [k for k in (inside, around) if secret not in k or k == around]


async def waiting_step(store: Any, signal: str, key: str) -> str:
    """A run whose step ``ci`` waits for ``signal`` with ``key`` (shown scrubbed)."""
    run_id = new_id()
    await store.create_run(run_id=run_id, workflow="wf", definition_hash=contract.HASH,
                           trigger=TriggerData(), step_rows=[("ci", "wait_for")],
                           owner=OWNER, lease_seconds=LONG)
    shown = scrub(key)
    await store.step_waiting(run_id, "ci", inputs={"signal": signal, "key": shown}, tries=1,
                             started_at=utcnow(),
                             waiting_for={"kind": "signal", "signal": signal, "key": shown},
                             signal=signal, key=key, owner=OWNER)
    return run_id


async def only_the_real_key_continues(store: Any, secret: str, waits_with: str, real: str,
                                      others: list[str]) -> None:
    signal = f"sig-{new_id()}"  # the store is shared by the examples: a signal of its own
    run_id = await waiting_step(store, signal, waits_with)
    shown = scrub(real)
    assert shown is not None and secret not in shown
    for wrong in [shown, *others]:
        assert wrong != real
        assert await store.send_signal(signal, wrong, "b") == [], (
            f"the step waits with {real!r}: {wrong!r} continued it")
    assert await store.send_signal(signal, real, "b") == [(run_id, "ci")]
    step = (await store.get_run(run_id)).steps["ci"]
    assert step.status == StepStatus.SUCCEEDED
    assert secret not in json.dumps(step.decision) + json.dumps(step.waiting_for)


PROPERTY = settings(max_examples=25, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@PROPERTY
@given(case=keyed())
async def test_a_step_waiting_with_its_real_key_is_continued_by_that_key_alone(
        store: Any, case: tuple[str, str, list[str]]) -> None:
    secret, key, others = case
    with only_secret(secret):
        await only_the_real_key_continues(store, secret, key, key, others)


async def test_a_key_without_a_secret_is_matched_as_it_is(store: Any) -> None:
    signal = f"sig-{new_id()}"
    run_id = await waiting_step(store, signal, "abc123")
    assert await store.send_signal(signal, "abc12", "b") == []
    assert await store.send_signal(signal, None, "b") == []
    assert await store.send_signal(signal, "abc123", "b") == [(run_id, "ci")]


# --- waiting steps kept before migration 0011 ---------------------------------------------------

OLD_SECRET = "oldsecretvalue42"


def old_digest(key: str) -> str:
    """How a key was kept until migration 0011: the digest of its scrubbed text."""
    return "sha256:" + hashlib.sha256((scrub(key) or "").encode()).hexdigest()


@pytest.mark.parametrize("store", ["sqlite", "postgres"], indirect=True)
async def test_steps_waiting_since_before_the_upgrade_match_only_keys_known_whole(
        store: Any) -> None:
    from sqlalchemy import text

    with only_secret(OLD_SECRET):
        held = await waiting_step(store, "old", f"deploy-{OLD_SECRET}")
        plain = await waiting_step(store, "old", "deploy-7")
        # Back to how revision 0010 kept them.
        async with store.engine.begin() as conn:
            for run_id, key in ((held, f"deploy-{OLD_SECRET}"), (plain, "deploy-7")):
                await conn.execute(text("UPDATE brain_steps SET wait_key = :k WHERE run_id = :r"),
                                   {"k": old_digest(key), "r": run_id})
            # Later revisions' columns go too, so the upgrade from 0010 adds them again.
            await conn.execute(text("DROP INDEX ux_brain_runs_parent"))
            for column in ("params", "output", "parent_run_id", "parent_step", "parent_try",
                           "depth", "step_prints", "version", "continued_on",
                           "trace_context"):
                await conn.execute(text(f"ALTER TABLE brain_runs DROP COLUMN {column}"))
            await conn.execute(text("ALTER TABLE brain_steps DROP COLUMN cached"))
            for table in ("brain_cache", "brain_limits", "brain_limit_uses"):
                await conn.execute(text(f"DROP TABLE {table}"))
            await conn.execute(text("UPDATE alembic_version SET version_num = '0010'"))
        url = store.url
        await store.close()
        await upgraded_schema(url)

        again = Store(url)
        async with again:
            # A key that held no secret was kept as its real digest: it still matches. One
            # kept as the digest of its scrubbed text has no known real key: nothing does.
            assert await again.send_signal("old", "deploy-***", "b") == []
            assert await again.send_signal("old", f"deploy-{OLD_SECRET}", "b") == []
            assert await again.send_signal("old", "deploy-7", "b") == [(plain, "ci")]
            step = (await again.get_run(held)).steps["ci"]
            assert step.status == StepStatus.WAITING
