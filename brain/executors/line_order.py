"""The order a step's log lines go out in, while some are held back.

A stream's last lines may be held back for a take (an encoded secret may go on in the next
lines: see :mod:`brain.executors.steplog`). Lines that other streams print meanwhile must
not overtake them: the log reads in the order lines were printed. So held lines keep a
place (a slot) in one queue; every later line waits behind it, and goes out once the slot
is filled and closed. Lines held again together with new ones after them (scrubbed as one)
span their old place and a new one at the end.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

#: A line on its way out: stream, time, text, whether it began in the head.
Line = tuple[str, float, str, bool]


class _Slot:
    """The place of some of a stream's held lines."""

    def __init__(self) -> None:
        self.lines: list[Line] = []
        self.open = True


class LineOrder:
    """Lines put out (through ``put``) in the order they were printed, held lines in their
    places. Not thread-safe: the log calls it under its lock."""

    def __init__(self, put: Callable[[Line], None]) -> None:
        self._put = put
        self._queue: deque[_Slot | Line] = deque()
        #: Each holding stream's places: a slot, and how many held lines it takes.
        self._places: dict[str, list[list[_Slot | int]]] = {}
        self._releasing: dict[str, list[list[_Slot | int]]] = {}

    def add(self, line: Line) -> None:
        """A line in its place: while its stream's held lines go out (:meth:`release`),
        into their places, as many as each takes; else behind every waiting line."""
        places = self._releasing.get(line[0])
        while places and _count(places[0]) <= 0:
            self._close([places.pop(0)])
        if places:
            _slot(places[0]).lines.append(line)
            places[0][1] = _count(places[0]) - 1
        else:
            self._queue.append(line)
        self._let_out()

    def release(self, stream: str, *, whole: bool = False) -> None:
        """The stream's held lines go out now, through :meth:`add`, until :meth:`hold`
        (``whole``: everything added until then is theirs, however scrubbing joined or
        split them)."""
        places = self._places.pop(stream, [])
        if whole and places:
            places[-1][1] = 1 << 60
        self._releasing[stream] = places

    def hold(self, stream: str, count: int) -> None:
        """The stream now holds back its last ``count`` lines (none: it holds nothing).
        Places its released lines did not fill are theirs; any more go at the end."""
        places = self._releasing.pop(stream, [])
        self._close([place for place in places if _count(place) <= 0])
        left = [place for place in places if _count(place) > 0]
        if not count:
            self._close(left)
            return
        more = count - sum(_count(place) for place in left)
        if more > 0 or not left:
            slot = _Slot()
            self._queue.append(slot)
            left.append([slot, max(more, 1)])
        self._places[stream] = left

    def end(self) -> None:
        """Every place closed: nothing is held any more (the step ended)."""
        for stream in list(self._places):
            self._close(self._places.pop(stream))

    def _close(self, places: list[list[_Slot | int]]) -> None:
        for place in places:
            _slot(place).open = False
        self._let_out()

    def _let_out(self) -> None:
        while self._queue:
            front = self._queue[0]
            if isinstance(front, _Slot):
                if front.open:
                    return
                self._queue.popleft()
                for line in front.lines:
                    self._put(line)
            else:
                self._queue.popleft()
                self._put(front)


def _slot(place: list[_Slot | int]) -> _Slot:
    slot = place[0]
    assert isinstance(slot, _Slot)
    return slot


def _count(place: list[_Slot | int]) -> int:
    count = place[1]
    assert isinstance(count, int)
    return count
