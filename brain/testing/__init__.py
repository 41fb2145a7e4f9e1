"""Testing workflows: mocked steps on the real store in a SQLite database in memory, and a
fake LLM endpoint.

Part of the product, like ``httpx.MockTransport``: ``run_workflow`` runs the
real runner and placeholder rules with the steps you choose replaced, and
``FakeChatServer`` is a real OpenAI-compatible endpoint on loopback.
"""

from brain.testing.chat_server import FakeChatServer, RecordedRequest, completion
from brain.testing.mocks import MockCall, MockedRunResult, arun_workflow, run_workflow

__all__ = ["FakeChatServer", "MockCall", "MockedRunResult", "RecordedRequest", "arun_workflow",
           "completion", "run_workflow"]
