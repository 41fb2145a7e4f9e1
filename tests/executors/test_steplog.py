"""A step's log while it is written (``brain.executors.steplog``), by generated inputs:
whatever the chunks, streams and takes, no secret survives in a line, what is stored
stays within the head and the tail, nothing is lost while it fits, and ``seq`` only grows.
"""

from __future__ import annotations

import re
import secrets as random_secrets

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brain._secrets import remember
from brain.executors.steplog import HEAD_BYTES, LINE_CHARS, TAIL_BYTES, StepLog
from brain.results import LogBatch, LogLine

#: What the store would hold: seq → line, after each batch is applied as the store does.
Stored = dict[int, LogLine]


def stars(text: str) -> str:
    return re.sub(r"\*{3,}", "***", text)


def apply(stored: Stored, batch: LogBatch) -> None:
    if batch.drop is not None:
        for seq in [s for s in stored if batch.drop[0] <= s <= batch.drop[1]]:
            del stored[seq]
    for line in batch.lines:
        assert line.seq not in stored, "a seq is given out once"
        stored[line.seq] = line
    if batch.note is not None:
        stored[batch.note.seq] = batch.note


SECRET = "s3cr3t-" + random_secrets.token_hex(8)
remember(SECRET)

pieces = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40),
    st.sampled_from(["\n", "\n\n", SECRET, SECRET[:5], SECRET[5:], "é", "\r\n", "x" * 300]),
    st.integers(1, 40_000).map(lambda n: ("y" * 79 + "\n") * (n // 80) + "z" * (n % 80)),
)
feeds = st.lists(st.tuples(st.sampled_from(["stdout", "stderr", "log"]), pieces,
                           st.booleans(), st.integers(0, 7)), max_size=60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(feeds)
def test_no_secret_survives_and_the_store_holds_only_the_kept_part(steps: list[
        tuple[str, str, bool, int]]) -> None:
    log = StepLog()
    stored: Stored = {}
    written = {"stdout": "", "stderr": "", "log": ""}
    for stream, text, take, cut in steps:
        data = text.encode("utf-8")
        # the same bytes, split anywhere (a pipe cuts where it likes, mid-character too)
        at = min(cut * 7, len(data))
        log.feed(stream, data[:at])
        log.feed(stream, data[at:])
        written[stream] += text
        if take:
            apply(stored, log.take())
    apply(stored, log.take(final=True))
    lines = [stored[s] for s in sorted(stored)]
    for line in lines:
        assert SECRET not in line.text
        assert len(line.text) <= LINE_CHARS
    kept = sum(len(ln.text.encode()) + 1 for ln in lines if ln.stream != "brain")
    assert kept <= HEAD_BYTES + TAIL_BYTES + LINE_CHARS * 4 + 8
    notes = [ln for ln in lines if ln.stream == "brain"]
    assert len(notes) <= 1
    total = sum(len(t.encode()) for t in written.values())
    if total <= TAIL_BYTES // 2:
        # it all fits: every stream's text is what it wrote (secrets scrubbed), in order;
        # a line longer than LINE_CHARS comes in pieces, the only breaks not written
        assert not notes
        for stream, text in written.items():
            got = [ln.text for ln in lines if ln.stream == stream]
            expected = text.replace(SECRET, "***").split("\n")
            if expected[-1] == "":
                expected.pop()
            # (secrets side by side may be scrubbed as one)
            assert stars("".join(got)) == stars("".join(expected))
            assert len(got) >= len(expected)


def test_a_secret_split_across_feeds_and_lines_is_scrubbed() -> None:
    log = StepLog(secrets=["another-secret-value-42"])
    for part in ("token=s3", SECRET[2:9], SECRET[9:], " and another-secret", "-value-42\n"):
        log.feed("stdout", part.encode())
    batch = log.take(final=True)
    assert [ln.text for ln in batch.lines] == ["token=*** and ***"]


def test_a_flood_keeps_head_and_tail_in_memory_and_in_the_store() -> None:
    log = StepLog()
    stored: Stored = {}
    line = b"0123456789" * 9 + b"\n"
    for i in range(5000):
        log.feed("stderr", line * 20)
        if i % 500 == 0:
            apply(stored, log.take())
        # unmade bytes never pile up beyond what the tail can use
        assert log._chunk_bytes <= TAIL_BYTES + LINE_CHARS + 4096 * 8
    apply(stored, log.take(final=True))
    texts = [stored[s].text for s in sorted(stored)]
    notes = [t for t in texts if t.startswith("…")]
    assert len(notes) == 1 and "lines (" in notes[0]
    kept = sum(len(t) + 1 for t in texts if not t.startswith("…"))
    assert TAIL_BYTES <= kept <= HEAD_BYTES + TAIL_BYTES
    dropped = int(notes[0].split()[1].replace(",", ""))
    assert dropped + len(texts) - 1 == 5000 * 20


#: Whole lines as programs print them: words (often all base64 letters, which a log holds
#: back a take in case an encoding goes on), the odd non-base64 line.
whole_lines = st.lists(st.tuples(st.sampled_from(["stdout", "stderr"]),
                                 st.from_regex(r"[a-z]{1,12}( [a-z*]{1,8})?", fullmatch=True)),
                       min_size=1, max_size=30)


@settings(max_examples=100, deadline=None)
@given(whole_lines, st.lists(st.booleans(), min_size=30, max_size=30))
def test_lines_keep_the_order_they_were_printed_in_across_streams(
        printed: list[tuple[str, str]], takes: list[bool]) -> None:
    """Holding a stream's last lines back (an encoding may go on) must not let another
    stream's later lines overtake them: the stored log reads in the order of printing."""
    log = StepLog()
    stored: Stored = {}
    for (stream, text), take_now in zip(printed, takes, strict=False):
        log.feed(stream, (text + "\n").encode())
        if take_now:
            apply(stored, log.take())
    apply(stored, log.take())  # a take later: held lines with nothing after them go out
    apply(stored, log.take(final=True))
    assert [(line.stream, line.text) for _, line in sorted(stored.items())] == printed


def test_a_held_line_goes_out_before_the_other_streams_line_printed_after_it() -> None:
    log = StepLog()
    stored: Stored = {}
    log.feed("stdout", b"hello\nworld\n")
    log.feed("stderr", b"printed ***\n")
    apply(stored, log.take())
    apply(stored, log.take(final=True))
    assert [(line.stream, line.text) for _, line in sorted(stored.items())] == [
        ("stdout", "hello"), ("stdout", "world"), ("stderr", "printed ***")]
