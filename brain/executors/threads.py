"""Worker threads for sync ``@step`` functions.

``asyncio.to_thread`` uses the loop's default executor, whose threads the
interpreter joins at exit: one timed-out function would keep ``brain run``
alive until it returns. These workers are daemon threads, so a step that
timed out (and is already recorded as failed) never holds the process.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any

_MAX_IDLE_WAIT = 60.0
#: A job computes, then returns what delivers its result: the worker counts itself idle
#: before it delivers, so the caller's next job (submitted as soon as this result arrives)
#: goes to this worker instead of starting another thread.
_jobs: queue.SimpleQueue[Callable[[], Callable[[], None]]] = queue.SimpleQueue()
_lock = threading.Lock()
# Idle workers not yet promised a job: idle workers minus jobs submitted and not yet taken.
# A job is promised to an idle worker when it is submitted, not when a worker takes it,
# so N jobs submitted at once (a `parallel()` block) get N threads, not one.
_idle = 0


def _worker() -> None:
    global _idle
    while True:
        try:
            job = _jobs.get(timeout=_MAX_IDLE_WAIT)
        except queue.Empty:
            with _lock:
                if _idle > 0:  # more idle workers than promised jobs: this one may go
                    _idle -= 1
                    return
            continue  # every idle worker is promised a job that is on its way: wait for it
        deliver: Callable[[], None] | None = None
        try:
            deliver = job()
        except BaseException:  # jobs settle their own errors; the worker must live on
            pass
        with _lock:
            _idle += 1
        if deliver is not None:
            deliver()


def _submit(job: Callable[[], Callable[[], None]]) -> None:
    global _idle
    with _lock:
        if _idle > 0:
            _idle -= 1  # promise the job to one idle worker
        else:  # every worker is busy, promised, or stuck in a timed-out step: add one
            threading.Thread(target=_worker, name="brain-step", daemon=True).start()
    _jobs.put(job)


async def run_in_thread(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``func`` in a daemon worker thread and await its result (context copied)."""
    return await ThreadCall(func, args, kwargs).result()


class ThreadCall:
    """A call of ``func`` in a daemon worker thread, started at once (from a running event
    loop): its result is awaited with :meth:`result`; who stops awaiting it (a timeout, a
    cancel) may still learn when it really ends (:meth:`when_done`)."""

    def __init__(self, func: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        self._future: asyncio.Future[Any] = loop.create_future()
        self._lock = threading.Lock()
        self._ended = False
        self._on_end: list[Callable[[], None]] = []
        ctx = contextvars.copy_context()
        future = self._future

        def settle(result: Any, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def job() -> Callable[[], None]:
            try:
                result, error = ctx.run(func, *args, **kwargs), None
            except BaseException as exc:
                result, error = None, exc
            self._end()

            def deliver() -> None:
                try:
                    loop.call_soon_threadsafe(settle, result, error)
                except RuntimeError:  # the loop is gone: nobody waits for this any more
                    pass

            return deliver

        _submit(job)

    async def result(self) -> Any:
        """The function's return value (its exception raised here)."""
        return await self._future

    def when_done(self, callback: Callable[[], None]) -> None:
        """Have ``callback`` called once the function has returned or raised: in its worker
        thread, or here at once if it has already."""
        with self._lock:
            if not self._ended:
                self._on_end.append(callback)
                return
        callback()

    def _end(self) -> None:
        with self._lock:
            self._ended = True
            callbacks, self._on_end = self._on_end, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a callback's failure must not kill the worker
                pass
