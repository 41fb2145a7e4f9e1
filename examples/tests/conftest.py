"""Put the examples folder on ``sys.path``, so these tests import the examples as a user's would.

``import hello`` then finds ``examples/hello.py``, as it does for a user whose tests sit
next to their workflow files.
"""

from __future__ import annotations

import sys
from pathlib import Path

EXAMPLES = str(Path(__file__).resolve().parent.parent)
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)
