"""The tools server, but slow to start: it sleeps 1 s before it reads or answers anything.

Run as ``python tests/mcp_servers/slow_server.py``; it offers the same tools as
``tools_server.py``.
"""

from __future__ import annotations

import sys
import time

if __name__ == "__main__":
    print("slow_server: sleeping 1 s before serving", file=sys.stderr, flush=True)
    time.sleep(1.0)
    from tools_server import app  # this script's folder is on sys.path

    app.run()
