"""How loaded each serving pod was over a span, as its serving engine counted it: the requests it finished,
how many it ran and kept waiting at once, and how full its KV cache was.

Read from the engines' own metrics in the store, scraped as their pods (namespace and pod labels, as the
Prometheus Operator's PodMonitors and kubernetes_sd give them); their names are core/mixin.py's
ENGINE_SERIES (the fleet dashboard reads them too), from each engine's docs:

- vLLM: requests finished `vllm:request_success_total` (counter), running `vllm:num_requests_running`,
  waiting `vllm:num_requests_waiting`, KV cache in use (0-1) `vllm:kv_cache_usage_perc` (before V1:
  `vllm:gpu_cache_usage_perc`);
- TGI: `tgi_request_count`, `tgi_batch_current_size`, `tgi_queue_size`, no KV cache gauge;
- Triton: `nv_inference_request_success`, no running gauge, `nv_inference_pending_request_count`, none;
- SGLang: `sglang:num_requests_total`, `sglang:num_running_reqs`, `sglang:num_queue_reqs`, `sglang:token_usage`.

A pod's load is a few queries per measure over the whole span, each reduced by the store, never its raw
samples: increase() of the requests counter; quantile_over_time() of a subquery at the span's step (a point
sample every step is unbiased for a percentile); and the peak, the larger of that subquery's max_over_time()
and the largest value any one of the pod's series held at any sample (max_over_time() of its raw samples: a
6 s burst between two 15 s steps is a peak too). A gauge's samples count only where finite and not negative
(a KV cache's share also at most 1): the store skips the rest, and a pod whose series held +Inf is said once.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpulens.analyzer.inputs.kinds import PodKey
from gpulens.core.config import prometheus_duration
from gpulens.core.mixin import ENGINE_SERIES, promql_string

if TYPE_CHECKING:
    from gpulens.analyzer.inputs.store import Store


@dataclass(frozen=True)
class EngineLoad:
    """A serving pod's load over a span, as its engine counted it. NaN where the engine has no such series.
    `percentile` is the one the figures at it are taken at (Thresholds.plan_load_percentile)."""

    engine: str
    #: Requests finished over the span.
    requests: float
    percentile: float
    running_at_percentile: float = math.nan
    running_peak: float = math.nan
    waiting_at_percentile: float = math.nan
    waiting_peak: float = math.nan
    kv_cache_at_percentile: float = math.nan
    kv_cache_peak: float = math.nan

    @property
    def served(self) -> bool:
        return self.requests > 0

    @property
    def unqueued(self) -> bool:
        """Whether its queue was empty at the percentile (fewer than one request waiting): the replica had room,
        so its low GPU activity is headroom, not a serving loop bound elsewhere. False where not counted."""
        return self.waiting_at_percentile < 1.0


log = logging.getLogger(__name__)


def _by_pod(store: Store, expr: str, at: float) -> dict[PodKey, float]:
    return {
        (s["metric"].get("namespace", ""), s["metric"].get("pod", "")): float(s["value"][1])
        for s in store.query(expr, at)
        if s["metric"].get("pod")
    }


@dataclass(frozen=True)
class _Gauge:
    """One gauge of an engine as a pod's load reads it: its name, how a pod's series add up (running and
    waiting requests are summed; a KV cache's share is of one cache, so the largest is taken) and the most a
    sample may hold."""

    name: str
    by: str = "sum"
    most: float = math.inf

    def checked(self, matchers: str) -> str:
        """Its samples that are figures: finite, not negative, at most `most` (NaN compares false)."""
        bound = "+Inf" if math.isinf(self.most) else f"{self.most:g}"
        return f"({self.name}{matchers} >= 0 {'<' if math.isinf(self.most) else '<='} {bound})"


def read_engine_loads(
    store: Store, start: float, end: float, step: float, percentile: float, selector: str = ""
) -> dict[PodKey, EngineLoad]:
    """Each serving pod's EngineLoad between `start` and `end` (unix seconds), gauges sampled every `step`
    seconds for their percentile and at every sample for their peak; `selector` (PromQL matchers, as
    `namespace=~"serving-.*"`) narrows the pods read. A pod that runs two engines (a sidecar's) is read as the one
    that finished more requests."""
    span = prometheus_duration(max(end - start, step))
    resolution = prometheus_duration(max(step, 0.001))
    matchers = f"{{{selector}}}" if selector else ""
    out: dict[PodKey, EngineLoad] = {}
    unbounded: dict[str, list[str]] = {}
    for series in ENGINE_SERIES:
        requests = {
            pod: finished
            for pod, finished in _by_pod(
                store, f"sum by (namespace, pod) (increase({series.requests}{matchers}[{span}]))", end
            ).items()
            if math.isfinite(finished) and finished >= 0
        }
        if not requests:
            continue

        def measured(gauges: tuple[_Gauge, ...]) -> tuple[dict[PodKey, float], dict[PodKey, float]]:
            """(at the percentile, peak) by pod of the first of `gauges` a pod has (the newer name first)."""
            at_percentile: dict[PodKey, float] = {}
            peak: dict[PodKey, float] = {}
            for gauge in gauges:
                sampled = f"({gauge.by} by (namespace, pod) ({gauge.checked(matchers)}))[{span}:{resolution}]"
                for pod, value in _by_pod(store, f"quantile_over_time({percentile:g}, {sampled})", end).items():
                    at_percentile.setdefault(pod, value)
                stepped = _by_pod(store, f"max_over_time({sampled})", end)
                raw = f"max by (namespace, pod) (max_over_time({gauge.name}{matchers}[{span}]))"
                for pod, value in _by_pod(store, raw, end).items():
                    if not math.isfinite(value):
                        unbounded.setdefault(gauge.name, []).append("/".join(pod))
                    elif 0 <= value <= gauge.most and value > stepped.get(pod, -math.inf):
                        stepped[pod] = value
                for pod, value in stepped.items():
                    peak.setdefault(pod, value)
            return at_percentile, peak

        running = measured((_Gauge(series.running),) if series.running else ())
        waiting = measured((_Gauge(series.waiting),) if series.waiting else ())
        kv = measured(tuple(_Gauge(name, "max", 1.0) for name in series.kv_cache))
        for pod, finished in requests.items():
            if pod in out and out[pod].requests >= finished:
                continue  # a second engine in the pod that served less (a sidecar counting nothing)
            out[pod] = EngineLoad(
                series.engine,
                finished,
                percentile,
                *(found.get(pod, math.nan) for pair in (running, waiting, kv) for found in pair),
            )
    for name, pods in unbounded.items():
        log.warning(
            "%s held +Inf or NaN in %d pod%s (%s): those samples are left out of their peaks; check what exports it",
            name,
            len(pods),
            "s" if len(pods) != 1 else "",
            ", ".join(sorted(pods)[:5]) + (", ..." if len(pods) > 5 else ""),
        )
    return out


#: The latency percentile a workload's health is read at: the one serving SLOs are most often set on.
LATENCY_QUANTILE = 0.95


@dataclass(frozen=True)
class Spread:
    """One measure of a workload over a window, taken at every step: its median, its value at the window's
    percentile (Health.percentile), and its peak. NaN where its engine does not export it."""

    median: float = math.nan
    at_percentile: float = math.nan
    peak: float = math.nan


@dataclass(frozen=True)
class Health:
    """A serving workload's health over a window, as its engine counted it: what a change must not have hurt
    (analyzer/outputs/outcomes.py, docs/changes.md)."""

    engine: str
    start: float
    end: float
    #: The percentile each Spread's `at_percentile` is taken at (Thresholds.plan_load_percentile).
    percentile: float
    #: Requests its pods finished in the window.
    requests: float
    #: Requests waiting, summed over its pods (the users waiting), at each step.
    waiting: Spread = field(default_factory=Spread)
    #: The fullest of its pods' KV caches (0-1), at each step.
    kv_cache: Spread = field(default_factory=Spread)
    #: Time to the first token and a request's whole time, seconds: the LATENCY_QUANTILE of its requests over
    #: the latency window before each step.
    first_token_seconds: Spread = field(default_factory=Spread)
    request_seconds: Spread = field(default_factory=Spread)


def workload_matchers(namespace: str, pods: list[str]) -> str:
    """PromQL matchers of `pods` of `namespace` (a workload's, before or after a change)."""
    names = "|".join(re.escape(pod) for pod in sorted(set(pods)))
    return f"namespace={promql_string(namespace)}, pod=~{promql_string(names)}"


def read_workload_health(
    store: Store, namespace: str, pods: list[str], start: float, end: float, step: float, percentile: float
) -> Health | None:
    """The health of the workload whose pods are `pods` of `namespace` between `start` and `end` (unix
    seconds), each measure taken every `step` seconds; None where none of its pods' engines counted requests.

    Latency is the LATENCY_QUANTILE of the requests finished in the `window` before each step (histogram_quantile
    of their buckets' rate, summed over the pods), at least 4 steps and 5 minutes: a percentile needs requests
    to be one of."""
    matchers = workload_matchers(namespace, pods)
    span = prometheus_duration(max(end - start, step))
    resolution = prometheus_duration(max(step, 0.001))
    window = prometheus_duration(max(4 * step, 300.0))

    def one(expr: str) -> float:
        found = store.query(expr, end)
        value = float(found[0]["value"][1]) if found else math.nan
        return value if math.isfinite(value) else math.nan

    def spread(sampled: str) -> Spread:
        stepped = f"({sampled})[{span}:{resolution}]"
        return Spread(
            one(f"quantile_over_time(0.5, {stepped})"),
            one(f"quantile_over_time({percentile:g}, {stepped})"),
            one(f"max_over_time({stepped})"),
        )

    def latency(histogram: str) -> Spread:
        if not histogram:
            return Spread()
        buckets = f"sum by (le) (rate({histogram}_bucket{{{matchers}}}[{window}]))"
        return spread(f"histogram_quantile({LATENCY_QUANTILE:g}, {buckets})")

    for series in ENGINE_SERIES:
        requests = one(f"sum(increase({series.requests}{{{matchers}}}[{span}]))")
        if not requests >= 0:  # NaN: this engine serves none of the pods
            continue
        waiting = spread(f"sum({_Gauge(series.waiting).checked('{' + matchers + '}')})") if series.waiting else Spread()
        kv = Spread()
        for name in series.kv_cache:
            kv = spread(f"max({_Gauge(name, 'max', 1.0).checked('{' + matchers + '}')})")
            if not math.isnan(kv.peak):
                break
        return Health(
            series.engine,
            start,
            end,
            percentile,
            requests,
            waiting,
            kv,
            latency(series.first_token_seconds),
            latency(series.request_seconds),
        )
    return None
