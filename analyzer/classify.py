"""Why each pod's GPU is underused: one verdict per pod, with confidence, evidence and a fix to try.

The class names are public API (metric label values, JSON): see CLASSES. The order of the checks
follows ../shared/guide/SIGNALS.md: missing data first, then idle, memory fragmentation, poor
placement, interconnect, data starvation, memory bandwidth, healthy; throttling and wrong GPU type are
overlays that become the primary class only when nothing else is wrong. Without profiling fields
(consumer GPUs, stock dcgm-exporter) the analyzer says so with low confidence and never claims
memory_bandwidth.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import pandas as pd

from gpulens.core.bottlenecks import RECOMMENDATIONS
from gpulens.core.catalog import model_info
from gpulens.analyzer.features import pod_features
from gpulens.core.thresholds import Thresholds

@dataclass
class Verdict:
    namespace: str
    pod: str
    node: str
    gpus: list[str]
    gpu_model: str
    bottleneck: str
    confidence: float
    evidence: dict[str, str]
    recommendation: str
    wasted_gpu_seconds: float
    wasted_cost: float
    secondary: list[str] = field(default_factory=list)
    mean_activity: float | None = None
    idle_ratio: float | None = None
    window_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def classify(trace: pd.DataFrame, t: Thresholds | None = None, prices: dict[str, float] | None = None) -> list[Verdict]:
    """Verdicts for every pod (and every GPU no pod holds) in the trace window."""
    t = t or Thresholds()
    features = pod_features(trace, t)
    return [_verdict(row, t, prices) for row in features.itertuples()]


def _verdict(f, t: Thresholds, prices) -> Verdict:
    evidence: dict[str, str] = {}
    secondary: list[str] = []
    per_gpu_samples = f.samples / f.gpus
    activity = None if math.isnan(f.activity) else float(f.activity)

    def cls(name: str, confidence: float) -> tuple[str, float]:
        return name, round(min(max(confidence, 0.0), 1.0), 2)

    # Overlays first, so every path can report them.
    throttled_seconds = (0.0 if math.isnan(f.throttle_time) else f.throttle_time) * f.window_seconds
    throttled = throttled_seconds >= min(t.throttle_seconds, 0.5 * f.window_seconds) and f.throttle >= t.signature_fraction
    info = model_info(f.gpu_model, prices)
    oversized = (info.high_end and activity is not None and activity <= t.oversized_activity
                 and not math.isnan(f.mem_used_max) and f.mem_used_max <= t.oversized_memory_bytes
                 and f.trailing_idle_seconds < min(t.idle_seconds, f.window_seconds))
    if throttled:
        evidence["throttled_fraction"] = f"{_fmt(f.throttle)} of busy time with HW slowdown/thermal/power-brake bits"
        if not math.isnan(f.clock):
            evidence["sm_clock_vs_max"] = _fmt(f.clock)

    if per_gpu_samples < t.min_samples or not f.has_activity:
        name, conf = cls("insufficient_data", 1.0)
        evidence["samples_per_gpu"] = f"{per_gpu_samples:.0f} < {t.min_samples}" if f.has_activity else \
            "no utilization or activity signal at all"
    elif f.trailing_idle_seconds >= min(t.idle_seconds, f.window_seconds) - f.sample_seconds / 2:
        name, conf = cls("idle", 0.95 if f.idle >= 0.95 else 0.85)
        evidence["idle_for_seconds"] = f"{f.trailing_idle_seconds:.0f} >= {min(t.idle_seconds, f.window_seconds):.0f} " \
                                       f"(activity < {t.idle_activity})"
        if not math.isnan(f.mem_used_max):
            evidence["memory_held_bytes"] = f"{f.mem_used_max:.0f}"
    elif _fragmentation(f, t, evidence):
        restarted = f.drops >= 1 or (not math.isnan(f.restarts_max) and f.restarts_max > f.restarts_min)
        name, conf = cls("memory_fragmentation", 0.7 + (0.2 if restarted else 0.0) + (0.1 if f.full * f.window_seconds >= t.memory_full_seconds else 0.0))
    elif f.gpus >= 2 and _poorly_placed(f, t, info, evidence):
        name, conf = cls("poor_placement", 0.75 + (0.15 if f.numa_nodes >= 2 else 0.0))
    elif not math.isnan(f.ic) and f.ic >= t.signature_fraction:
        name, conf = cls("interconnect", 0.55 + 0.4 * f.ic)
        evidence["link_bound_fraction"] = f"{_fmt(f.ic)} of samples with a link >= {t.link_busy} of capacity " \
                                          f"and activity < {t.interconnect_sm}"
        evidence["link_utilization"] = _fmt(f.link)
    elif _starving(f, t, evidence):
        cpu = not math.isnan(f.cpu_sat) and f.cpu_sat >= t.signature_fraction
        name, conf = cls("data_starvation", 0.75 + (0.2 if cpu else 0.0))
    elif f.has_prof and not math.isnan(f.mb) and f.mb >= t.signature_fraction:
        name, conf = cls("memory_bandwidth", 0.55 + 0.4 * f.mb)
        evidence["dram_bound_fraction"] = f"{_fmt(f.mb)} of samples with DRAM >= {t.dram_active} and pipes < {t.pipes_idle}"
        evidence["dram_active"] = _fmt(f.dram)
    elif throttled:
        name, conf = cls("throttling", 0.55 + 0.4 * f.throttle)
        throttled = False
    elif oversized:
        name, conf = cls("wrong_gpu_type", 0.8 if f.window_seconds >= 3600 else 0.65)
        evidence["mean_activity"] = f"{_fmt(activity)} <= {t.oversized_activity}"
        evidence["peak_memory_bytes"] = f"{f.mem_used_max:.0f} <= {t.oversized_memory_bytes:.0f} on a {f.gpu_model}"
        oversized = False
    elif activity is not None and activity < t.ineffective_sm:
        # Low activity without a clearer signature: the input pipeline is the most common cause
        # (Microsoft ICSE'24: 46% of low-utilization issues are data operations).
        name, conf = cls("data_starvation", 0.4)
        evidence["mean_activity"] = f"{_fmt(activity)} < {t.ineffective_sm} with no clearer signature"
    else:
        name, conf = cls("healthy", 0.9 if f.has_prof and (f.sm_active or 0) >= t.healthy_sm else 0.6)
        evidence["mean_activity"] = _fmt(activity)

    if not f.has_prof and name not in ("insufficient_data", "idle"):
        evidence["profiling_fields"] = "absent: utilization shows that a kernel ran, not how much of the GPU worked"
        conf = min(conf, 0.5)
    if throttled and name != "throttling":
        secondary.append("throttling")
    if oversized and name not in ("wrong_gpu_type", "idle", "insufficient_data"):
        secondary.append("wrong_gpu_type")

    wasted = 0.0 if activity is None or name == "insufficient_data" else (1.0 - activity) * f.gpu_seconds
    return Verdict(
        namespace=f.namespace, pod=f.pod, node=f.node, gpus=list(f.gpu_list), gpu_model=f.gpu_model,
        bottleneck=name, confidence=conf, evidence=evidence, recommendation=RECOMMENDATIONS[name],
        wasted_gpu_seconds=round(wasted, 1), wasted_cost=round(wasted / 3600 * info.price_per_hour, 4),
        secondary=secondary, mean_activity=None if activity is None else round(activity, 4),
        idle_ratio=None if math.isnan(f.idle) else round(float(f.idle), 4), window_seconds=float(f.window_seconds))


def _fragmentation(f, t: Thresholds, evidence: dict) -> bool:
    if math.isnan(f.mem_max) or f.mem_max < t.memory_full:
        return False
    if not math.isnan(f.mem_std) and f.mem_std < t.preallocator_flatness:
        return False  # flat and high: a pre-allocating server (vLLM, JAX, TensorRT-LLM)
    grew = f.mem_max - f.mem_min >= t.memory_growth
    restarted = f.drops >= 1 or (not math.isnan(f.restarts_max) and f.restarts_max > f.restarts_min)
    if not (grew and (restarted or f.full * f.window_seconds >= t.memory_full_seconds)):
        return False
    evidence["memory_peak_fraction"] = f"{_fmt(f.mem_max)} >= {t.memory_full}"
    evidence["memory_range"] = f"{_fmt(f.mem_min)}..{_fmt(f.mem_max)} (grew >= {t.memory_growth})"
    if restarted:
        evidence["restarts_or_oom_drops"] = f"{f.drops:.0f} drops" + (
            "" if math.isnan(f.restarts_max) else f", {f.restarts_max - f.restarts_min:.0f} restarts")
    return True


def _poorly_placed(f, t: Thresholds, info, evidence: dict) -> bool:
    """GPUs across CPU sockets with no NVLink between them, or one GPU far busier than the others."""
    busiest, least = f.gpu_activity_max, f.gpu_activity_min
    if math.isnan(busiest) or busiest < 0.3:
        return False  # an idle or barely used pod has a bigger problem than placement
    across = f.numa_nodes >= 2 and info.nvlink_bytes_per_second == 0
    unbalanced = least / busiest <= t.placement_imbalance
    if not (across or unbalanced):
        return False
    evidence["gpu_activity_spread"] = f"least busy {_fmt(least)} / busiest {_fmt(busiest)}" + (
        f" <= {t.placement_imbalance}" if unbalanced else "")
    if across:
        evidence["cpu_sockets"] = f"{f.numa_nodes:.0f}, and {f.gpu_model} has no NVLink: the GPUs talk over PCIe across sockets"
    return True


def _starving(f, t: Thresholds, evidence: dict) -> bool:
    minutes = max(f.window_seconds / 60.0, 1e-9)
    switches = f.switches / f.gpus / minutes
    if not (f.high > t.starvation_tail and f.low > t.starvation_tail and switches >= t.starvation_switches_per_minute):
        return False
    evidence["activity_p95_above"] = f"{t.starvation_high} ({_fmt(f.high)} of samples)"
    evidence["activity_p5_below"] = f"{t.starvation_low} ({_fmt(f.low)} of samples)"
    evidence["busy_idle_switches_per_minute"] = f"{switches:.1f} >= {t.starvation_switches_per_minute}"
    if not math.isnan(f.cpu_sat):
        evidence["cpu_at_limit_fraction"] = _fmt(f.cpu_sat)
    return True
