"""Plan a deploy, ask a person, apply it, let it settle, check it, then wait for CI.

    brain run examples/approve_deploy.py --header 'X-Commit: 4f2a9c1'
    brain approve RUN_ID go                      # in a second terminal (--reject to say no)
    brain signal ci-finished --key 4f2a9c1 --body '{"passed": true}'
    DEPLOY_SECRET=... brain serve examples/approve_deploy.py

The shape of a real deploy (``terraform plan``, ``terraform apply``, ``curl`` on a health
URL) with harmless stand-ins, so it runs on any machine without network: ``echo`` and
``printf`` print what the real commands would. Swap in yours.

``brain run`` waits in the foreground and says what for: the approval ``go`` (its prompt
holds the plan), then, after ``apply``, the ``settle`` sleep, then the CI signal for the
commit the ``X-Commit`` header names. Ctrl-C while it waits leaves the run waiting for a
``brain serve`` or ``brain worker`` on the same database. Nobody deciding within 4 hours
is a "no" (``default=False``): ``apply``, ``settle`` and ``check`` are skipped, and the
run still waits for CI and reports. No signal within an hour fails the run.

Through ``brain serve``, a CI job posts to ``/hooks/approve_deploy`` (signed with
``DEPLOY_SECRET``, see docs/triggers.md) with the commit in ``X-Commit``, and reports back
with ``POST /api/signals/ci-finished`` ``{"key": "<commit>", "body": {...}}``. See
docs/waiting.md for the whole walk-through.
"""

from brain import approval, shell, sleep, step, trigger, wait_for, webhook, when, workflow

#: How long the service gets after ``apply`` before it is checked (``"10m"`` in real life).
SETTLE = "5s"


@step
def report(ci: str, approved: str) -> str:
    """One line for the deploy and CI's word on the commit, as the run's last output."""
    deployed = "applied" if approved == "true" else "not applied (rejected or no decision)"
    return f"plan {deployed}; CI said: {ci}"


@workflow(triggers=[webhook(secret_env="DEPLOY_SECRET")])
def approve_deploy():
    plan = shell("plan", argv=["printf", "%s\\n",
                               "~ service.web: image 1.4.2 -> 1.5.0",
                               "Plan: 0 to add, 1 to change, 0 to destroy."])
    ok = approval("go", prompt=f"Apply this plan?\n\n{plan}", timeout="4h", default=False)
    with when(ok):
        shell("apply", argv=["echo", "Apply complete! Resources: 0 added, 1 changed, 0 destroyed."])
        sleep("settle", SETTLE)
        shell("check", argv=["echo", "GET https://example.com/health: 200 OK"])
    ci = wait_for("ci", signal="ci-finished", key=trigger.headers["X-Commit"], timeout="1h")
    report(ci, ok)
