"""Run a coroutine to completion from sync code, even inside a running event loop."""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: The main thread's event loop for sync calls, kept between them (with the process id
#: that made it: a forked child makes its own).
_main: tuple[asyncio.Runner, int] | None = None


def run_sync(coro: Coroutine[Any, Any, T], *, thread_name: str = "brain-run") -> T:
    """``asyncio.run(coro)``; when this thread already runs a loop (Jupyter, an async test,
    a handler), on a private loop in a new thread instead.

    In the main thread the loop is kept from one call to the next (what a call leaves
    running is cancelled as ``asyncio.run`` would), so what is kept per event loop —
    a PostgreSQL store's connections — serves the next call too; it shuts down as the
    process exits.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        if threading.current_thread() is threading.main_thread():
            return _run_on_main(coro)
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name=thread_name)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    result: T = box["result"]
    return result


def _run_on_main(coro: Coroutine[Any, Any, T]) -> T:
    """``coro`` on the main thread's kept loop, in a copy of the caller's context."""
    global _main
    if _main is None or _main[1] != os.getpid():
        runner = asyncio.Runner()
        atexit.register(runner.close)
        _main = (runner, os.getpid())
    runner = _main[0]
    try:
        return runner.run(coro, context=contextvars.copy_context())
    finally:
        runner.run(_cancel_left())


async def _cancel_left() -> None:
    """Cancel the tasks a call left behind, and wait for them to end."""
    me = asyncio.current_task()
    left = [task for task in asyncio.all_tasks() if task is not me]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)
