"""Prometheus metrics for one server: the engine's gauges, time to first token, tokens, requests.

>>> from course_lib.serving.async_engine import EngineSnapshot
>>> metrics = ServerMetrics(lambda: EngineSnapshot(num_running=2, num_used_blocks=5, num_free_blocks=1019))
>>> metrics.requests.labels("stop").inc()
>>> text = metrics.render().decode()
>>> [line for line in text.splitlines() if line.startswith(("course_kv_blocks_used ", "course_requests_total{"))]
... # doctest: +NORMALIZE_WHITESPACE
['course_kv_blocks_used 5.0', 'course_requests_total{finish_reason="stop"} 1.0',
 'course_requests_total{finish_reason="length"} 0.0', 'course_requests_total{finish_reason="tool_calls"} 0.0',
 'course_requests_total{finish_reason="abort"} 0.0']

Every ``ServerMetrics`` has its own ``CollectorRegistry`` (never prometheus_client's global
one), so a process can hold several servers (the tests start more than one) without their
counts mixing or their names colliding. The engine's gauges are read from its latest
``EngineSnapshot`` when Prometheus scrapes, not pushed on every step: the engine thread only
swaps in a snapshot, and a scrape costs nothing between scrapes.
"""
from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from course_lib.serving.async_engine import EngineSnapshot

__all__ = ["CONTENT_TYPE_LATEST", "FINISH_REASONS", "ServerMetrics"]

# Every reason a choice can end with, so each series exists (at 0) before its first request.
FINISH_REASONS = ("stop", "length", "tool_calls", "abort")
# Seconds. tinychat answers in milliseconds on CPU; a loaded server queues for seconds.
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _EngineGauges:
    """A custom collector: the engine's counters as gauges, read from its snapshot at scrape time."""

    def __init__(self, snapshot: Callable[[], EngineSnapshot]):
        self.snapshot = snapshot

    def collect(self):
        s = self.snapshot()
        for name, documentation, value in (
            ("course_requests_running", "Requests the engine is decoding or prefilling now.", s.num_running),
            ("course_requests_waiting", "Requests admitted and waiting for a running slot.", s.num_waiting),
            ("course_kv_blocks_used", "KV-cache blocks held by live requests.", s.num_used_blocks),
            ("course_kv_blocks_free", "KV-cache blocks free (never used, or cached and evictable).",
             s.num_free_blocks),
            ("course_prefix_cache_hit_rate", "Share of prompt tokens found in the prefix cache, since start.",
             s.prefix_cache_hit_rate),
        ):
            yield GaugeMetricFamily(name, documentation, value=value)


class ServerMetrics:
    def __init__(self, snapshot: Callable[[], EngineSnapshot]):
        self.registry = CollectorRegistry()
        self.registry.register(_EngineGauges(snapshot))
        self.ttft = Histogram("course_time_to_first_token_seconds",
                              "From the request's arrival to its first generated token.",
                              buckets=TTFT_BUCKETS, registry=self.registry)
        self.prompt_tokens = Counter("course_prompt_tokens", "Prompt tokens of admitted requests.",
                                     registry=self.registry)
        self.generated_tokens = Counter("course_generation_tokens", "Tokens generated, end tokens included.",
                                        registry=self.registry)
        self.requests = Counter("course_requests", "Finished choices by finish reason (a request with n "
                                "choices counts n).", ["finish_reason"], registry=self.registry)
        for reason in FINISH_REASONS:
            self.requests.labels(reason)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric (serve with ``CONTENT_TYPE_LATEST``)."""
        return generate_latest(self.registry)
