"""The pytest plugin (registered through the ``pytest11`` entry point).

Fixtures:

- ``brain_db``: a fresh store on a SQLite database in memory (``sqlite:///:memory:``),
  open, for tests that use the store directly (pass it as ``store=`` to
  ``run_workflow`` or a workflow call to inspect runs afterwards).
- ``fake_llm``: a started :class:`~brain.testing.FakeChatServer`, with
  ``LLM_BASE_URL`` and ``LLM_MODEL`` pointing at it for the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from brain.store import Store
    from brain.testing.chat_server import FakeChatServer


@pytest.fixture
def brain_db() -> Iterator[Store]:
    """A fresh run store on a SQLite database in memory, private to this test and open
    (usable from sync and async tests alike); closed, and its database gone, after it."""
    from brain._sync import run_sync
    from brain.store import Store
    from brain.store.urls import MEMORY_URL

    store = run_sync(Store(MEMORY_URL).open())
    try:
        yield store
    finally:
        run_sync(store.close())


@pytest.fixture
def fake_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeChatServer]:
    """A fake OpenAI-compatible endpoint on loopback that llm() steps use by default."""
    from brain.testing.chat_server import FakeChatServer

    with FakeChatServer(reply="ok") as server:
        monkeypatch.setenv("LLM_BASE_URL", server.url)
        monkeypatch.setenv("LLM_MODEL", "fake-model")
        yield server
