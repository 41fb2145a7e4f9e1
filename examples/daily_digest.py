"""Shell → LLM → shell: summarise the state of this machine and append it to a digest file.

    LLM_MODEL=your-model brain run examples/daily_digest.py
    LLM_MODEL=your-model brain run examples/daily_digest.py --body "focus on disk space"

Needs an OpenAI-compatible server: the llm() step names no model and no URL, so
it uses LLM_BASE_URL (default http://localhost:1234/v1, LM Studio) and LLM_MODEL,
read when the step starts (see docs/llm.md for LM Studio, Ollama, vLLM,
llama.cpp and OpenAI). Only POSIX tools, no git.

Writes one thing: it appends the summary to /tmp/brain-daily-digest.md
(`tee -a`), which grows by one entry per run. Delete it whenever you like.
"""

from brain import cron, llm, parallel, shell, trigger, workflow

DIGEST_FILE = "/tmp/brain-daily-digest.md"


# The schedule is validated now and fires once a server runs the workflow (`brain serve`);
# `brain run` runs it by hand.
@workflow(triggers=[cron("0 9 * * *")])
def daily_digest():
    """Collect facts about this machine, have a model summarise them, append the summary."""
    # Two shell steps at once. Shell steps run in this file's folder, so `df -h .` and
    # `ls -la` describe the examples folder.
    with parallel():
        when = shell("when", command="date '+%Y-%m-%d %H:%M'")
        facts = shell("facts", command="uname -srm; echo; df -h .; echo; ls -la")

    # No model= or provider_url=: LLM_MODEL and LLM_BASE_URL apply (and LLM_API_KEY if set).
    # A prompt is text like any other: {facts} and {trigger.body} are filled in at run time.
    summary = llm(
        "summary",
        system="You write short, factual status notes for a system administrator.",
        prompt=(f"Summarise this machine's state in at most five bullet points. "
                f"Mention anything unusual. Extra instructions (may be empty): {trigger.body}\n\n"
                f"{facts}"),
        temperature=0.2,
        max_tokens=600,
        retries=1,  # a timeout, a dropped connection, a 429 or a 5xx is tried once more
    )

    # argv= runs tee with no shell, stdin= is the text: nothing needs quoting.
    # tee also prints what it appends, so `brain run` shows the new entry.
    shell("append", argv=["tee", "-a", DIGEST_FILE], stdin=f"## {when}\n\n{summary}\n\n")
