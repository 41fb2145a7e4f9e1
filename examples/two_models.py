"""Two models at once: a fast local one for a short take, a slow careful one on another host.

    OTHER_HOST_KEY=... brain run examples/two_models.py
    OTHER_HOST_KEY=... brain run examples/two_models.py --body "$(cat incident-notes.txt)"

The pattern of SPEC §1: both llm() steps run in a parallel block, then a @step
combines their answers. Before running it, edit the three settings below:

- "fast" talks to LLM_BASE_URL (default http://localhost:1234/v1, LM Studio on
  this machine), sending no key unless LLM_API_KEY is set;
- "careful" talks to CAREFUL_URL with the key from the OTHER_HOST_KEY
  environment variable (read when the step starts, stored as ***); an unset
  OTHER_HOST_KEY fails that step before any request is sent.

It writes nothing: the combined report is the last step's output, printed by
`brain run` and stored with the run.
"""

from brain import llm, parallel, secret, shell, step, trigger, workflow

FAST_MODEL = "ministral-3b"                    # a small model on the local server
CAREFUL_MODEL = "qwen3-32b"                    # a larger (reasoning) model on the other host
CAREFUL_URL = "http://other-host:1234/v1"      # any OpenAI-compatible base URL ending in /v1

SAMPLE = """\
02:10 disk usage on db1 reached 91%
02:14 nightly backup slowed to 3x its usual time
02:31 backup finished; disk usage back to 78%
"""


@step
def combine(quick: str, detailed: str) -> str:
    """A plain function: the first line of the quick take becomes the title."""
    lines = quick.strip().splitlines()
    title = lines[0] if lines else "Report"
    return f"# {title}\n\n{quick.strip()}\n\n## Details\n\n{detailed.strip()}\n"


@workflow
def two_models():
    """A quick summary and a careful analysis of the same notes, side by side."""
    # The notes: the trigger body (--body), or SAMPLE when the body is empty.
    notes = shell("notes", command='printf "%s\\n" "${BODY:-$SAMPLE}"',
                  env={"BODY": trigger.body, "SAMPLE": SAMPLE})

    with parallel():  # both start once `notes` is done; `combine` waits for both
        fast = llm("fast", prompt=f"Two sentences, the first one a title: {notes}",
                   model=FAST_MODEL, max_tokens=400, timeout_seconds=60)
        slow = llm("careful", prompt=f"Detailed breakdown, causes and next steps: {notes}",
                   model=CAREFUL_MODEL,
                   provider_url=CAREFUL_URL,
                   api_key=secret("OTHER_HOST_KEY"),
                   # A reasoning model thinks before it answers: give it room and time.
                   timeout_seconds=600, max_tokens=8000,
                   # Retried on timeouts, connection errors, 429 and 5xx; not on other 4xx.
                   retries=2)

    combine(fast, slow)
