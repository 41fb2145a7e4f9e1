"""SQLite through threads of its own: one writer per database, and one reader.

Every write of a store on a SQLite file goes through its writer
(:class:`SqliteThread` with ``writes=True``): the event loop queues a job (a
function of a plain synchronous connection), the thread takes every job queued
so far, runs the writes among them in one ``BEGIN IMMEDIATE`` ... ``COMMIT``,
and answers each caller after that commit, with one wake-up per event loop. A
write costs two thread hand-offs (there and back) however many statements it
holds, and writes that arrive together share one commit: the step that
finishes while another step's start is waiting goes out in the same
transaction.

One job that breaks a constraint (a repeated webhook delivery, a claimed
schedule fire) does not fail the others: the batch is rolled back and each job
is written alone. A busy database is retried for up to
:data:`~brain.store.errors.RETRY_SECONDS`.

Reads go through a second thread with its own connection (WAL lets them run
while the writer writes), so no async driver sits between the store and
``sqlite3``. Jobs get the plain ``sqlite3`` connection (autocommit: the only
transactions are the ``BEGIN IMMEDIATE``/``COMMIT`` written here).

An in-memory database is one connection that never waits on a disk or on
another process: :class:`SqliteInline` runs its jobs at once in the caller's
thread (each write in a transaction of its own), where two thread hand-offs per
statement would cost more than the statement (most of a mocked run's time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from brain._errors import StoreError
from brain.store.errors import RETRY_SECONDS, short, transient

log = logging.getLogger("brain.store")

Job = Callable[[sqlite3.Connection], Any]


@dataclass
class _Queued:
    job: Job
    write: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    outcome: Any = None
    failed: BaseException | None = field(default=None)


class SqliteThread:
    """A thread that owns one connection to a SQLite database and runs jobs on it in order.

    ``connect`` opens that connection (in the thread, on its first job: set up
    with the database's pragmas, in autocommit mode).
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection], *, name: str) -> None:
        self._open_connection = connect
        self._jobs: queue.SimpleQueue[_Queued | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._started = False
        self._closed = False
        #: Called in the thread as it ends (set by :meth:`close`): wakes the closing loop.
        self._on_exit: Callable[[], None] | None = None

    async def run(self, job: Job, *, write: bool) -> Any:
        """Run ``job(connection)`` and return what it returns; a ``write`` inside a
        transaction committed before this returns.

        The job is queued at once and runs even if the caller is cancelled while
        it waits (a write is never left half-done).
        """
        if self._closed:
            raise StoreError("the store is closed")
        if not self._started:
            self._started = True
            self._thread.start()
        loop = asyncio.get_running_loop()
        queued = _Queued(job, write, loop, loop.create_future())
        self._jobs.put(queued)
        return await queued.future

    async def close(self) -> None:
        """Finish what is queued, then stop the thread and close its connection."""
        if self._closed:
            return
        self._closed = True
        if self._started:
            # The thread tells the loop it ended (no helper thread waits on a join); a
            # thread already ended (it could not connect) is simply joined.
            loop = asyncio.get_running_loop()
            ended: asyncio.Future[None] = loop.create_future()

            def settle() -> None:
                if not ended.done():
                    ended.set_result(None)

            def wake() -> None:
                loop.call_soon_threadsafe(settle)

            self._on_exit = wake
            self._jobs.put(None)
            if self._thread.is_alive():
                await ended
            self._thread.join()

    # --- in the thread ---

    def _serve(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                first = self._jobs.get()
                if first is None:
                    return
                batch, stop = _drain(first, self._jobs)
                if conn is None:
                    conn = self._connect(batch)
                if conn is not None:
                    self._run_batch(conn, batch)
                _answer(batch)
                if stop:
                    return
        finally:
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # closing a broken connection
                    pass
            on_exit = self._on_exit
            if on_exit is not None:
                with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
                    on_exit()

    def _connect(self, batch: list[_Queued]) -> sqlite3.Connection | None:
        try:
            conn: sqlite3.Connection = _retrying(self._open_connection)
        except Exception as exc:  # every caller is told
            for item in batch:
                item.failed = exc
            return None
        return conn

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Queued]) -> None:
        """In order: consecutive writes share a commit; a read runs after the writes queued
        before it are committed."""
        writes: list[_Queued] = []
        for item in batch:
            if item.write:
                writes.append(item)
                continue
            if writes:
                _commit(conn, writes)
                writes = []
            try:
                item.outcome = _retrying(partial(item.job, conn))
            except Exception as exc:  # that caller is told
                item.failed = exc
        if writes:
            _commit(conn, writes)


class SqliteInline:
    """One connection whose jobs run at once in the calling thread, one at a time (a lock
    keeps callers in other threads, or other event loops, out of each other's
    transactions): for an in-memory database, where nothing waits. Same interface as
    :class:`SqliteThread`; ``connect`` is called on the first job."""

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._open_connection = connect
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._closed = False

    async def run(self, job: Job, *, write: bool) -> Any:
        """Run ``job(connection)`` now and return what it returns; a ``write`` inside a
        transaction of its own, committed before this returns."""
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            if self._conn is None:
                self._conn = self._open_connection()
            if write:
                return _transaction(self._conn, [job])[0]
            return job(self._conn)

    async def close(self) -> None:
        """Close the connection (the database goes with it)."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _drain(first: _Queued, jobs: queue.SimpleQueue[_Queued | None]) -> tuple[list[_Queued], bool]:
    """``first`` and everything queued behind it; whether the stop sign was among them."""
    batch = [first]
    while True:
        try:
            more = jobs.get_nowait()
        except queue.Empty:
            return batch, False
        if more is None:
            return batch, True
        batch.append(more)


def _commit(conn: sqlite3.Connection, writes: list[_Queued]) -> None:
    try:
        outcomes = _retrying(partial(_transaction, conn, [item.job for item in writes]))
    except Exception as exc:  # decided below, per job
        if transient(exc) or len(writes) == 1:
            for item in writes:
                item.failed = exc
            return
        # One of them broke a constraint or cannot be written: each alone, so only that
        # one fails.
        for item in writes:
            try:
                item.outcome = _retrying(partial(_transaction, conn, [item.job]))[0]
            except Exception as alone:  # that caller is told
                item.failed = alone
        return
    for item, outcome in zip(writes, outcomes, strict=True):
        item.outcome = outcome


def _transaction(conn: sqlite3.Connection, jobs: list[Job]) -> list[Any]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        outcomes = [job(conn) for job in jobs]
        conn.execute("COMMIT")
    except BaseException:
        # Never leave the connection inside an open transaction (a COMMIT that met a
        # busy database included).
        try:
            conn.execute("ROLLBACK")
        except Exception:  # nothing was open
            pass
        raise
    return outcomes


def _retrying(attempt: Callable[[], Any]) -> Any:
    """``attempt()`` until it succeeds, retrying a busy database with backoff for up to
    :data:`RETRY_SECONDS`; other errors raise at once."""
    deadline = time.monotonic() + RETRY_SECONDS
    delay = 0.05
    warned = False
    while True:
        try:
            return attempt()
        except Exception as exc:
            if not transient(exc) or time.monotonic() + delay > deadline:
                raise
            if not warned:
                log.warning("database busy or unreachable (%s); retrying", short(exc))
                warned = True
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


def _answer(batch: list[_Queued]) -> None:
    """Hand each outcome back to its caller's loop: one wake-up per loop, not per job."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Queued]] = {}
    for item in batch:
        by_loop.setdefault(item.loop, []).append(item)
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, items)
        except RuntimeError:  # that loop is closed: nobody is waiting any more
            pass


def _settle(items: list[_Queued]) -> None:
    for item in items:
        if item.future.done():  # the caller stopped waiting
            continue
        if item.failed is not None:
            item.future.set_exception(item.failed)
        else:
            item.future.set_result(item.outcome)
