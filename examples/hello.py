"""Two shell steps; the second uses the first one's output."""

from brain import shell, workflow


@workflow
def hello():
    who = shell("who", command="echo world")
    shell("greet", argv=["echo", f"hello, {who}!"])
