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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulens.analyzer.inputs.kinds import PodKey
from gpulens.core.config import prometheus_duration
from gpulens.core.mixin import ENGINE_SERIES

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
