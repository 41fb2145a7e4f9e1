"""The pytest plugin (registered through the ``pytest11`` entry point).

Fixtures:

- ``brain_db``: a fresh in-memory store for tests that use the store directly
  (pass it as ``store=`` to ``run_workflow`` or a workflow call to inspect runs
  afterwards).
- ``fake_llm``: a started :class:`~brain.testing.FakeChatServer`, with
  ``LLM_BASE_URL`` and ``LLM_MODEL`` pointing at it for the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from brain.store.memory import MemoryStore
    from brain.testing.chat_server import FakeChatServer


@pytest.fixture
def brain_db() -> MemoryStore:
    """A fresh in-memory run store, private to this test."""
    from brain.store.memory import MemoryStore

    return MemoryStore(opened=True)  # nothing to connect: ready for sync and async tests


@pytest.fixture
def fake_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeChatServer]:
    """A fake OpenAI-compatible endpoint on loopback that llm() steps use by default."""
    from brain.testing.chat_server import FakeChatServer

    with FakeChatServer(reply="ok") as server:
        monkeypatch.setenv("LLM_BASE_URL", server.url)
        monkeypatch.setenv("LLM_MODEL", "fake-model")
        yield server
