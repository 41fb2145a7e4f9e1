"""Test doubles and helpers for testing workflows (part of the product, like httpx.MockTransport)."""

from brain.testing.chat_server import FakeChatServer, RecordedRequest, completion

__all__ = ["FakeChatServer", "RecordedRequest", "completion"]
