"""The ``watch(...)`` trigger: file events from watchdog, debounced per path (SPEC §5).

A :class:`FileWatcher` runs a watchdog observer on one folder. Events are
filtered on the observer's thread (file name pattern, inside the folder, real
path inside the folder) and handed to the asyncio loop, which keeps one
*burst* per path: every new event for the path pushes its deadline back to
``debounce_seconds`` after that event (trailing edge), so a file written in
chunks fires once, after it settles. The burst then becomes one fire,
``on_fire(path, event)``, called in the loop's thread.

The event a burst reports (its *outcome*) follows what happened to the path:

* it ends with ``deleted``: ``deleted``, unless the burst began with the path
  appearing (``created`` or moved in) — a temporary file that came and went
  fires nothing;
* it began with the path appearing: ``created``, or ``moved`` for a file moved
  or renamed onto the path (a new file written in chunks is a creation, even
  though each chunk is also a ``modified`` event);
* otherwise the last event (usually ``modified``; for a file deleted then
  written again, whatever came last).

The outcome must be one of the configured ``events``, else the burst fires
nothing; ``moved`` counts as ``created`` when only ``created`` is configured
(a file moved or renamed into place — the usual atomic write — arrives as a
new file). Deciding on the whole burst, not on each event, is what makes
``events=["modified"]`` ignore brand-new files, whose creation is always
followed by ``modified`` events on Linux.

Other choices: directories never fire; metadata-only changes (``chmod``,
``touch`` of an existing file) are not modifications; a file closed after
writing re-arms a pending burst (so the fire comes ``debounce_seconds`` after
the close) but never starts one; the source of a move reports ``deleted``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from brain._errors import WorkflowLoadError
from brain.dsl.triggers import WatchTrigger

__all__ = ["EVENT_KINDS", "FileWatcher", "resolve_folder"]

log = logging.getLogger("brain.triggers.watch")

EVENT_KINDS = ("created", "modified", "deleted", "moved")
"""The event names ``watch(events=...)`` accepts and ``on_fire`` reports."""

# Only these reach us: opens, reads (closed without writing), attribute changes
# and directory events are dropped by watchdog itself (for inotify, in the kernel
# mask), so a workflow reading the file it was triggered by causes no events.
_WATCHED_EVENT_TYPES: list[type[FileSystemEvent]] = [
    FileCreatedEvent, FileModifiedEvent, FileDeletedEvent, FileMovedEvent, FileClosedEvent,
]
_CLOSED = "closed"  # re-arms a pending burst, never starts one
_STOP_JOIN_SECONDS = 5.0


def resolve_folder(trig: WatchTrigger, workflow_dir: str) -> str:
    """The absolute, normalised folder ``trig`` watches.

    A relative ``path`` is relative to ``workflow_dir`` (the workflow file's
    folder); ``~`` is expanded. Raises :class:`~brain.WorkflowLoadError` when
    the folder does not exist or is not a folder, since a watcher on it could
    never fire.

    >>> from brain import watch
    >>> resolve_folder(watch("."), "/")
    '/'
    """
    folder = os.path.normpath(os.path.join(os.path.abspath(workflow_dir),
                                           os.path.expanduser(trig.path)))
    where = f"watch({trig.path!r}) in the workflow folder {workflow_dir!r}"
    if not os.path.exists(folder):
        raise WorkflowLoadError(f"{where}: the folder {folder!r} does not exist; "
                                "create it or fix the path (a relative path is relative to "
                                "the workflow file's folder)")
    if not os.path.isdir(folder):
        raise WorkflowLoadError(f"{where}: {folder!r} is not a folder; watch() needs a folder")
    return folder


@dataclass
class _Burst:
    """The events of one path not yet fired (loop thread only)."""

    first: str
    last: str
    deadline: float
    timer: asyncio.TimerHandle | None = None


class _Handler(FileSystemEventHandler):
    """Passes every watchdog event to its watcher (on the observer's thread)."""

    def __init__(self, watcher: FileWatcher) -> None:
        super().__init__()
        self._watcher = watcher

    def dispatch(self, event: FileSystemEvent) -> None:
        self._watcher._on_event(event)


class FileWatcher:
    """Watches ``folder`` and calls ``on_fire(path, event)`` once per settled path.

    ``path`` is absolute and normalised (under ``folder`` as given, symlinks not
    resolved); ``event`` is one of :data:`EVENT_KINDS`, chosen as the module
    docstring describes. ``patterns`` are matched with :func:`fnmatch.fnmatch`
    against the file name; ``recursive`` also watches subfolders. Events whose
    real path (:func:`os.path.realpath`) leaves the folder are ignored, so a
    symlink to a file elsewhere never fires.

    >>> watcher = FileWatcher("/data/inbox", patterns=["*.csv"], on_fire=print)  # doctest: +SKIP
    >>> watcher.start(asyncio.get_running_loop())                                # doctest: +SKIP
    >>> watcher.stop()                                                           # doctest: +SKIP

    ``start`` and ``stop`` are meant to be called from the loop's thread;
    ``on_fire`` always runs there, and an exception from it is logged.
    """

    def __init__(self, folder: str, *, patterns: Iterable[str] = ("*",),
                 events: Iterable[str] = ("created", "modified"), recursive: bool = False,
                 debounce_seconds: float = 0.5, on_fire: Callable[[str, str], None]) -> None:
        self.folder = os.path.normpath(os.path.abspath(folder))
        self.patterns = tuple(patterns)
        self.events = frozenset(events)
        unknown = self.events - set(EVENT_KINDS)
        if unknown:
            raise ValueError(f"unknown watch events {sorted(unknown)}: use {', '.join(EVENT_KINDS)}")
        if debounce_seconds < 0:
            raise ValueError("debounce_seconds must not be negative")
        self.recursive = recursive
        self.debounce_seconds = debounce_seconds
        self._on_fire = on_fire
        self._real_folder = os.path.realpath(self.folder)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._observer: BaseObserver | None = None
        self._stopped = False
        self._bursts: dict[str, _Burst] = {}
        # Events cross from the observer's thread in batches: one loop wake-up per
        # batch, not per event (a large file copy can emit thousands).
        self._inbox_lock = threading.Lock()
        self._inbox: list[tuple[str, str]] = []
        self._drain_scheduled = False

    # --- lifecycle -------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start watching; fires are scheduled on ``loop``.

        Raises :class:`~brain.WorkflowLoadError` when the folder cannot be
        watched (it vanished, or the system's watch limit is reached).
        """
        if self._loop is not None:
            raise RuntimeError("this FileWatcher was already started")
        self._loop = loop
        observer = Observer()
        try:
            observer.schedule(_Handler(self), self.folder, recursive=self.recursive,
                              event_filter=_WATCHED_EVENT_TYPES)
            observer.start()
        except OSError as exc:
            self._stopped = True
            with contextlib.suppress(Exception):  # release the inotify thread and descriptor
                observer.stop()
            raise WorkflowLoadError(f"cannot watch the folder {self.folder!r}: {exc}") from exc
        self._observer = observer

    def stop(self) -> None:
        """Stop watching and drop pending bursts: nothing fires after this returns."""
        self._stopped = True
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(_STOP_JOIN_SECONDS)
        with self._inbox_lock:
            self._inbox.clear()
        loop = self._loop
        if loop is None:
            return
        try:
            in_loop_thread = asyncio.get_running_loop() is loop
        except RuntimeError:
            in_loop_thread = False
        if in_loop_thread or loop.is_closed():
            self._cancel_timers()
        else:
            try:
                loop.call_soon_threadsafe(self._cancel_timers)
            except RuntimeError:  # closed meanwhile
                self._cancel_timers()

    def _cancel_timers(self) -> None:
        for burst in self._bursts.values():
            if burst.timer is not None:
                burst.timer.cancel()
        self._bursts.clear()

    # --- observer thread ---------------------------------------------------------

    def _on_event(self, event: FileSystemEvent) -> None:
        """Filter one watchdog event and pass what is left to the loop."""
        if self._stopped or event.is_directory:
            return
        kind = event.event_type
        if kind == "moved":
            self._accept(os.fsdecode(event.src_path), "deleted")
            self._accept(os.fsdecode(event.dest_path), "moved")
        elif kind in ("created", "modified", "deleted", _CLOSED):
            self._accept(os.fsdecode(event.src_path), kind)

    def _accept(self, raw_path: str, kind: str) -> None:
        path = os.path.normpath(raw_path)
        if not self._wanted(path, check_real=kind != "deleted"):
            return
        with self._inbox_lock:
            self._inbox.append((path, kind))
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is going away
            self._loop.call_soon_threadsafe(self._drain)

    def _wanted(self, path: str, *, check_real: bool) -> bool:
        """Under the folder (directly unless recursive), matching a pattern, really inside."""
        parent = os.path.dirname(path)
        if self.recursive:
            if not path.startswith(self.folder.rstrip(os.sep) + os.sep):
                return False
        elif parent != self.folder:
            return False
        if not any(fnmatch.fnmatch(os.path.basename(path), p) for p in self.patterns):
            return False
        return not check_real or self._really_inside(path)

    def _really_inside(self, path: str) -> bool:
        real, folder = os.path.realpath(path), self._real_folder
        try:
            return real != folder and os.path.commonpath([real, folder]) == folder
        except ValueError:  # another drive (Windows)
            return False

    # --- loop thread -------------------------------------------------------------

    def _drain(self) -> None:
        """Move the queued events into their bursts, re-arming each one's deadline."""
        with self._inbox_lock:
            batch, self._inbox = self._inbox, []
            self._drain_scheduled = False
        if self._stopped or self._loop is None:
            return
        deadline = self._loop.time() + self.debounce_seconds
        for path, kind in batch:
            burst = self._bursts.get(path)
            if burst is None:
                if kind == _CLOSED:
                    continue
                burst = self._bursts[path] = _Burst(first=kind, last=kind, deadline=deadline)
                burst.timer = self._loop.call_at(deadline, self._expire, path)
                continue
            if kind != _CLOSED:
                burst.last = kind
            # Push the deadline back; the timer already armed re-arms itself when it
            # finds the deadline moved (cheaper than a new timer per event).
            burst.deadline = deadline

    def _expire(self, path: str) -> None:
        burst = self._bursts.get(path)
        if burst is None or self._stopped or self._loop is None:
            return
        # asyncio may run a timer up to its clock resolution early: allow 1 ms.
        if burst.deadline - self._loop.time() > 0.001:
            burst.timer = self._loop.call_at(burst.deadline, self._expire, path)
            return
        del self._bursts[path]
        outcome = self._outcome(burst)
        if outcome is None:
            return
        if outcome != "deleted" and not self._really_inside(path):
            return  # replaced by a symlink to elsewhere while it settled
        try:
            self._on_fire(path, outcome)
        except Exception:
            log.exception("watch %s: handling %s of %s failed", self.folder, outcome, path)

    def _outcome(self, burst: _Burst) -> str | None:
        """The event a settled burst reports, or ``None`` when it should not fire."""
        appeared = burst.first in ("created", "moved")
        if burst.last == "deleted":
            outcome = None if appeared else "deleted"
        elif appeared:
            outcome = burst.first
        else:
            outcome = burst.last
        if outcome == "moved" and "moved" not in self.events:
            outcome = "created"
        return outcome if outcome in self.events else None
