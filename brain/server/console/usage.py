"""What the run page says of a step's spending and headway: the tokens an LLM step spent
(SPEC §18), with the run's totals, and the latest progress an MCP server reported (SPEC
§17), drawn as a bar when its total is known.

``console.js`` words a ``progress`` event of ``GET /api/events`` the same way
(``progressText``), so a bar it moves reads as the server draws it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from brain.results import StepResult


@dataclass(frozen=True)
class Tokens:
    """Tokens spent: ``str()`` is ``1,200 prompt + 7 completion``."""

    prompt: int
    completion: int

    @property
    def total(self) -> int:
        """Prompt and completion tokens together."""
        return self.prompt + self.completion

    @property
    def total_text(self) -> str:
        """``1,207``: the total as the page shows it."""
        return f"{self.total:,}"

    def __str__(self) -> str:
        return f"{self.prompt:,} prompt + {self.completion:,} completion"


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and value > 0 else 0


def tokens(step: StepResult) -> Tokens | None:
    """The tokens ``step`` spent (every try counted), or ``None`` when it has no usage."""
    if not step.usage:
        return None
    return Tokens(_count(step.usage, "prompt_tokens"), _count(step.usage, "completion_tokens"))


def saved(step: StepResult) -> Tokens | None:
    """The tokens a step answered from the cache saved (SPEC §26), or ``None``."""
    if not step.cached or not step.saved_usage:
        return None
    return Tokens(_count(step.saved_usage, "prompt_tokens"),
                  _count(step.saved_usage, "completion_tokens"))


def total_tokens(steps: Iterable[StepResult]) -> Tokens | None:
    """The tokens all of ``steps`` spent, or ``None`` when none has usage."""
    spent = [t for t in map(tokens, steps) if t is not None]
    if not spent:
        return None
    return Tokens(sum(t.prompt for t in spent), sum(t.completion for t in spent))


def number(value: float) -> str:
    """A progress figure: ``3``, ``2.5``, ``0.33`` (at most two decimals).

    >>> number(3.0), number(2.5), number(1 / 3)
    ('3', '2.5', '0.33')
    """
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Progress:
    """A step's latest progress as drawn: the bar's ``value`` and ``max`` (``None``: no
    total, no bar), the percentage done and the words (``3/10: copying``)."""

    value: str | None
    max: str | None
    percent: int | None
    text: str


def _figure(value: object) -> float | None:
    """A number a server sent, or ``None`` (not a number, or not a finite one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def progress(step: StepResult) -> Progress | None:
    """``step``'s latest progress as the page draws it, or ``None`` when none was reported."""
    if not step.progress:
        return None
    done, total = _figure(step.progress.get("progress")), _figure(step.progress.get("total"))
    message = step.progress.get("message")
    text = number(done) if done is not None else ""
    if total is not None:
        text += f"/{number(total)}"
    if isinstance(message, str) and message:
        text = f"{text}: {message}" if text else message
    if done is None or total is None or total <= 0:
        return Progress(None, None, None, text)
    shown = min(max(done, 0.0), total)
    return Progress(number(shown), number(total), int(shown / total * 100), text)
