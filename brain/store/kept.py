"""Stores kept for the process: one per PostgreSQL URL and event loop, for in-process runs.

Opening a PostgreSQL store costs connections and a schema check: paid per run,
that was most of a short run's time. ``wf()``, ``wf.arun()``, ``brain run`` and
``wf.enqueue()`` given a URL (or ``BRAIN_DATABASE_URL``) take the store kept
here instead. Its connections belong to the event loop that opened them, so a
store is kept per (URL, loop); it is closed when its loop shuts down (as
``asyncio.run`` and ``asyncio.Runner`` shut one down: with its async generators)
and dropped with the loop. The schema is checked once per URL in the process: a
store opened later, for another loop, trusts that check.

SQLite stores are not kept: opening one is cheap, and a file removed between two
runs must be created again, not written to through an old handle.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator

from brain.store.store import Store
from brain.store.urls import driver_name

#: URLs whose schema this process found current.
_checked: set[str] = set()


class _LoopStores:
    """The stores one event loop keeps, and the async generator that closes them as the
    loop shuts down."""

    def __init__(self) -> None:
        self.stores: dict[str, Store] = {}
        self.closer: AsyncIterator[None] | None = None

    async def close(self) -> AsyncIterator[None]:
        """Suspended until the loop finalises it (``shutdown_asyncgens``): then every
        store goes."""
        try:
            yield
        finally:
            self.closer = None
            stores, self.stores = list(self.stores.values()), {}
            for store in stores:
                await store.close()


_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopStores] = \
    weakref.WeakKeyDictionary()


def is_kept(url: str) -> bool:
    """Whether runs on ``url`` use a kept store (PostgreSQL)."""
    driver = driver_name(url)
    return driver in ("postgresql", "postgresql+asyncpg")


async def kept_store(url: str | None = None) -> Store:
    """The open store this event loop keeps for ``url`` (default ``BRAIN_DATABASE_URL``),
    opened on first use; never close it (the loop's shutdown does). Only for URLs
    :func:`is_kept` accepts."""
    loop = asyncio.get_running_loop()
    kept = _loops.get(loop)
    if kept is None:
        kept = _loops[loop] = _LoopStores()
    store = Store(url)
    found = kept.stores.get(store.url)
    if found is not None and found.is_open:
        return found
    if found is None:
        found = kept.stores[store.url] = store
    if kept.closer is None:
        # Started here, so the loop tracks it and closes it as it shuts down.
        kept.closer = kept.close()
        await anext(kept.closer)
    try:
        await found.open(check_schema=found.url not in _checked)
    except BaseException:
        if kept.stores.get(found.url) is found:
            del kept.stores[found.url]
        raise
    _checked.add(found.url)
    return found


@contextlib.asynccontextmanager
async def store_for_url(url: str | None = None) -> AsyncIterator[Store]:
    """An open store on ``url`` (default ``BRAIN_DATABASE_URL``) for the ``async with``
    block: the kept one on PostgreSQL (left open), else one of the block's own (closed
    after it)."""
    store = Store(url)
    if is_kept(store.url):
        yield await kept_store(store.url)
        return
    await store.open()
    try:
        yield store
    finally:
        await store.close()
