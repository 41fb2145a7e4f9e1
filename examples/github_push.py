"""A GitHub push webhook → a short summary of what was pushed.

    brain run examples/github_push.py                         # the sample push below
    brain run examples/github_push.py --body "$(cat push.json)"
    GITHUB_WEBHOOK_SECRET=... brain serve examples/github_push.py

No network: a @step parses the JSON body GitHub sends; a shell step prints the
summary (put your chat or mail command there). With `brain serve`, point the
repository's webhook (Settings → Webhooks, content type application/json, the
same secret) at http://YOUR-HOST:8000/hooks/github/push. GitHub signs each
delivery with X-Hub-Signature-256 and numbers it with X-GitHub-Delivery, so a
redelivery from GitHub's page answers with the first run and runs nothing twice
(see docs/triggers.md). The "ping" GitHub sends when the hook is created is
summarised too.
"""

import json

from brain import shell, step, trigger, webhook, workflow

# What a manual run (no --body) summarises: a trimmed-down real push payload.
SAMPLE_PUSH = {
    "ref": "refs/heads/main",
    "compare": "https://github.com/octo-org/hello-world/compare/1a2b3c4d5e6f...9f8e7d6c5b4a",
    "repository": {"full_name": "octo-org/hello-world"},
    "pusher": {"name": "octocat"},
    "commits": [
        {"id": "7d6c5b4a3f2e1d0c9b8a7d6c5b4a3f2e1d0c9b8a", "message": "Fix the README links\n\nDetails.",
         "author": {"name": "Mona Lisa"}},
        {"id": "9f8e7d6c5b4a3f2e1d0c9b8a7d6c5b4a3f2e1d0c", "message": "Add a changelog",
         "author": {"name": "The Octocat"}},
    ],
}
MAX_COMMITS_SHOWN = 10


@step
def summarise_push(payload: str) -> str:
    """One line for the push, then one per commit (at most MAX_COMMITS_SHOWN)."""
    push = json.loads(payload) if payload.strip() else SAMPLE_PUSH
    if "zen" in push:  # the ping sent when the webhook is created
        return f"webhook ping for {push.get('repository', {}).get('full_name', '?')}: {push['zen']}"
    repo = push["repository"]["full_name"]
    ref = push["ref"]
    branch = ref.removeprefix("refs/heads/").removeprefix("refs/tags/")
    who = push.get("pusher", {}).get("name", "someone")
    commits = push.get("commits", [])
    if push.get("deleted"):
        return f"{who} deleted {branch} in {repo}"
    lines = [f"{who} pushed {len(commits)} commit{'s' if len(commits) != 1 else ''} "
             f"to {repo} {branch}"]
    for commit in commits[:MAX_COMMITS_SHOWN]:
        title = commit["message"].splitlines()[0] if commit["message"] else ""
        lines.append(f"  {commit['id'][:7]} {title} ({commit['author']['name']})")
    if len(commits) > MAX_COMMITS_SHOWN:
        lines.append(f"  … and {len(commits) - MAX_COMMITS_SHOWN} more")
    if push.get("compare"):
        lines.append(push["compare"])
    return "\n".join(lines)


@workflow(triggers=[webhook(secret_env="GITHUB_WEBHOOK_SECRET", path="github/push")])
def github_push():
    """Summarise a push: who pushed which commits to which branch."""
    # {trigger.body} is the raw body: the JSON text GitHub sent. The @step parses it.
    summary = summarise_push(trigger.body)
    # Stands for "post it somewhere": argv= needs no quoting, whatever the commit messages say.
    shell("announce", argv=["echo", summary])
