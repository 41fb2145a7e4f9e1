"""The tools server, made hard to stop: SIGTERM is ignored, and its ``hang_hard`` tool
blocks a worker thread forever, so closing stdin does not end the process either; only
SIGKILL does. Run as ``python tests/mcp_servers/stubborn_server.py``.
"""

from __future__ import annotations

import signal
import sys
import time

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("stubborn_server: ignoring SIGTERM", file=sys.stderr, flush=True)
    from tools_server import app  # this script's folder is on sys.path

    @app.tool()
    def hang_hard() -> str:
        """Block a worker thread forever (threads cannot be cancelled)."""
        print("stubborn_server: hang_hard blocking", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)

    app.run()
