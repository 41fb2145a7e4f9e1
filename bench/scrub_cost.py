"""What scrubbing costs: ``scrub()`` of a 1 MiB output, with 20 known secrets, for text
without base64 (log lines) and with it (a wrapped base64 dump, one holding a secret), and
of one 40 KB line ending in a URL-quoted secret, in
this checkout and, with ``--before REV``, in the ``brain/_secrets.py`` of a git revision.

    .venv/bin/python bench/scrub_cost.py [--before HEAD~1] [--repeat 5]

Prints the best of ``--repeat`` runs in milliseconds (the machine is shared: the best
run is the least disturbed one).
"""

from __future__ import annotations

import argparse
import base64
import importlib
import random
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def _module(revision: str | None) -> ModuleType:
    """``brain._secrets`` as in this checkout, or as in ``revision`` (a module then, a
    package now: loaded from a copy, under a bare ``brain`` package of its own, so nothing
    else of The Brain comes with it)."""
    if revision is None:
        sys.path.insert(0, str(ROOT))
        import brain._secrets as current

        return current
    root = Path(tempfile.mkdtemp())
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", revision, "brain/_secrets",
                             "brain/_secrets.py"], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout.split()
    for name in listed:
        path = root / "before" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        source = subprocess.run(["git", "show", f"{revision}:{name}"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout
        path.write_text(source.replace("brain._secrets", "before.brain._secrets"))
    for package in ("before", "before/brain"):
        (root / package / "__init__.py").touch()
    sys.path.insert(0, str(root))
    return importlib.import_module("before.brain._secrets")


def _texts(secrets: list[str]) -> dict[str, str]:
    """The outputs scrubbed: ~1 MiB each."""
    rng = random.Random(7)
    words = ["GET", "/api/v1/items", "200", "in", "12.5ms", "user_id=48213", "ok", "the",
             "2024-05-01T10:00:00Z", "INFO", "worker-3", "/usr/lib/python3/site-packages"]
    lines, size = [], 0
    while size < MIB:
        line = " ".join(rng.choice(words) for _ in range(10))
        lines.append(line)
        size += len(line) + 1
    dump = base64.encodebytes(rng.randbytes(MIB * 3 // 4)).decode()
    inside = dump[:MIB // 2] + base64.encodebytes(
        b"user:" + secrets[0].encode() + rng.randbytes(MIB // 3)).decode()
    # One line of words ending in a secret URL-quoted with a letter escaped that needs no
    # escape (``%53`` for ``S``): the scrubber decodes it to find the secret.
    quoted = "a " * 20000 + quote(secrets[1], safe="").replace(secrets[1][0], f"%{ord(secrets[1][0]):02X}", 1)
    return {"log lines, no base64": "\n".join(lines), "base64 dump, no secret": dump,
            "base64 dump, a secret inside": inside[:MIB], "40 KB line, a secret %-quoted": quoted}


def main() -> None:
    """Print the cost of scrubbing each text."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="a git revision to compare with")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(3)
    secrets = ["".join(rng.choice(string.ascii_letters + string.digits) for _ in range(40))
               for _ in range(20)]
    for label, revision in [("now", None)] + ([(args.before, args.before)] if args.before else []):
        module = _module(revision)
        for value in secrets:
            module.remember(value)
        for name, text in _texts(secrets).items():
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                module.scrub(text)
                best = min(best, time.perf_counter() - t0)
            print(f"{label:>8}  {name:<30} {len(text) / MIB:.2f} MiB  {best * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
