"""What ``GET /metrics`` exposes (SPEC §14), in the Prometheus text format.

One :class:`Metrics` per service, each with a registry of its own (two servers in
one process, as in tests, never share counts). It observes the runs the service
executes (a :class:`~brain.runner.observe.RunObserver`: runs started and ended,
steps' durations, LLM tokens, cache hits and misses and the tokens hits saved); the
service records schedule fires and the runs executing now; the server records webhook deliveries;
queue depth is read from the database when scraped. Counts are this process's:
with several ``brain worker`` processes, scrape each (or sum them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from brain.dsl.model import WAIT_KINDS
from brain.results import FINISHED_RUN
from brain.runner.observe import RunObserver

if TYPE_CHECKING:
    from brain.results import RunResult
    from brain.runner.events import RunEvent, StepEvent

#: Webhook delivery outcomes, as counted.
DELIVERY_OUTCOMES = ("accepted", "duplicate", "refused", "too_large", "throttled")
#: The kinds of LLM tokens counted (``brain_llm_tokens_total``'s ``kind`` label).
TOKEN_KINDS = ("prompt", "completion")


class Metrics(RunObserver):
    """The metric families of one service, fed by observing its runs."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.runs_started = Counter("brain_runs_started", "Runs this process started executing",
                                    ["workflow"], registry=r)
        self.runs_ended = Counter("brain_runs_ended", "Runs this process finished executing",
                                  ["workflow", "status"], registry=r)
        self.step_seconds = Histogram(
            "brain_step_duration_seconds", "How long steps ran, by kind and final status",
            ["kind", "status"], registry=r,
            buckets=(0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 300, 1800))
        self.executing = Gauge("brain_runs_executing", "Runs this process is executing now",
                               registry=r)
        self.queued = Gauge("brain_runs_queued", "Runs waiting in the queue (the database's "
                            "count, read when scraped)", registry=r)
        self.lateness = Histogram(
            "brain_schedule_lateness_seconds", "How late schedule fires were queued",
            ["workflow"], registry=r, buckets=(0.01, 0.1, 0.5, 1, 5, 30, 60, 300, 3600))
        self.deliveries = Counter("brain_webhook_deliveries", "Webhook deliveries by outcome",
                                  ["workflow", "outcome"], registry=r)
        self.waiting = Gauge("brain_runs_waiting", "Runs waiting (SPEC §16), by what their "
                             "steps wait for: sleep, approval or signal (the database's count, "
                             "read when scraped)", ["workflow", "kind"], registry=r)
        self.llm_tokens = Counter("brain_llm_tokens", "Tokens LLM steps spent (SPEC §18), by "
                                  "workflow, model and kind: prompt or completion",
                                  ["workflow", "model", "kind"], registry=r)
        self.cache_hits = Counter("brain_cache_hits", "Steps answered from their cache "
                                  "(SPEC §26), by workflow and step kind",
                                  ["workflow", "kind"], registry=r)
        self.cache_misses = Counter("brain_cache_misses", "Steps with a cache that ran: no "
                                    "unexpired entry (SPEC §26), by workflow and step kind",
                                    ["workflow", "kind"], registry=r)
        self.tokens_saved = Counter("brain_llm_tokens_saved", "Tokens LLM steps answered from "
                                    "their cache did not spend (SPEC §26), by workflow, model "
                                    "and kind: prompt or completion",
                                    ["workflow", "model", "kind"], registry=r)

    def run_started(self, run: RunEvent) -> None:
        """A run's first execution counts as started (a resume or a wake does not)."""
        if run.how == "started":
            self.runs_started.labels(run.workflow).inc()

    def run_ended(self, run: RunEvent, result: RunResult, seconds: float) -> None:
        """A run that finished counts as ended, by status (one that waits does not yet)."""
        if result.status in FINISHED_RUN:
            self.runs_ended.labels(run.workflow, str(result.status)).inc()

    def step_ended(self, event: StepEvent) -> None:
        """A step's duration, by kind and final status, and the tokens an LLM step spent
        (whatever its end: every try's tokens count)."""
        if event.status in ("succeeded", "failed") and event.seconds is not None:
            self.step_seconds.labels(event.kind, event.status).observe(event.seconds)
        if event.usage:
            self.count_tokens(event.workflow, event.model, event.usage)
        if event.cache == "hit":
            self.cache_hits.labels(event.workflow, event.kind).inc()
            self.count_tokens(event.workflow, event.model, event.saved_usage, self.tokens_saved)
        elif event.cache == "miss":
            self.cache_misses.labels(event.workflow, event.kind).inc()

    def count_tokens(self, workflow: str, model: str | None,
                     usage: Mapping[str, int] | None, counter: Counter | None = None) -> None:
        """Count the tokens a step spent (``usage``: ``prompt_tokens``,
        ``completion_tokens``; ``None``: nothing to count) in ``counter`` (by default
        ``brain_llm_tokens_total``). ``model``: ``unknown`` when ``None``."""
        if not usage:
            return
        counter = self.llm_tokens if counter is None else counter
        for kind in TOKEN_KINDS:
            spent = usage.get(f"{kind}_tokens") or 0
            counter.labels(workflow, model or "unknown", kind).inc(max(int(spent), 0))

    async def exposition(self, queued: Callable[[], Awaitable[int]],
                         waiting: Callable[[], Awaitable[list[tuple[str, str, int]]]] | None = None
                         ) -> bytes:
        """The text exposition, with the queue depth and the waiting runs read now."""
        try:
            self.queued.set(await queued())
            if waiting is not None:
                counts = await waiting()
                self.waiting.clear()
                for workflow, kind, n in counts:
                    self.waiting.labels(workflow, WAIT_KINDS.get(kind, kind)).set(n)
        except Exception:  # a busy database: the last known figures stand
            pass
        return bytes(generate_latest(self.registry))

