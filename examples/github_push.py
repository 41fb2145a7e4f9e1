"""A GitHub push webhook → a short summary of what was pushed.

    brain run examples/github_push.py                         # the sample push below
    brain run examples/github_push.py --event webhook --body "$(cat push.json)"
    GITHUB_WEBHOOK_SECRET=... brain serve examples/github_push.py

No network and no parsing: the keys of the JSON object GitHub sends fill the
workflow's parameters of the same names (ref, repository, pusher, commits, ...; the
other keys are ignored), validated before the run is queued; a @step words them and
a shell step prints the summary (put your chat or mail command there). With `brain serve`, point the
repository's webhook (Settings → Webhooks, content type application/json, the
same secret) at http://YOUR-HOST:8000/hooks/github/push. GitHub signs each
delivery with X-Hub-Signature-256 and numbers it with X-GitHub-Delivery, so a
redelivery from GitHub's page answers with the first run and runs nothing twice
(see docs/triggers.md). The "ping" GitHub sends when the hook is created is
summarised too.
"""

from typing import Any

from brain import shell, step, webhook, workflow

# What a manual run (no parameters) summarises: a trimmed-down real push payload.
SAMPLE_PUSH: dict[str, Any] = {
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
def summarise_push(push: dict[str, Any]) -> str:
    """One line for the push, then one per commit (at most MAX_COMMITS_SHOWN)."""
    if push.get("zen"):  # the ping sent when the webhook is created
        return f"webhook ping for {push.get('repository', {}).get('full_name', '?')}: {push['zen']}"
    repo = push["repository"].get("full_name", "?")
    branch = push["ref"].removeprefix("refs/heads/").removeprefix("refs/tags/")
    who = push["pusher"].get("name", "someone")
    commits = push["commits"]
    if push["deleted"]:
        return f"{who} deleted {branch} in {repo}"
    lines = [f"{who} pushed {len(commits)} commit{'s' if len(commits) != 1 else ''} "
             f"to {repo} {branch}"]
    for commit in commits[:MAX_COMMITS_SHOWN]:
        title = commit["message"].splitlines()[0] if commit["message"] else ""
        lines.append(f"  {commit['id'][:7]} {title} ({commit['author']['name']})")
    if len(commits) > MAX_COMMITS_SHOWN:
        lines.append(f"  … and {len(commits) - MAX_COMMITS_SHOWN} more")
    if push["compare"]:
        lines.append(push["compare"])
    return "\n".join(lines)


@workflow(triggers=[webhook(secret_env="GITHUB_WEBHOOK_SECRET", path="github/push")])
def github_push(ref: str = SAMPLE_PUSH["ref"],
                repository: dict[str, Any] = SAMPLE_PUSH["repository"],
                pusher: dict[str, Any] = SAMPLE_PUSH["pusher"],
                commits: list[dict[str, Any]] = SAMPLE_PUSH["commits"],
                compare: str = SAMPLE_PUSH["compare"], deleted: bool = False,
                zen: str | None = None) -> str:
    """Summarise a push: who pushed which commits to which branch."""
    # The parameters arrive typed in the @step; {trigger.body} still has the raw JSON text.
    summary = summarise_push({"ref": ref, "repository": repository, "pusher": pusher,
                              "commits": commits, "compare": compare, "deleted": deleted,
                              "zen": zen})
    # Stands for "post it somewhere": argv= needs no quoting, whatever the commit messages say.
    shell("announce", argv=["echo", summary])
    return summary
