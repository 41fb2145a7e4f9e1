"""Text on its way into the store: placeholders filled in, secrets scrubbed, errors told."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from brain._secrets import longest, scrub
from brain.placeholders import Ref, render
from brain.results import clean_text
from brain.shell_check import render_command


def stored_text(text: str | None, secrets: Iterable[str] = ()) -> str | None:
    """Text about to be stored: every known secret value replaced by ``***``."""
    return scrub(text, secrets)


#: Texts longer than this are scrubbed on a worker thread: a step's output may be
#: megabytes, and scrubbing that against many secrets takes tens of milliseconds or more,
#: too long to hold the event loop (the server's other runs, ``/health``).
APART_ABOVE = 64 * 1024


async def stored_text_apart(text: str | None, secrets: Iterable[str] = ()) -> str | None:
    """:func:`stored_text`, done on a worker thread when ``text`` is long, so the event
    loop goes on meanwhile (the scrubber is pure Python: the loop gets the GIL back at
    every switch interval)."""
    if text is None or len(text) <= APART_ABOVE:
        return stored_text(text, secrets)
    return await asyncio.to_thread(stored_text, text, list(secrets))


def scrub_deep(value: Any, secrets: Iterable[str]) -> Any:
    """Inputs about to be stored, with secret values scrubbed from every string in them."""
    secrets = list(secrets)
    if isinstance(value, str):
        return clean_text(scrub(value, secrets))
    if isinstance(value, dict):
        return {k: scrub_deep(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_deep(v, secrets) for v in value]
    return value


def describe(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when even that raises (an exception's ``__str__`` is
    user code too)."""
    try:
        return str(exc)
    except Exception:
        return f"{type(exc).__name__} (its message could not be read)"


def internal_error(exc: BaseException) -> str:
    """The text stored for an error raised inside the orchestrator (secrets scrubbed). A
    database error is told by its driver's first line, never the SQL and its values."""
    orig = getattr(exc, "orig", None)
    if isinstance(orig, BaseException) and hasattr(exc, "statement"):
        lines = describe(orig).strip().splitlines()
        text = f"internal error: {type(orig).__name__}: {lines[0] if lines else ''}"
    else:
        text = f"internal error: {type(exc).__name__}: {describe(exc)}"
    # Scrubbed, then cut: a cut first could split a secret and keep its beginning. (Only
    # what the cut keeps, and a secret's length more, needs scrubbing.)
    return (scrub(clean_text(text[:2000 + longest()])) or "internal error")[:2000]


def fill(text: str, lookup: Callable[[Ref], str], shell_quote: bool) -> str:
    """A field filled in: a shell command (``shell_quote``) quoted as the check decided
    for each placeholder (bare, in "…" or in '…'), anything else raw."""
    return render_command(text, lookup) if shell_quote else render(text, lookup)
