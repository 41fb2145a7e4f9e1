"""Fan-out / fan-in: four shell steps read the same text in parallel, a last step combines them.

    brain run examples/fanout.py
    brain run examples/fanout.py --body "$(cat README.md)"
    brain graph examples/fanout.py

Only POSIX tools, no network. The graph is:

    text ─┬─ lines ──────┐
          ├─ words ──────┤
          ├─ top-words ──┼─ report
          └─ longest ────┘
"""

from brain import parallel, shell, trigger, workflow

SAMPLE = """\
The Brain runs workflows written as plain Python functions.
Every step is recorded, every run can be inspected later.
Steps in a parallel block run at the same time,
and the step after the block waits for all of them.
"""


@workflow
def text_stats():
    """Count lines and words, find the most frequent words and the longest line."""
    # The text: the trigger body (--body), or the sample when the body is empty.
    # The body goes in through env=: data, never shell code, whatever it holds.
    text = shell("text", command='printf "%s\\n" "${BODY:-$SAMPLE}"',
                 env={"BODY": trigger.body, "SAMPLE": SAMPLE})

    # A step's output has its trailing newlines removed (as with $(...)): add one back
    # so that `wc -l` counts the last line. stdin= is data: no quoting involved.
    lines_in = f"{text}\n"

    # Fan-out: the four steps wait for `text`, not for each other.
    with parallel():
        lines = shell("lines", command="wc -l", stdin=lines_in)
        words = shell("words", command="wc -w", stdin=lines_in)
        top = shell("top-words", stdin=lines_in,
                    command="tr -cs 'A-Za-z' '\\n' | tr 'A-Z' 'a-z' | grep -v '^$' "
                            "| sort | uniq -c | sort -rn | head -3")
        longest = shell("longest", stdin=lines_in,
                        command="awk 'length > max { max = length; line = $0 } END { print line }'")

    # Fan-in: runs once all four succeeded; each placeholder becomes one quoted word.
    shell("report", command=f"printf 'lines: %s\\nwords: %s\\nlongest: %s\\ntop words:\\n%s\\n' "
                            f"{lines} {words} {longest} {top}")
