"""What ``GET /metrics`` exposes (SPEC §14), in the Prometheus text format.

One :class:`Metrics` per service, each with a registry of its own (two servers in
one process, as in tests, never share counts). The service records runs, steps
and schedule fires as it executes them; the server records webhook deliveries;
queue depth is read from the database when scraped. Counts are this process's:
with several ``brain worker`` processes, scrape each (or sum them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: Webhook delivery outcomes, as counted.
DELIVERY_OUTCOMES = ("accepted", "duplicate", "refused", "too_large", "throttled")


class Metrics:
    """The metric families of one service."""

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

    async def exposition(self, queued: Callable[[], Awaitable[int]]) -> bytes:
        """The text exposition, with the queue depth read now."""
        try:
            self.queued.set(await queued())
        except Exception:  # a busy database: the last known depth stands
            pass
        return bytes(generate_latest(self.registry))
