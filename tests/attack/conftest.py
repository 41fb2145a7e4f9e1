"""Attack tests: reuse the server tests' helpers (``import serve_support``)."""

from __future__ import annotations

import sys
from pathlib import Path

SERVER_TESTS = Path(__file__).resolve().parent.parent / "server"
if str(SERVER_TESTS) not in sys.path:
    sys.path.append(str(SERVER_TESTS))
