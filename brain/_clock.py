"""The one clock every layer reads: the current time in UTC; durations as people write them."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime


def utcnow() -> datetime:
    """The current time in UTC (timezone-aware)."""
    return datetime.now(UTC)


#: The longest duration taken (100 years): any time it gives can still be written down.
MAX_DURATION_SECONDS = 100 * 365.25 * 86400
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: object) -> float:
    """Seconds from a number, or from text such as ``"90s"``, ``"10m"``, ``"2h"``, ``"1d"``,
    ``"1h30m"`` (units ``s m h d w``; a bare number is seconds).

    Raises ``ValueError`` saying what is wrong with ``value``.
    """
    if isinstance(value, bool):
        raise ValueError(f"a duration is seconds or text like '10m', not {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.replace(" ", "").lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_PART.findall(text)
            if not text or "".join(n + u for n, u in parts) != text:
                raise ValueError(f"bad duration {value!r}: use seconds or text like '90s', "
                                 f"'10m', '2h', '1d', '1h30m'") from None
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    else:
        raise ValueError(f"a duration is seconds or text like '10m', not {type(value).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a duration must be a finite number of seconds >= 0, not {value!r}")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"duration {value!r} is longer than 100 years")
    return seconds


def duration_text(seconds: float) -> str:
    """``4h``, ``1h30m``, ``90s`` -> ``1m30s``, ``0.5s``: a duration as people write it."""
    if seconds < 60 and seconds != int(seconds):  # never exponent form: it must parse back
        return (f"{seconds:.6f}".rstrip("0").rstrip(".") or "0") + "s"
    left = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts) or "0s"
