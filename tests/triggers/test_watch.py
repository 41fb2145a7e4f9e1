"""The ``watch(...)`` trigger (SPEC §5): real files in a temporary folder, a real watchdog observer.

Every test starts a :class:`FileWatcher` on the running event loop and records what
it fires. Waits are bounded polls. To show that something did *not* fire, a test
then writes a "sentinel" file that must fire: fires come in deadline order, so once
the sentinel has fired, anything earlier that was going to fire has fired too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from brain import WorkflowLoadError, watch
from brain.triggers.watch import FileWatcher, resolve_folder

DEBOUNCE = 0.2
WAIT = 30.0  # the longest any fire may take to show up (a bound for a very busy machine)


class Fires:
    """An ``on_fire`` callback that records ``(path, event)`` pairs, when and on which thread.

    With ``fail_on``, a fire for a path ending so raises after being recorded.
    """

    def __init__(self, fail_on: str | None = None) -> None:
        self.seen: list[tuple[str, str]] = []
        self.times: list[float] = []
        self.threads: set[int] = set()
        self._fail_on = fail_on
        self._changed = asyncio.Event()

    def __call__(self, path: str, event: str) -> None:
        self.seen.append((path, event))
        self.times.append(time.monotonic())
        self.threads.add(threading.get_ident())
        self._changed.set()
        if self._fail_on and path.endswith(self._fail_on):
            raise RuntimeError("handler broke")

    async def _until(self, done: Callable[[], bool], what: str) -> None:
        try:
            async with asyncio.timeout(WAIT):
                while not done():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            pytest.fail(f"{what} within {WAIT}s; fires: {self.seen}")

    async def wait_for(self, count: int) -> list[tuple[str, str]]:
        """Wait until at least ``count`` fires happened (fails after ``WAIT`` seconds)."""
        await self._until(lambda: len(self.seen) >= count, f"expected {count} fire(s)")
        return list(self.seen)

    async def settle(self, sentinel: Path) -> list[tuple[str, str]]:
        """Write ``sentinel`` (which must fire), wait for it, return the fires before it."""
        sentinel.write_text("sentinel")  # noqa: ASYNC240 - the file event is the point
        await self._until(lambda: (str(sentinel), "created") in self.seen, f"the sentinel {sentinel} fired")
        return [f for f in self.seen if f[0] != str(sentinel)]


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    """The watched folder (the test's tmp_path also holds its database)."""
    folder = tmp_path / "inbox"
    folder.mkdir()
    return folder


@pytest.fixture
def start_watcher() -> Iterator[Callable[..., tuple[FileWatcher, Fires]]]:
    """Start watchers on the running loop; every one is stopped after the test."""
    started: list[FileWatcher] = []

    def start(folder: Path | str, fail_on: str | None = None, **options: Any) -> tuple[FileWatcher, Fires]:
        fires = Fires(fail_on)
        options.setdefault("debounce_seconds", DEBOUNCE)
        watcher = FileWatcher(str(folder), on_fire=fires, **options)
        watcher.start(asyncio.get_running_loop())
        started.append(watcher)
        return watcher, fires

    yield start
    for watcher in started:
        watcher.stop()


# --- filtering ---------------------------------------------------------------


async def test_only_files_matching_a_pattern_fire(inbox: Path, start_watcher):
    _, fires = start_watcher(inbox, patterns=["*.csv"])
    (inbox / "notes.txt").write_text("no")
    (inbox / "data.csv").write_text("a,b\n1,2\n")
    (inbox / "folder.csv").mkdir()  # directories never fire, whatever their name

    assert await fires.settle(inbox / "zz.csv") == [(str(inbox / "data.csv"), "created")]


async def test_on_fire_gets_the_absolute_normalised_path_in_the_loop_thread(inbox: Path, start_watcher):
    _, fires = start_watcher(f"{inbox}/./", patterns=["*.csv"])
    (inbox / "data.csv").write_text("x")

    assert await fires.wait_for(1) == [(str(inbox / "data.csv"), "created")]
    assert os.path.isabs(fires.seen[0][0])
    assert fires.threads == {threading.get_ident()}


async def test_modified_only_ignores_new_files_and_fires_when_one_changes(inbox: Path, start_watcher):
    existing = inbox / "existing.csv"
    existing.write_text("old\n")
    _, fires = start_watcher(inbox, events=["modified"])

    # A new file is a creation, though writing it also emits "modified" on Linux.
    new = inbox / "new.csv"
    new.write_text("first\n")
    with existing.open("a") as f:  # the sentinel: an existing file changes
        f.write("more\n")
    assert await fires.wait_for(1) == [(str(existing), "modified")]

    with new.open("a") as f:  # once settled, the new file is an existing one
        f.write("second\n")
    assert await fires.wait_for(2) == [(str(existing), "modified"), (str(new), "modified")]
    await asyncio.sleep(DEBOUNCE * 2)
    assert len(fires.seen) == 2


async def test_created_only_ignores_changes_and_counts_a_rename_into_place_as_created(inbox: Path,
                                                                                    start_watcher):
    existing = inbox / "existing.csv"
    existing.write_text("old\n")
    _, fires = start_watcher(inbox, patterns=["*.csv"], events=["created"])

    existing.write_text("rewritten\n")
    (inbox / "report.part").write_text("written under a temporary name")
    os.rename(inbox / "report.part", inbox / "report.csv")  # the usual atomic write

    assert await fires.settle(inbox / "zz.csv") == [(str(inbox / "report.csv"), "created")]


async def test_moved_is_reported_when_configured(inbox: Path, start_watcher):
    (inbox / "a.csv").write_text("x")
    _, fires = start_watcher(inbox, events=["moved"])
    os.rename(inbox / "a.csv", inbox / "b.csv")

    assert await fires.wait_for(1) == [(str(inbox / "b.csv"), "moved")]


async def test_deleted_fires_for_a_file_that_goes_but_not_for_one_that_came_and_went(inbox: Path,
                                                                                   start_watcher):
    old = inbox / "old.csv"
    old.write_text("x")
    _, fires = start_watcher(inbox, events=["created", "deleted"], debounce_seconds=0.5)

    temp = inbox / "temp.csv"
    temp.write_text("scratch")
    temp.unlink()  # within one debounce: nothing to report
    old.unlink()

    assert await fires.settle(inbox / "zz.csv") == [(str(old), "deleted")]


# --- recursion ---------------------------------------------------------------


async def test_subfolders_are_ignored_unless_recursive(inbox: Path, start_watcher):
    sub = inbox / "sub"
    sub.mkdir()
    _, fires = start_watcher(inbox)
    (sub / "deep.csv").write_text("x")

    assert await fires.settle(inbox / "zz.csv") == []


async def test_recursive_sees_subfolders_including_new_ones(inbox: Path, start_watcher):
    sub = inbox / "sub"
    sub.mkdir()
    _, fires = start_watcher(inbox, recursive=True, patterns=["*.csv"])
    (sub / "deep.csv").write_text("x")
    assert await fires.wait_for(1) == [(str(sub / "deep.csv"), "created")]

    newer = inbox / "new" / "nested"
    newer.mkdir(parents=True)
    await asyncio.sleep(0.1)  # let watchdog add watches for the new folders
    (newer / "deeper.csv").write_text("y")
    assert await fires.wait_for(2) == [(str(sub / "deep.csv"), "created"),
                                       (str(newer / "deeper.csv"), "created")]


# --- debouncing --------------------------------------------------------------


async def test_a_file_written_in_chunks_fires_once_after_it_settles(inbox: Path, start_watcher):
    _, fires = start_watcher(inbox, debounce_seconds=0.5)
    path = inbox / "big.csv"
    with path.open("w") as f:
        for i in range(10):
            f.write(f"chunk {i}\n" * 100)
            f.flush()
            await asyncio.sleep(0.05)  # shorter than the debounce
    closed = time.monotonic()

    assert await fires.wait_for(1) == [(str(path), "created")]
    assert fires.times[0] >= closed + 0.5 * 0.9  # trailing edge: after the last write, not the first
    await asyncio.sleep(0.6)
    assert len(fires.seen) == 1


async def test_two_files_fire_twice(inbox: Path, start_watcher):
    _, fires = start_watcher(inbox)
    (inbox / "one.csv").write_text("1")
    (inbox / "two.csv").write_text("2")

    assert sorted(await fires.wait_for(2)) == [(str(inbox / "one.csv"), "created"),
                                               (str(inbox / "two.csv"), "created")]
    await asyncio.sleep(DEBOUNCE * 2)
    assert len(fires.seen) == 2


# --- symlinks ----------------------------------------------------------------


async def test_a_symlink_pointing_outside_the_folder_is_ignored(tmp_path: Path, inbox: Path,
                                                                start_watcher):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text("not yours")
    (inbox / "inside.csv").write_text("yours")
    _, fires = start_watcher(inbox, recursive=True)

    (inbox / "escape.csv").symlink_to(outside / "secret.csv")
    (inbox / "escape-dir").symlink_to(outside, target_is_directory=True)
    (inbox / "escape.csv").touch()  # through the link: the change happens outside
    (outside / "other.csv").write_text("also outside")
    (inbox / "alias.csv").symlink_to(inbox / "inside.csv")  # a link that stays inside is fine

    assert await fires.settle(inbox / "zz.csv") == [(str(inbox / "alias.csv"), "created")]


# --- configuration and lifecycle ---------------------------------------------


def test_resolve_folder_is_relative_to_the_workflow_folder(tmp_path: Path, inbox: Path):
    assert resolve_folder(watch("inbox"), str(tmp_path)) == str(inbox)
    assert resolve_folder(watch("./inbox/../inbox/"), str(tmp_path)) == str(inbox)
    assert resolve_folder(watch(str(inbox)), "/elsewhere") == str(inbox)


def test_a_missing_folder_is_a_load_error_naming_the_folder_and_path(tmp_path: Path):
    with pytest.raises(WorkflowLoadError) as info:
        resolve_folder(watch("no-such-inbox"), str(tmp_path))
    message = str(info.value)
    assert "no-such-inbox" in message and str(tmp_path) in message and "does not exist" in message

    (tmp_path / "a-file").write_text("")
    with pytest.raises(WorkflowLoadError, match="not a folder"):
        resolve_folder(watch("a-file"), str(tmp_path))


async def test_stop_drops_pending_fires_and_ends_watching(inbox: Path, start_watcher):
    watcher, fires = start_watcher(inbox, debounce_seconds=0.3)
    (inbox / "pending.csv").write_text("x")
    await asyncio.sleep(0.05)  # the event is in, its fire not yet due
    watcher.stop()
    (inbox / "after.csv").write_text("y")

    await asyncio.sleep(0.8)
    assert fires.seen == []


async def test_an_error_in_on_fire_is_logged_and_watching_goes_on(inbox: Path, start_watcher, caplog):
    _, fires = start_watcher(inbox, fail_on="bad.csv")
    with caplog.at_level(logging.ERROR, logger="brain.triggers.watch"):
        (inbox / "bad.csv").write_text("x")
        await fires.wait_for(1)
        (inbox / "good.csv").write_text("y")
        assert await fires.wait_for(2) == [(str(inbox / "bad.csv"), "created"),
                                           (str(inbox / "good.csv"), "created")]
    assert "handler broke" in caplog.text
