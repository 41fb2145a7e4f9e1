"""Trigger descriptions: ``cron``, ``every``, ``webhook`` and ``watch`` (SPEC §5).

These only describe; the server (``brain serve``) acts on them. They are
checked when the workflow is decorated, so a bad cron expression is a
definition error naming the workflow.

Every trigger takes ``name=``: its identity for its fire history (see
:func:`brain.triggers.schedule.trigger_key`). Without one, a trigger is known
by its content, never by its position in the list.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_TRIGGER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_MAX_READABLE_KEY = 64  # keys are stored in 100-character columns


class _Trigger(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str | None = None

    def problem(self) -> str | None:
        """What is wrong with this trigger, or ``None``."""
        if self.name is not None and not _TRIGGER_NAME.match(self.name):
            return (f"bad trigger name {self.name!r}: use 1 to 64 letters, digits, "
                    f"'_', '-' or '.'")
        return self._content_problem()

    def _content_problem(self) -> str | None:
        return None

    def key(self) -> str:
        """Its identity for its fire history: ``name:<name>``, else its content (SPEC §5).

        Never its position in the list. See :func:`brain.triggers.schedule.trigger_key`.
        """
        if self.name is not None:
            return f"name:{self.name}"
        key = self._content_key()
        if len(key) > _MAX_READABLE_KEY or not key.isprintable():
            kind, _, text = key.partition(":")
            digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
            key = f"{kind}:#{digest}"
        return key

    def _content_key(self) -> str:
        raise NotImplementedError


def _params_key(params: dict[str, Any] | None) -> str:
    """A schedule's parameters as part of its identity (nothing when it has none, so
    triggers written before parameters keep their keys)."""
    if not params:
        return ""
    return " " + json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class CronTrigger(_Trigger):
    """Fires on a 5-field cron expression in an IANA time zone."""

    type: Literal["cron"] = "cron"
    expr: str
    timezone: str = "UTC"
    catchup: str = "latest"
    overlap: str = "skip"
    #: The parameters its runs get (SPEC §21), validated when the workflow is decorated.
    #: Left out of dumps: the edges that show triggers show it by name, when they do.
    params: dict[str, Any] | None = Field(default=None, exclude=True)

    def _content_problem(self) -> str | None:
        # The expression and zone are checked with APScheduler, which computes fire times later.
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
        from brain.crontab import parse_cron

        try:
            parse_cron(self.expr)
        except ValueError as exc:
            return f"bad cron expression {self.expr!r}: {exc}"
        return None

    def _content_key(self) -> str:
        return f"cron:{' '.join(self.expr.split())}@{self.timezone}" + _params_key(self.params)


class EveryTrigger(_Trigger):
    """Fires every ``seconds`` seconds, at multiples of it since the Unix epoch."""

    type: Literal["every"] = "every"
    seconds: float
    overlap: str = "skip"
    #: The parameters its runs get (SPEC §21), validated when the workflow is decorated.
    #: Left out of dumps: the edges that show triggers show it by name, when they do.
    params: dict[str, Any] | None = Field(default=None, exclude=True)

    def _content_problem(self) -> str | None:
        if not self.seconds > 0:
            return f"every(seconds=...) must be positive, not {self.seconds}"
        if self.overlap not in ("skip", "queue"):
            return f"every overlap must be 'skip' or 'queue', not {self.overlap!r}"
        return None

    def _content_key(self) -> str:
        seconds = float(self.seconds)  # one spelling per value: 300 and 300.0 are "300"
        return f"every:{int(seconds) if seconds.is_integer() else repr(seconds)}" + \
            _params_key(self.params)


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOOK_PATH = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")


class WebhookTrigger(_Trigger):
    """Accepts HMAC-signed ``POST /hooks/{workflow}`` (or ``/hooks/{path}``)."""

    type: Literal["webhook"] = "webhook"
    secret_env: str
    path: str | None = None
    wait_seconds: float = 30
    require_timestamp: bool = False

    def _content_problem(self) -> str | None:
        if not _ENV_NAME.match(self.secret_env):
            return f"webhook secret_env must name an environment variable, not {self.secret_env!r}"
        if self.path is not None and not _HOOK_PATH.match(self.path.strip("/")):
            return f"bad webhook path {self.path!r}"
        return None

    def _content_key(self) -> str:
        return f"webhook:{self.path.strip('/')}" if self.path else "webhook"


class WatchTrigger(_Trigger):
    """Fires when files in ``path`` change (watchdog), debounced per file."""

    type: Literal["watch"] = "watch"
    path: str
    patterns: tuple[str, ...] = ("*",)
    events: tuple[str, ...] = ("created", "modified")
    recursive: bool = False
    debounce_seconds: float = 0.5

    def _content_problem(self) -> str | None:
        bad = set(self.events) - {"created", "modified", "deleted", "moved"}
        if bad:
            return f"unknown watch events {sorted(bad)}: use created, modified, deleted, moved"
        if self.debounce_seconds < 0:
            return "watch debounce_seconds must not be negative"
        return None

    def _content_key(self) -> str:
        words = [self.path, ",".join(sorted(set(self.patterns))), ",".join(sorted(set(self.events)))]
        return "watch:" + " ".join(words + (["recursive"] if self.recursive else []))


#: For type checkers: the values ``cron(catchup=)`` and ``overlap=`` accept (checked at
#: definition time too, with a message naming the workflow).
Catchup = Literal["none", "latest", "all"]
Overlap = Literal["skip", "queue"]
WatchEvent = Literal["created", "modified", "deleted", "moved"]

TriggerSpec = Annotated[CronTrigger | EveryTrigger | WebhookTrigger | WatchTrigger,
                        Field(discriminator="type")]


def cron(expr: str, timezone: str = "UTC", catchup: Catchup = "latest", overlap: Overlap = "skip",
         name: str | None = None, params: dict[str, Any] | None = None) -> CronTrigger:
    """Run on a cron schedule, e.g. ``cron("0 9 * * *", timezone="Europe/Bucharest")``.

    ``name="nightly"`` keeps the fire history (catch-up) when the expression changes.
    ``params={"service": "api"}``: the workflow's parameters for its runs (checked when
    the workflow is decorated; defaults fill the rest).
    """
    return CronTrigger(expr=expr, timezone=timezone, catchup=catchup, overlap=overlap, name=name,
                       params=_params_arg(params))


def every(seconds: float, overlap: Overlap = "skip", name: str | None = None,
          params: dict[str, Any] | None = None) -> EveryTrigger:
    """Run every ``seconds`` seconds, e.g. ``every(seconds=300)``; ``name=`` and ``params=``
    as for :func:`cron`."""
    return EveryTrigger(seconds=seconds, overlap=overlap, name=name, params=_params_arg(params))


def _params_arg(params: Any) -> dict[str, Any] | None:
    """``params=`` of a schedule: a dict of JSON values (a ``TypeError`` otherwise)."""
    if params is None:
        return None
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise TypeError(f"params= takes a dict of parameter values, not {params!r}")
    try:
        json.dumps(params)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"params= holds values that are not JSON: {exc}") from None
    return dict(params)


def webhook(secret_env: str, path: str | None = None, wait_seconds: float = 30,
            require_timestamp: bool = False, name: str | None = None) -> WebhookTrigger:
    """Run on a signed webhook; the HMAC secret is read from ``secret_env``.

    ``require_timestamp=True`` refuses deliveries without ``X-Brain-Timestamp``.
    """
    return WebhookTrigger(secret_env=secret_env, path=path, wait_seconds=wait_seconds,
                          require_timestamp=require_timestamp, name=name)


def watch(path: str, patterns: list[str] | tuple[str, ...] = ("*",),
          events: list[WatchEvent] | tuple[WatchEvent, ...] = ("created", "modified"),
          recursive: bool = False, debounce_seconds: float = 0.5,
          name: str | None = None) -> WatchTrigger:
    """Run when files matching ``patterns`` under ``path`` are created or modified."""
    return WatchTrigger(path=path, patterns=tuple(patterns), events=tuple(events),
                        recursive=recursive, debounce_seconds=debounce_seconds, name=name)
