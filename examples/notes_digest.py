"""The README's first example, as a file: MCP → two LLM calls at once → a @step → shell.

    LLM_MODEL=your-model brain run examples/notes_digest.py --body "db outage"

The "recall" step starts servers/notes.py (a small MCP server shipped here, written with
the MCP SDK) with the Python The Brain runs on, and asks it for the notes about the
trigger body. Two llm() steps summarise them side by side; they name no model and no
URL, so LLM_BASE_URL (default http://localhost:1234/v1, LM Studio) and LLM_MODEL apply.
The last step appends the digest to digest.md in this folder (`tee -a`, which also
prints it). The cron schedule and the webhook take effect under `brain serve`; the
webhook accepts deliveries once DIGEST_SECRET is set.
"""

import sys

from brain import cron, llm, mcp_tool, parallel, shell, step, trigger, webhook, workflow

# An MCP server is a program The Brain starts for the step, in this file's folder.
NOTES_SERVER = [sys.executable, "servers/notes.py"]

@step
def headline(text: str) -> str:
    return text.splitlines()[0]

@workflow(triggers=[cron("0 9 * * *", timezone="Europe/Bucharest"),
                    webhook(secret_env="DIGEST_SECRET")])
def notes_digest():
    notes = mcp_tool("recall", server_command=NOTES_SERVER, tool="recall",
                     args={"query": trigger.body, "limit": 10})
    with parallel():
        fast = llm("fast", prompt=f"Two sentences: {notes}", max_tokens=400)
        slow = llm("careful", prompt=f"Detailed breakdown: {notes}", timeout_seconds=600)
    title = headline(fast)
    shell("save", argv=["tee", "-a", "digest.md"], stdin=f"# {title}\n{fast}\n\n{slow}\n")
