"""A digest of this machine every weekday morning, from local commands only.

    brain run examples/scheduled_digest.py       # now, by hand
    brain serve examples/                        # and it fires at 08:00 Bucharest time, Mon-Fri

Four shell steps collect facts in parallel; a @step lays them out. The digest
is the last step's output: `brain show RUN_ID`, `brain runs --workflow
scheduled_digest` and the runs page keep every one of them. No network, writes
nothing.

The schedule is 08:00 on the Bucharest wall clock, summer and winter time
alike (fires at 05:00 UTC in summer, 06:00 UTC in winter). 08:00 is never
inside a DST change there, so it fires once every weekday. If the server was
down at 08:00, `catchup="latest"` runs one digest when it comes back (not one
per missed morning); `overlap="skip"` drops a fire while the previous digest
still runs. See docs/triggers.md.
"""

from brain import cron, parallel, shell, step, trigger, workflow


@step
def layout(fired_at: str, when: str, load: str, disk: str, recent: str) -> str:
    """The digest text. `fired_at` is the fire time (schedule runs) or empty (by hand)."""
    header = f"Digest for {when}" + (f" (scheduled for {fired_at})" if fired_at else " (by hand)")
    return "\n".join([
        header,
        "=" * len(header),
        f"load:         {load.strip()}",
        f"disk (here):  {disk.strip()}",
        f"files changed in the last 24 h, this folder: {recent.strip()}",
    ])


@workflow(triggers=[cron("0 8 * * mon-fri", timezone="Europe/Bucharest", catchup="latest")])
def scheduled_digest():
    """Uptime and load, disk use and recent files, as one short text."""
    # The steps run in this file's folder, so `df -h .` and `find .` describe it.
    with parallel():
        when = shell("when", command="date '+%A %d %B %Y, %H:%M %Z'")
        load = shell("load", command="uptime")
        disk = shell("disk", command="df -h . | tail -n 1")
        recent = shell("recent", command="find . -maxdepth 1 -type f -mtime -1 | wc -l")
    # A schedule run's body is its fire time in ISO 8601 (e.g. 2026-03-30T05:00:00+00:00).
    layout(trigger.body, when, load, disk, recent)
