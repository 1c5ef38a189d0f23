"""The service's Prometheus metrics, on prometheus-client with an app-local registry.

One registry per app (never the library's global one), so two apps in one process (the tests
start many) keep separate counts. Besides compactd's own series: the process collector
(CPU, RSS, open files; Linux), the Python GC and platform collectors, and the HTTP request
latency that http/app.py observes for every request.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

# Compactions and generations take from tens of milliseconds (a swap) to minutes (a long
# summary on a 2-core CPU).
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# Most HTTP requests (counts, appends) answer in milliseconds; compactions wait on the model.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
HTTP_REQUEST_SECONDS = "compactd_http_request_duration_seconds"
CONTENT_TYPE = CONTENT_TYPE_LATEST  # what /metrics answers with

# name: (kind, help, label names)
METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "compactd_model_ready": ("gauge", "1 once the model is loaded", ()),
    "compactd_queue_depth": ("gauge", "jobs waiting per lane", ("lane",)),
    "compactd_jobs_running": ("gauge", "jobs running per lane", ("lane",)),
    "compactd_jobs_total": ("counter", "finished jobs by kind and status", ("kind", "status")),
    "compactd_overload_rejections_total": (
        "counter", "requests answered 429 because a lane's queue was full", ("lane",)),
    "compactd_compactions_total": (
        "counter", "committed compactions: swap (ready rolling summary), instant (deterministic, refined later), "
        "sync (model on the critical path) or refined (an instant one's narrative, in the background)", ("mode",)),
    "compactd_compaction_tokens_before_total": ("counter", "context tokens before committed compactions", ()),
    "compactd_compaction_tokens_after_total": ("counter", "context tokens after committed compactions", ()),
    "compactd_rolling_updates_total": ("counter", "background rolling-summary updates by outcome", ("status",)),
    "compactd_refinements_total": (
        "counter", "background refinements of instant checkpoints by outcome", ("status",)),
    "compactd_prompt_tokens_total": ("counter", "prompt tokens evaluated by the engine (cached ones excluded)", ()),
    "compactd_prompt_seconds_total": ("counter", "seconds the engine spent evaluating prompts", ()),
    "compactd_decode_tokens_total": ("counter", "tokens generated", ()),
    "compactd_decode_seconds_total": ("counter", "seconds the engine spent generating", ()),
    "compactd_prompt_tokens_per_second": ("gauge", "prompt evaluation speed of the last generation", ()),
    "compactd_decode_tokens_per_second": ("gauge", "decode speed of the last generation", ()),
    "compactd_time_to_first_token_seconds": ("histogram", "time to first token per generation, by lane", ("lane",)),
    "compactd_compaction_seconds": ("histogram", "end-to-end compaction job latency, by mode", ("mode",)),
    "compactd_chat_completion_seconds": ("histogram", "end-to-end /v1/chat/completions latency", ()),
    HTTP_REQUEST_SECONDS: (
        "histogram", "HTTP request latency by method, route template and status code", ("method", "route", "status")),
}

_KINDS: dict[str, Any] = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}


class Metrics:
    """compactd's series by name: `inc`, `set` and `observe` take the series' labels as
    keywords; `render` is the Prometheus text exposition of the whole registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._families: dict[str, Any] = {}
        for name, (kind, help_text, labels) in METRICS.items():
            extra: dict[str, Any] = {}
            if kind == "histogram":
                extra["buckets"] = REQUEST_BUCKETS if name == HTTP_REQUEST_SECONDS else LATENCY_BUCKETS
            self._families[name] = _KINDS[kind](name, help_text, labels, registry=self.registry, **extra)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)

    def _series(self, name: str, labels: dict[str, str]) -> Any:
        family = self._families[name]
        return family.labels(**labels) if labels else family

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        self._series(name, labels).inc(value)

    def set(self, name: str, value: float, **labels: str) -> None:
        self._series(name, labels).set(value)

    def observe(self, name: str, value: float, **labels: str) -> None:
        self._series(name, labels).observe(value)

    def value(self, name: str, **labels: str) -> float:
        """A counter's or gauge's current value (0 when the series does not exist yet)."""
        found = self.registry.get_sample_value(name, {k: str(v) for k, v in labels.items()})
        return 0.0 if found is None else found

    def render(self) -> str:
        return generate_latest(self.registry).decode()
