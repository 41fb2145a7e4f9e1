"""MCP → LLM: ask the reference time server what time it is, have a model say it in a sentence.

    LLM_MODEL=your-model brain run examples/mcp_time.py

Needs two things:

- mcp-server-time, the reference MCP server from PyPI, installed beside The Brain:
  `pip install mcp-server-time` in the same virtualenv. Check it with
  `brain mcp tools -- .venv/bin/mcp-server-time` (its tools and their arguments).
- An OpenAI-compatible server: the llm() step names no model and no URL, so it uses
  LLM_BASE_URL (default http://localhost:1234/v1, LM Studio) and LLM_MODEL, read when
  the step starts (see docs/llm.md).

The "now" step starts the server as a fresh process, calls its get_current_time tool once
and stops it; the tool's answer (a small JSON document) is the step's output. The "say"
step hands that to the model. Nothing is written anywhere but the run's record.
See docs/mcp.md.
"""

import sys
from pathlib import Path

from brain import llm, mcp_tool, workflow

TIMEZONE = "Europe/Bucharest"  # any IANA time zone name

# Where is the server's program? The Brain starts it with the MCP SDK's minimal
# environment, whose PATH is the PATH The Brain itself was started with. Running
# `.venv/bin/brain` does not put `.venv/bin` on PATH (activating the venv does), so a bare
# "mcp-server-time" is found only when that folder is on PATH anyway; otherwise the step
# fails with "cannot start the MCP server: 'mcp-server-time' is not on PATH".
# Console scripts installed with pip sit next to the venv's Python, so when the server is
# installed in The Brain's own venv we name it by that absolute path, computed once, when
# this file is loaded. (sys.executable as is, not resolved: the venv's `python` is a
# symlink to the base interpreter, whose folder has no mcp-server-time.) If it is not
# there, fall back to looking the name up on PATH.
_BESIDE_PYTHON = Path(sys.executable).parent / "mcp-server-time"
TIME_SERVER = [str(_BESIDE_PYTHON)] if _BESIDE_PYTHON.is_file() else ["mcp-server-time"]


@workflow
def mcp_time():
    """What time is it in TIMEZONE, in one sentence."""
    # A list of words is taken as is (a string would be split like a shell would, which
    # would break a path with spaces in it). args values keep their JSON types.
    now = mcp_tool("now", server_command=TIME_SERVER, tool="get_current_time",
                   args={"timezone": TIMEZONE}, timeout_seconds=30)

    # No model= or provider_url=: LLM_MODEL and LLM_BASE_URL apply (and LLM_API_KEY if set).
    llm("say",
        system="You answer in exactly one short, friendly sentence.",
        prompt=f"Say what time and day it is, from this JSON:\n\n{now}",
        temperature=0.2, max_tokens=200, retries=1)
