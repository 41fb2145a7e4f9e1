"""The server tests: put this folder on ``sys.path`` (for ``import serve_support``), and the
browser the console's tests drive (Debian's chromium, never a downloaded one)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.append(str(HERE))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium for one test module's pages."""
    from playwright.sync_api import sync_playwright
    from serve_support import CHROMIUM

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()
