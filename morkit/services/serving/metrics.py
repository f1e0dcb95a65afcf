"""The server's Prometheus metrics, in a registry of its own (several apps in one process never clash): requests,
latency, batches, drops, queue, bytes held, score cache, queries ranked, escalated and their cost; on Ray Serve, each
RM's replicas and the calls to them abandoned at their deadline.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Mapping

log = logging.getLogger(__name__)

from morkit.services.serving.batcher import BatchStats

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class _CacheCollector:
    """Reads the score cache's own counters at scrape time."""

    def __init__(self, cache: Any):
        self.cache = cache

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        yield CounterMetricFamily("morkit_score_cache_hits", "score cache lookups that found a score",
                                  value=getattr(self.cache, "hits", 0))
        yield CounterMetricFamily("morkit_score_cache_misses", "score cache lookups that found none (the RM ran)",
                                  value=getattr(self.cache, "misses", 0))


class _ReplicaCollector:
    """Reads each RM's replicas by state at scrape time; a failed read leaves the gauge without samples (logged),
    never the scrape failed."""

    def __init__(self, read: Callable[[], Mapping[str, Mapping[str, int]]]):
        self.read = read

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        gauge = GaugeMetricFamily("morkit_rm_replicas", "replicas of each reward model's deployment by state "
                                  "(RUNNING serve calls; STARTING, STOPPING, ... do not yet or no longer)",
                                  labels=["rm", "state"])
        try:
            replicas = self.read()
        except Exception:  # noqa: BLE001 - the other metrics are still worth a scrape
            log.warning("could not read the RM deployments' replicas", exc_info=True)
            replicas = {}
        for rm, states in sorted(replicas.items()):
            for state, count in sorted(states.items()):
                gauge.add_metric([rm, state], count)
        yield gauge


class ServerMetrics:
    """Counters, histograms and gauges of one server app; `render()` gives the Prometheus text."""

    def __init__(self, cache: Any, queue_depth: Callable[[], int], held_bytes: Callable[[], int] | None = None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("morkit_requests", "HTTP requests by route and status code", ["route", "status"],
                                registry=self.registry)
        self.latency = Histogram("morkit_request_seconds", "request latency, body read to reply", ["route"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch_size = Histogram("morkit_batch_size", "requests per engine call (micro-batch size)",
                                    buckets=BATCH_BUCKETS, registry=self.registry)
        self.batch_seconds = Histogram("morkit_batch_seconds", "seconds per engine call", buckets=LATENCY_BUCKETS,
                                       registry=self.registry)
        self.skipped = Counter("morkit_skipped_requests",
                               "queued requests dropped before scoring (client gone or timed out)",
                               registry=self.registry)
        depth = Gauge("morkit_queue_depth", "requests waiting for the engine", registry=self.registry)
        depth.set_function(queue_depth)
        if held_bytes is not None:
            held = Gauge("morkit_held_bytes", "bytes of request bodies held (read, queued or scored)",
                         registry=self.registry)
            held.set_function(held_bytes)
        self.registry.register(_CacheCollector(cache))
        self.routed = Counter("morkit_routed_queries", "queries ranked and answered (every route)",
                              registry=self.registry)
        self.escalations = Counter("morkit_escalations", "queries a cascade escalated to its expensive route",
                                   registry=self.registry)
        self.spend = Counter("morkit_scoring_cost", "what scoring the queries answered cost, in GFLOP-equivalents "
                             "(the RMs of each query's route x its candidates; counted where costs are known)",
                             unit="gflop", registry=self.registry)
        self.rm_timeouts = Counter("morkit_rm_timeouts", "calls to a reward model's replicas abandoned at their "
                                   "request's deadline (--timeout), by RM: a replica too slow or hung (Ray Serve)",
                                   ["rm"], registry=self.registry)

    def watch_replicas(self, read: Callable[[], Mapping[str, Mapping[str, int]]]) -> None:
        """Show each RM's replicas by state as `morkit_rm_replicas{rm, state}`, `read()` (RM -> state -> count)
        at every scrape (the RMs run elsewhere, e.g. as Ray Serve deployments)."""
        self.registry.register(_ReplicaCollector(read))

    def observe_batch(self, stats: BatchStats) -> None:
        if stats.size:
            self.batch_size.observe(stats.size)
            self.batch_seconds.observe(stats.seconds)
        if stats.skipped:
            self.skipped.inc(stats.skipped)

    def observe_rankings(self, rankings: Iterable[Any]) -> None:
        """Count the rankings of an answered request: each query, each one escalated, and its cost where known."""
        for ranking in rankings:
            self.routed.inc()
            if getattr(ranking, "escalated", None):
                self.escalations.inc()
            cost = getattr(ranking, "cost", None)
            if cost is not None:
                self.spend.inc(cost)

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
