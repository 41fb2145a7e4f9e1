"""Trigger descriptions: ``cron``, ``every``, ``webhook`` and ``watch`` (SPEC §5).

These only describe; the server (``brain serve``) acts on them. They are
checked when the workflow is decorated, so a bad cron expression is a
definition error naming the workflow.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Trigger(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def problem(self) -> str | None:
        """What is wrong with this trigger, or ``None``."""
        return None


class CronTrigger(_Trigger):
    """Fires on a 5-field cron expression in an IANA time zone."""

    type: Literal["cron"] = "cron"
    expr: str
    timezone: str = "UTC"
    catchup: str = "latest"
    overlap: str = "skip"

    def problem(self) -> str | None:
        """Check the expression and zone with APScheduler, which computes fire times later."""
        if self.catchup not in ("none", "latest", "all"):
            return f"cron catchup must be 'none', 'latest' or 'all', not {self.catchup!r}"
        if self.overlap not in ("skip", "queue"):
            return f"cron overlap must be 'skip' or 'queue', not {self.overlap!r}"
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            return f"unknown time zone {self.timezone!r} (use an IANA name such as 'Europe/Bucharest')"
        if len(self.expr.split()) != 5:
            return f"bad cron expression {self.expr!r}: it needs 5 fields (minute hour day month weekday)"
        from brain.triggers.schedule import parse_cron

        try:
            parse_cron(self.expr)
        except ValueError as exc:
            return f"bad cron expression {self.expr!r}: {exc}"
        return None


class EveryTrigger(_Trigger):
    """Fires every ``seconds`` seconds, at multiples of it since the Unix epoch."""

    type: Literal["every"] = "every"
    seconds: float
    overlap: str = "skip"

    def problem(self) -> str | None:
        """Check the interval and overlap policy."""
        if not self.seconds > 0:
            return f"every(seconds=...) must be positive, not {self.seconds}"
        if self.overlap not in ("skip", "queue"):
            return f"every overlap must be 'skip' or 'queue', not {self.overlap!r}"
        return None


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOOK_PATH = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")


class WebhookTrigger(_Trigger):
    """Accepts HMAC-signed ``POST /hooks/{workflow}`` (or ``/hooks/{path}``)."""

    type: Literal["webhook"] = "webhook"
    secret_env: str
    path: str | None = None
    wait_seconds: float = 30

    def problem(self) -> str | None:
        """Check the secret variable name and the path."""
        if not _ENV_NAME.match(self.secret_env):
            return f"webhook secret_env must name an environment variable, not {self.secret_env!r}"
        if self.path is not None and not _HOOK_PATH.match(self.path.strip("/")):
            return f"bad webhook path {self.path!r}"
        return None


class WatchTrigger(_Trigger):
    """Fires when files in ``path`` change (watchdog), debounced per file."""

    type: Literal["watch"] = "watch"
    path: str
    patterns: tuple[str, ...] = ("*",)
    events: tuple[str, ...] = ("created", "modified")
    recursive: bool = False
    debounce_seconds: float = 0.5

    def problem(self) -> str | None:
        """Check the event names and the debounce."""
        bad = set(self.events) - {"created", "modified", "deleted", "moved"}
        if bad:
            return f"unknown watch events {sorted(bad)}: use created, modified, deleted, moved"
        if self.debounce_seconds < 0:
            return "watch debounce_seconds must not be negative"
        return None


TriggerSpec = Annotated[CronTrigger | EveryTrigger | WebhookTrigger | WatchTrigger,
                        Field(discriminator="type")]


def cron(expr: str, timezone: str = "UTC", catchup: str = "latest", overlap: str = "skip") -> CronTrigger:
    """Run on a cron schedule, e.g. ``cron("0 9 * * *", timezone="Europe/Bucharest")``."""
    return CronTrigger(expr=expr, timezone=timezone, catchup=catchup, overlap=overlap)


def every(seconds: float, overlap: str = "skip") -> EveryTrigger:
    """Run every ``seconds`` seconds, e.g. ``every(seconds=300)``."""
    return EveryTrigger(seconds=seconds, overlap=overlap)


def webhook(secret_env: str, path: str | None = None, wait_seconds: float = 30) -> WebhookTrigger:
    """Run on a signed webhook; the HMAC secret is read from ``secret_env``."""
    return WebhookTrigger(secret_env=secret_env, path=path, wait_seconds=wait_seconds)


def watch(path: str, patterns: list[str] | tuple[str, ...] = ("*",),
          events: list[str] | tuple[str, ...] = ("created", "modified"),
          recursive: bool = False, debounce_seconds: float = 0.5) -> WatchTrigger:
    """Run when files matching ``patterns`` under ``path`` are created or modified."""
    return WatchTrigger(path=path, patterns=tuple(patterns), events=tuple(events),
                        recursive=recursive, debounce_seconds=debounce_seconds)
