"""Take the console's screenshots (``docs/console/*.png``, shown by docs/console.md).

The browser tests (``test_console_browser.py``, and ``test_console_waiting_browser.py`` for
a run waiting for a decision) walk through every page; run this way they also save each
page, which a plain test run never does (tests write only to their temporary folders)::

    .venv/bin/python -m tests.server.screenshots            # into docs/console/
    .venv/bin/python -m tests.server.screenshots /tmp/shots  # anywhere else

It needs Debian's ``chromium`` package, as the browser tests do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: The browser tests that save pages (each names its own screenshots).
BROWSER_TESTS = ("test_console_browser.py", "test_console_waiting_browser.py")


def main(argv: list[str]) -> int:
    folder = Path(argv[0]).resolve() if argv else REPO / "docs" / "console"
    if not shutil.which("chromium"):
        print("no chromium: install Debian's chromium package first", file=sys.stderr)
        return 2
    env = dict(os.environ, CONSOLE_SCREENSHOTS=str(folder))
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-q",
                           *(str(HERE / name) for name in BROWSER_TESTS)],
                          cwd=REPO, env=env, check=False)
    if done.returncode == 0:
        print(f"screenshots in {folder}")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
