"""How long a remote MCP step takes to give up on a server that stalls: each mode of the
hostile server in ``tests/attack/test_attack_remote_mcp_hostile.py`` (silent, trickling a
byte a second, endless SSE keep-alives, an SSE endpoint never named or on another origin),
a 1 s timeout and one retry, so two tries. The figure is the whole step, session closing
included, beside the 2 s its two timeouts take at the least.

The attack test (``tests/attack/test_attack_remote_mcp_wire.py``) checks the behaviour:
each try ends with ``timed out after 1 s`` and is retried. Target: each row under 12 s
(a few seconds of closing at most per try).

Prints figures; asserts nothing.   .venv/bin/python bench/mcp_stall.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests" / "attack"), str(REPO / "tests")]

from test_attack_remote_mcp_hostile import HostileMcp  # noqa: E402

from brain import mcp_tool, workflow  # noqa: E402

MODES = [("silent", "streamable-http"), ("trickle", "streamable-http"),
         ("trickleinit", "streamable-http"), ("slowbody", "streamable-http"),
         ("sse-silent", "sse"), ("sse-trickle", "sse"), ("sse-foreign", "sse")]


def stalled_step(url: str, transport: str, name: str) -> tuple[str, float]:
    """Run a one-step workflow against ``url``: the step's error and the wall seconds."""
    @workflow(name=name)
    def flow() -> None:
        mcp_tool("m", url=url, transport=transport, tool="t", retries=1,
                 retry_delay_seconds=0, timeout_seconds=1)

    t0 = time.monotonic()
    result = flow()
    return str(result.steps["m"].error), time.monotonic() - t0


def main() -> None:
    """Print, per stalling mode, the step's error and the median and worst wall time."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode (default 3)")
    args = parser.parse_args()
    print(f"{'mode':<14} {'transport':<16} {'median s':>9} {'worst s':>8}  error")
    with HostileMcp() as hostile:
        for mode, transport in MODES:
            seen = [stalled_step(hostile.url(mode, sse=transport == "sse"), transport,
                                 f"bench_mcp_stall_{mode.replace('-', '_')}_{i}")
                    for i in range(args.repeat)]
            took = [seconds for _, seconds in seen]
            errors = sorted({error for error, _ in seen})
            print(f"{mode:<14} {transport:<16} {statistics.median(took):>9.2f} "
                  f"{max(took):>8.2f}  {'; '.join(errors)}")


if __name__ == "__main__":
    main()
