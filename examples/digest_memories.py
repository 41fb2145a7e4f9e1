"""MCP → one LLM call per memory → a digest: `for_each` fan-out and `when` conditions.

    LLM_MODEL=your-model brain run examples/digest_memories.py --body "db outage"
    brain graph examples/digest_memories.py

Recalls memories about the trigger body from a memory server over MCP, has a
model summarise each one in a single line (up to four at a time), and, when
anything was found, appends a digest of those lines to memory-digest.md in this
folder (`tee -a`: the file grows by one entry per run, and `brain run` prints
the entry). When nothing was found, the digest steps end `skipped`, a last step
says so, and the run still succeeds.

Needs two things:

- A memory server: MEMORY_SERVER below is the Memory Vault of docs/mcp.md, a
  stdio MCP server with a tool `recall(query, limit)`. Point it at yours (an
  absolute interpreter path is safest, see docs/mcp.md) and check it with
  `brain mcp tools -- python -m memory_vault.mcp`.
- An OpenAI-compatible server: the llm() step names no model and no URL, so it
  uses LLM_BASE_URL (default http://localhost:1234/v1, LM Studio) and LLM_MODEL.

examples/tests/test_digest_memories.py runs it with both mocked.
"""

import json
from datetime import datetime

from brain import for_each, llm, mcp_tool, shell, step, trigger, when, workflow

MEMORY_SERVER = "python -m memory_vault.mcp"
RECALL_LIMIT = 10
DIGEST_FILE = "memory-digest.md"  # relative: shell steps run in this file's folder


@step
def split_memories(recalled: str) -> list[str]:
    """The recall tool's answer as a list of memories, one element each.

    An MCP tool written in Python that returns a list of strings answers with
    one text block per string, which the `recall` step joins with newlines; an
    empty list has no text block, so `recall`'s output is then the structured
    result, ``{"result":[]}``. A tool may also answer with a JSON array of
    strings or objects. All of these work here.
    """
    try:
        parsed = json.loads(recalled)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and list(parsed) == ["result"]:
        parsed = parsed["result"]
    if isinstance(parsed, list):
        return [item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
                for item in parsed]
    return [line.strip() for line in recalled.splitlines() if line.strip()]


@step
def anything_found(memories: list[str]) -> bool:
    """A bool is stored as true/false: exactly what `when` reads."""
    return bool(memories)


@step
def layout(query: str, summaries: list[str]) -> str:
    """The digest entry: a heading, then one bullet per summary, in recall order."""
    topic = query.strip() or "recent memories"
    count = f"{len(summaries)} memor{'y' if len(summaries) == 1 else 'ies'}"
    heading = f"## {topic} ({datetime.now():%Y-%m-%d %H:%M}, {count})"
    return "\n".join([heading, "", *(f"- {line.strip()}" for line in summaries)])


@workflow
def digest_memories():
    """A one-line summary of each memory about the trigger body, appended to a digest."""
    recalled = mcp_tool("recall", server_command=MEMORY_SERVER, tool="recall",
                        args={"query": trigger.body, "limit": RECALL_LIMIT}, timeout_seconds=30)
    memories = split_memories(recalled)
    found = anything_found(memories)

    # One llm() step per memory, recorded as summary[0], summary[1], ... Inside the block
    # {memory} is this instance's memory; after it, {summary} is the JSON list of every
    # instance's answer, in recall order ([] when nothing was recalled).
    with for_each(memories, max_parallel=4, name="memory") as memory:
        summary = llm(
            "summary",
            system="You summarise a note in one line of at most fifteen words. No preamble.",
            prompt=f"Summarise this memory about {trigger.body}:\n\n{memory}",
            temperature=0.2, max_tokens=200, timeout_seconds=60, retries=1)

    # Runs only when the list was not empty; otherwise both steps end skipped.
    with when(found):
        digest = layout(trigger.body, summary)
        shell("save", argv=["tee", "-a", DIGEST_FILE], stdin=f"{digest}\n\n")

    shell("nothing-found", argv=["echo", "no memories about", trigger.body], when=~found)
