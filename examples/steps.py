"""Plain Python functions as steps: an inventory of the folder this file lives in.

    brain run examples/steps.py
    python examples/steps.py          # the same workflow, called in-process

Shows sync and async @step functions, arguments parsed from a shell step's JSON
output (list[str], int), step options with .with_options(), and one function
used twice in a workflow (steps `pick` and `pick-2`).
"""

import asyncio

from brain import shell, step, workflow


@step
def by_extension(names: list[str]) -> dict[str, int]:
    """How many files have each extension. A sync step: it runs in a worker thread."""
    counts: dict[str, int] = {}
    for name in names:
        ext = name.rsplit(".", 1)[-1] if "." in name else "(none)"
        counts[ext] = counts.get(ext, 0) + 1
    return counts  # not a str: stored as its JSON text, {"py":3}


@step
def pick(names: list[str], index: int) -> str:
    """One item of a list; `index` is a plain value, stored with the step's inputs."""
    return names[index]


@step(timeout_seconds=10)
async def describe(counts: dict[str, int], total: int, first: str, last: str) -> str:
    """An async step: it runs on the event loop, next to the other steps."""
    await asyncio.sleep(0.1)  # stands for real async work: an HTTP call, a database query
    kinds = ", ".join(f"{n} .{ext}" for ext, n in sorted(counts.items()))
    return f"{total} files ({kinds}), from {first} to {last}"


@workflow
def inventory():
    # Shell steps run in this file's folder. `names` prints a JSON list of strings,
    # `total` a number: the annotated parameters below receive them parsed and validated.
    names = shell("names", command="""printf '"%s"\\n' * | paste -sd, - | sed 's/.*/[&]/'""")
    total = shell("total", command="ls | wc -l")

    counts = by_extension(names)           # step "by_extension"; names arrives as list[str]
    first = pick(names, 0)                 # step "pick"
    last = pick(names, -1)                 # step "pick-2": same function, next free name
    # Per-call options, Prefect-style: another name, two retries.
    describe.with_options(name="summary", retries=2)(counts, total, first, last)


if __name__ == "__main__":
    result = inventory()  # runs now, in this process, and records the run
    print(result.status, result.steps["summary"].output)
    print("names:", list(result.steps))
