"""A tiny MCP server (official SDK, stdio) for tests/testing: one tool that reports what it got.

Run as ``python tests/testing/mcp_echo_server.py``. The ``echo_args`` tool answers
with the JSON of the arguments it received, of its command-line words after the
script and of the ``ECHO_TAG`` environment variable, so a test can compare what a
real ``mcp_tool()`` step sent with the inputs a mocked run recorded. With
``ECHO_MARK_DIR`` set, the process writes ``ECHO_MARK_DIR/mcp-<pid>`` at start-up:
evidence that it was spawned at all.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

if os.environ.get("ECHO_MARK_DIR"):
    with open(os.path.join(os.environ["ECHO_MARK_DIR"], f"mcp-{os.getpid()}"), "w") as _f:
        _f.write("spawned")

from mcp.server import MCPServer

app = MCPServer("brain-testing-echo")


@app.tool()
def echo_args(text: Any = None, count: Any = None, nested: Any = None, flag: Any = None) -> str:
    """Every argument as received, with ECHO_TAG from the environment, as JSON."""
    received = {k: v for k, v in {"text": text, "count": count, "nested": nested,
                                  "flag": flag}.items() if v is not None}
    return json.dumps({"args": received, "argv": sys.argv[1:], "tag": os.environ.get("ECHO_TAG")},
                      sort_keys=True)


if __name__ == "__main__":
    app.run()
