"""A step's log while it is written: what its programs and functions print, kept as the
first :data:`HEAD_BYTES` and the last :data:`TAIL_BYTES`, handed out in batches.

Writers :meth:`StepLog.feed` it bytes as they come (a pipe's chunk, a ``print``);
whoever stores the log :meth:`StepLog.take` s a :class:`~brain.results.LogBatch` now and
then. Feeding is cheap whatever the volume: bytes are only kept (no line is made)
until the next take, and of those only the last :data:`TAIL_BYTES` (plus a margin)
once the head is full, so a step printing 100 MB costs a byte count per chunk. Lines
are made, decoded and scrubbed at take time, at most a few hundred KiB a time.

A base64 (or hex) text wrapped into lines may be printed across two takes: its lines
taken first would be scrubbed apart from the rest, and a secret encoded across the two
would be scrubbed in neither. So the last lines of a take that may go on as such a text
(see :func:`_may_go_on`) are held back, already scrubbed, and scrubbed again with what
follows them; if nothing follows by the next take, they go out then, scrubbed by the
rule for a part of a run (:func:`brain._secrets.scrub_part`). A line is so held for one
take at most (half a second): only a program that pauses in the middle of printing an
encoded secret can split it, and then each part shows at most 10 bytes of the secret at
each of its ends.

Limits, known and accepted: a program that prints an encoded secret slowly, a few
characters a line with pauses longer than a take between them (``base64 -w 12`` piped
through ``sleep``), has each line stored and streamed as scrubbed alone (see
:func:`brain._secrets.scrub_part`), and a line too short to hold 11 of the secret's bytes
(15 base64 characters) shows its few bytes of it; and
an encoding split between stdout and stderr is scrubbed per stream, each half on its own.
Both take a program that means to show the secret.

Thread-safe: a ``@step`` function's threads print into the same log as the loop reads.
"""

from __future__ import annotations

import codecs
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from brain._secrets import longest, scrub, scrub_part
from brain.executors.line_order import LineOrder
from brain.results import LogBatch, LogLine

#: The first bytes of a step's log, always kept.
HEAD_BYTES = 8 * 1024
#: The last bytes of a step's log, kept as it moves on.
TAIL_BYTES = 64 * 1024
#: A longer line is kept in pieces of this many characters.
LINE_CHARS = 16 * 1024

_Chunk = tuple[str, float, bytes]
_RUN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")


def _may_go_on(lines: list[str], margin: int) -> int:
    """How many of the last ``lines`` to hold back (see the module): those that end in a
    base64 character (a run the next line may go on with), back to one that is not all
    base64 (where such a run may begin after a prefix: ``Basic dXNl``), and no more than
    needed to cover the last ``margin`` characters."""
    held = size = 0
    for line in reversed(lines):
        bare = line.rstrip("\r")
        if not bare or bare[-1] not in _RUN_CHARS or size >= margin:
            break
        held += 1
        size += len(line) + 1
        if not _RUN_CHARS.issuperset(bare):
            break
    return held


def _size(text: str) -> int:
    return len(text.encode("utf-8", errors="replace")) + 1


def progress_text(progress: dict[str, Any]) -> str:
    """A progress report as a line: ``progress 3/10: copying`` (``3`` with no total)."""
    done, total = progress.get("progress"), progress.get("total")
    text = f"progress {done:g}" if isinstance(done, (int, float)) else "progress"
    if isinstance(total, (int, float)):
        text += f"/{total:g}"
    return text + (f": {progress['message']}" if progress.get("message") else "")


def _amount(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


class StepLog:
    """One step's log, from its first try to its end (see the module)."""

    def __init__(self, *, first_seq: int = 1, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._next_seq = first_seq
        self.secrets: list[str] = list(secrets)
        self._fed = 0
        self._head: list[_Chunk] = []  # within the first HEAD_BYTES fed, not yet made lines
        self._chunks: deque[_Chunk] = deque()  # later, not yet made lines
        self._chunk_bytes = 0
        self._decoders: dict[str, codecs.IncrementalDecoder] = {}
        #: Each stream's unfinished line: when it began, its text, whether it began in the head.
        self._carry: dict[str, tuple[float, str, bool]] = {}
        #: Each stream's last lines held back (see the module), scrubbed: as ``_carry``.
        self._held: dict[str, tuple[float, str, bool]] = {}
        #: Lines on their way out, in the order printed: held lines keep their places.
        self._order = LineOrder(lambda line: self._put_line(*line[:3], head=line[3]))
        self._cut: set[str] = set()  # streams whose next bytes begin mid-line (dropped before)
        self._skip: dict[str, int] = {}  # characters still to drop after such a gap
        self._note_seq: int | None = None
        self._head_used = 0  # bytes in head lines made
        self._tail: deque[tuple[int, int]] = deque()  # (seq, size) of tail lines made
        self._tail_bytes = 0
        self._dropped = [0, 0]  # lines, bytes
        self._noted = (0, 0)
        self._batch: dict[int, LogLine] = {}
        self._drop: tuple[int, int] | None = None
        self.fed_since_take = False
        self.any_fed = False  # anything at all, ever
        #: Tokens spent by the step's LLM calls, every try counted (SPEC §18).
        self.usage: dict[str, int] | None = None
        self._progress: dict[str, Any] | None = None  # reported since the last take

    def seconds(self) -> float:
        """Seconds since the log began (the step's first try)."""
        return time.monotonic() - self._t0

    def feed(self, stream: str, data: bytes) -> None:
        """Add bytes a writer wrote to ``stream`` (lines end with ``\\n``)."""
        if not data:
            return
        with self._lock:
            self.fed_since_take = self.any_fed = True
            t = time.monotonic() - self._t0
            if self._fed < HEAD_BYTES:
                part = data[:HEAD_BYTES - self._fed]
                self._head.append((stream, t, part))
                self._fed += len(part)
                data = data[len(part):]
                if not data:
                    return
            self._fed += len(data)
            self._chunks.append((stream, t, data))
            self._chunk_bytes += len(data)
            self._trim_chunks()

    def say(self, text: str) -> None:
        """Add a line of The Brain's own (stream ``brain``)."""
        self.feed("brain", (text.rstrip("\n") + "\n").encode("utf-8", errors="replace"))

    def count_usage(self, prompt_tokens: int, completion_tokens: int) -> None:
        """Add the tokens one model answer spent to the step's usage."""
        with self._lock:
            usage = self.usage or {"prompt_tokens": 0, "completion_tokens": 0}
            usage["prompt_tokens"] += max(prompt_tokens, 0)
            usage["completion_tokens"] += max(completion_tokens, 0)
            self.usage = usage

    def progress(self, progress: float, total: float | None = None,
                 message: str | None = None) -> None:
        """Note the step's latest progress (a server's ``notifications/progress``): stored
        with the next take, with a line of the log saying it (however many came between)."""
        shown: dict[str, Any] = {"progress": progress, "total": total,
                                 "message": scrub(message, self.secrets) if message else None}
        with self._lock:
            self._progress = shown
            self.fed_since_take = self.any_fed = True

    def take(self, *, final: bool = False) -> LogBatch:
        """What to store now: the lines made since the last take, the stored lines the
        tail has moved past, and the note on what was dropped. ``final``: the step has
        ended; unfinished lines are ended too."""
        with self._lock:
            self.fed_since_take = False
            fresh = {chunk[0] for chunk in self._head} | {chunk[0] for chunk in self._chunks}
            for stream in [s for s in self._held if s not in fresh and not final]:
                self._let_out(stream)  # held for a take already, nothing came after
            for chunk in self._head:
                self._make_lines(*chunk, head=True)
            self._head.clear()
            for chunk in self._chunks:
                self._make_lines(*chunk, head=False)
            self._chunks.clear()
            self._chunk_bytes = 0
            progress, self._progress = self._progress, None
            if progress is not None:
                self._add_line("brain", self.seconds(), progress_text(progress), head=False)
            if final:
                self._end_lines()
            batch = LogBatch(tuple(self._batch.values()), self._drop, self._note(), progress)
            self._batch, self._drop = {}, None
            self.fed_since_take = self.fed_since_take or bool(self._held)  # out next take
            return batch

    # --- inside the lock -----------------------------------------------------------------

    def _trim_chunks(self) -> None:
        """Keep no more unmade bytes than the tail (and a margin) can use."""
        keep = TAIL_BYTES + LINE_CHARS + longest()
        while self._chunk_bytes > keep:
            stream, t, data = self._chunks[0]
            over = self._chunk_bytes - keep
            if over >= len(data):
                self._chunks.popleft()
                gone = data
            else:
                self._chunks[0] = (stream, t, data[over:])
                gone = data[:over]
            self._chunk_bytes -= len(gone)
            self._count_dropped(gone.count(b"\n"), len(gone))
            # The stream's next bytes in the tail go on mid-line (see _make_lines).
            self._cut.add(stream)

    def _count_dropped(self, lines: int, size: int) -> None:
        self._dropped[0] += lines
        self._dropped[1] += size

    def _make_lines(self, stream: str, t: float, data: bytes, *, head: bool) -> None:
        decoder = self._decoders.get(stream)
        if decoder is None:
            decoder = self._decoders[stream] = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(data)
        if not head and stream in self._cut:
            self._cut.discard(stream)
            text = self._after_a_cut(stream, text)
        if stream in self._skip:
            text = self._skipped(stream, text)
        carried = self._carry.pop(stream, None)
        if carried is not None:
            t, text, head = carried[0], carried[1] + text, carried[2]
        held = self._held.pop(stream, None)
        if held is not None:
            t, text, head = held[0], held[1] + "\n" + text, held[2]
        ended, newline, rest = text.rpartition("\n")
        margin = longest()
        if newline:
            lines = (scrub(ended, self.secrets) or "").split("\n")
            hold = _may_go_on(lines, margin) if margin else 0
            self._order.release(stream)
            for line in lines[:len(lines) - hold]:
                self._add_line(stream, t, line, head=head)
            self._order.hold(stream, hold)
            if hold:
                self._held[stream] = (t, "\n".join(lines[-hold:]), head)
        if len(rest) > LINE_CHARS + margin:
            # A line too long to wait for its end goes out in pieces: scrubbed whole first,
            # and its last characters held back, where a secret still being written may
            # begin (a secret begun before them has arrived whole, and is scrubbed).
            rest = scrub(rest, self.secrets) or ""
            ready = len(rest) - margin
            whole = ready - ready % LINE_CHARS
            for start in range(0, whole, LINE_CHARS):
                self._add_line(stream, t, rest[start:start + LINE_CHARS], head=head)
            rest = rest[whole:]
        if rest:
            self._carry[stream] = (t, rest, head)

    def _after_a_cut(self, stream: str, text: str) -> str:
        """``text`` goes on where bytes before it were dropped. Around the gap, a secret
        may have been cut in two, and no scrub recognises half a secret: the unfinished
        line held from before the gap is kept but for its last characters (where such a
        secret may begin), and the first characters after the gap (where it may end) are
        dropped. Scrubbing only shortens, so each half lies within :func:`longest`
        characters of the gap once the whole secrets are scrubbed."""
        margin = longest()
        self._hold_with_carry(stream)
        held = self._carry.pop(stream, None)
        if held is not None:
            start = scrub(held[1], self.secrets) or ""
            kept = start[:max(len(start) - margin, 0)]
            lines = kept.split("\n")
            if not lines[-1]:  # ends with a whole line: no piece of the next one kept
                lines.pop()
            # Lines wholly dropped: the line breaks gone, less one for a line whose start is kept.
            whole = start.count("\n", len(kept)) - (1 if kept and not kept.endswith("\n") else 0)
            self._count_dropped(max(whole, 0), len(start) - len(kept))
            self._order.release(stream, whole=True)
            for line in lines:
                self._add_line(stream, held[0], line, head=held[2])
            self._order.hold(stream, 0)
        self._skip[stream] = margin
        return text

    def _skipped(self, stream: str, text: str) -> str:
        """``text`` less what is still to be dropped after a gap (see :meth:`_after_a_cut`),
        however few characters each write brings."""
        skip = self._skip.pop(stream)
        gone = min(skip, len(text))
        self._count_dropped(text.count("\n", 0, gone), gone)
        if skip > gone:
            self._skip[stream] = skip - gone
        return text[gone:]

    def _end_lines(self) -> None:
        for stream in sorted(self._cut):  # cut, and nothing came after: the gap is at the end
            self._after_a_cut(stream, "")
        self._cut.clear()
        for stream, decoder in self._decoders.items():
            rest = decoder.decode(b"", final=True)
            if rest:
                carried = self._carry.get(stream)
                self._carry[stream] = (carried[0] if carried else self.seconds(),
                                       (carried[1] if carried else "") + rest,
                                       carried[2] if carried else False)
        for stream in list(self._held):
            self._hold_with_carry(stream)
        for stream, (t, text, head) in sorted(self._carry.items()):
            lines = (scrub(text, self.secrets) or "").split("\n")
            if len(lines) > 1 and not lines[-1]:  # held lines, and no unfinished one
                lines.pop()
            self._order.release(stream, whole=True)
            for line in lines:
                self._add_line(stream, t, line, head=head)
            self._order.hold(stream, 0)
        self._carry.clear()
        self._order.end()

    def _hold_with_carry(self, stream: str) -> None:
        """The stream's held lines put before its unfinished line, as one carried text."""
        held = self._held.pop(stream, None)
        if held is None:
            return
        carried = self._carry.get(stream)
        text = held[1] + "\n" + (carried[1] if carried else "")  # held lines are whole
        self._carry[stream] = (held[0], text, held[2])

    def _let_out(self, stream: str) -> None:
        """The stream's held lines, out: nothing followed them for a take."""
        t, text, head = self._held.pop(stream)
        self._order.release(stream, whole=True)
        for line in (scrub_part(text, self.secrets) or "").split("\n"):
            self._add_line(stream, t, line, head=head)
        self._order.hold(stream, 0)

    def _add_line(self, stream: str, t: float, text: str, *, head: bool) -> None:
        """Add a line in its place among the lines on their way out (see
        :mod:`brain.executors.line_order`)."""
        self._order.add((stream, t, text, head))

    def _put_line(self, stream: str, t: float, text: str, *, head: bool) -> None:
        """Store a line (in pieces if long): to the head while it is ``head``'s and the
        head has room (and no line of the tail came yet), else to the tail."""
        for start in range(0, max(len(text), 1), LINE_CHARS):
            piece = text[start:start + LINE_CHARS]
            size = _size(piece)
            in_head = head and self._note_seq is None and self._head_used + size <= HEAD_BYTES
            if not in_head and self._note_seq is None:
                self._note_seq = self._new_seq()  # where the note on dropped lines goes
            seq = self._new_seq()
            self._batch[seq] = LogLine(seq, stream, t, piece)
            if in_head:
                self._head_used += size
            else:
                self._keep_in_tail(seq, size)

    def _new_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _keep_in_tail(self, seq: int, size: int) -> None:
        self._tail.append((seq, size))
        self._tail_bytes += size
        while self._tail_bytes > TAIL_BYTES and len(self._tail) > 1:
            old, old_size = self._tail.popleft()
            self._tail_bytes -= old_size
            self._count_dropped(1, old_size)
            if self._batch.pop(old, None) is None:  # stored already: delete it
                first = old if self._drop is None else self._drop[0]
                self._drop = (first, old)

    def _note(self) -> LogLine | None:
        dropped = (self._dropped[0], self._dropped[1])
        if dropped == self._noted:
            return None
        if self._note_seq is None:  # dropped before any line of the tail was made
            self._note_seq = self._new_seq()
        self._noted = dropped
        return LogLine(self._note_seq, "brain", time.monotonic() - self._t0,
                       f"… {dropped[0]:,} lines ({_amount(dropped[1])}) dropped …")
