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

A pod's load is one query per measure over the whole span (the store reduces: increase(), and
quantile_over_time() and max_over_time() of subqueries at the span's step), never its raw samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulens.analyzer.inputs.kinds import PodKey
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


def _by_pod(store: Store, expr: str, at: float) -> dict[PodKey, float]:
    return {
        (s["metric"].get("namespace", ""), s["metric"].get("pod", "")): float(s["value"][1])
        for s in store.query(expr, at)
        if s["metric"].get("pod")
    }


def read_engine_loads(
    store: Store, start: float, end: float, step: float, percentile: float, selector: str = ""
) -> dict[PodKey, EngineLoad]:
    """Each serving pod's EngineLoad between `start` and `end` (unix seconds), gauges sampled every `step`
    seconds; `selector` (PromQL matchers, as `namespace=~"serving-.*"`) narrows the pods read."""
    span = f"{max(end - start, step):.0f}s"
    resolution = f"{step:.0f}s"
    matchers = f"{{{selector}}}" if selector else ""
    out: dict[PodKey, EngineLoad] = {}
    for series in ENGINE_SERIES:
        requests = _by_pod(store, f"sum by (namespace, pod) (increase({series.requests}{matchers}[{span}]))", end)
        if not requests:
            continue

        def measured(names: tuple[str, ...]) -> tuple[dict[PodKey, float], dict[PodKey, float]]:
            """(at the percentile, peak) by pod of the first of `names` a pod has (the newer name first)."""
            at_percentile: dict[PodKey, float] = {}
            peak: dict[PodKey, float] = {}
            for name in filter(None, names):
                sampled = f"(sum by (namespace, pod) ({name}{matchers}))[{span}:{resolution}]"
                for pod, value in _by_pod(store, f"quantile_over_time({percentile:g}, {sampled})", end).items():
                    at_percentile.setdefault(pod, value)
                for pod, value in _by_pod(store, f"max_over_time({sampled})", end).items():
                    peak.setdefault(pod, value)
            return at_percentile, peak

        running, waiting, kv = measured((series.running,)), measured((series.waiting,)), measured(series.kv_cache)
        for pod, finished in requests.items():
            out[pod] = EngineLoad(
                series.engine,
                finished,
                percentile,
                *(found.get(pod, math.nan) for pair in (running, waiting, kv) for found in pair),
            )
    return out
