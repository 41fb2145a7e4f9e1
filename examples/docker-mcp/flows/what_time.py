"""Ask the MCP time server, started inside the container, what time it is in a few places.

    docker run --rm brain-time brain run /srv/brain/flows/what_time.py

Each mcp_tool() step starts `mcp-server-time` as a fresh process (it was installed into the
image's virtualenv, so its name is on PATH), calls get_current_time once and stops it. The
last step turns the tools' JSON answers into one line per place.
"""

from brain import cron, mcp_tool, parallel, step, workflow

# The container has no local time zone configured, so the server is told its own.
TIME_SERVER = ["mcp-server-time", "--local-timezone", "UTC"]


@step
def clocks(bucharest: dict, tokyo: dict) -> str:
    """One line per place: its zone, its time and whether daylight saving time applies."""
    lines = []
    for answer in (bucharest, tokyo):
        dst = "daylight saving" if answer.get("is_dst") else "standard time"
        lines.append(f"{answer['timezone']}: {answer['datetime']} ({dst})")
    return "\n".join(lines)


@workflow(triggers=[cron("0 * * * *")])
def what_time():
    """The time in Bucharest and Tokyo, every hour and on demand."""
    with parallel():
        bucharest = mcp_tool("bucharest", server_command=TIME_SERVER, tool="get_current_time",
                             args={"timezone": "Europe/Bucharest"}, timeout_seconds=60)
        tokyo = mcp_tool("tokyo", server_command=TIME_SERVER, tool="get_current_time",
                         args={"timezone": "Asia/Tokyo"}, timeout_seconds=60)
    clocks(bucharest, tokyo)
