"""Why each pod's GPU is underused: one verdict per pod, with confidence, evidence and a fix to try.

The class names are public API (gpulens.core.bottlenecks). The order of the checks (SIGNATURES)
follows docs/signals.md: missing data first, then idle, memory fragmentation, poor
placement, interconnect, data starvation, over-provisioned serving, memory bandwidth, healthy;
throttling and wrong GPU type are overlays that become the primary class only when nothing else is
wrong. Without profiling fields (consumer GPUs, stock dcgm-exporter) the analyzer says so with low
confidence and never claims memory_bandwidth.

Every check knows the sample interval of its input: a signature that needs to see a training step's
bursts and gaps is claimed only from samples fine enough to resolve them, and the evidence says so.
This module judges one window; gpulens.analyzer.history slides windows across hours or days.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pandas as pd

from gpulens.analyzer.features import GpuLinks, pod_features
from gpulens.core.activity import BUSY_LEVEL
from gpulens.core.bottlenecks import BOTTLENECKS, BY_NAME, RECOMMENDATIONS
from gpulens.core.catalog import GpuModel, model_info
from gpulens.core.thresholds import Thresholds


@dataclass
class Episode:
    """A run of one class in a pod's history. Times are unix seconds."""

    bottleneck: str
    start: float
    end: float
    confidence: float
    wasted_gpu_seconds: float

    def extend(self, end: float, confidence: float, wasted: float) -> None:
        """Continue to `end` with a stretch judged at `confidence` that wasted `wasted` GPU-seconds; the
        episode's confidence is the time-weighted mean of its stretches."""
        before, added = self.end - self.start, end - self.end
        if before + added > 0:
            self.confidence = (self.confidence * before + confidence * added) / (before + added)
        self.end, self.wasted_gpu_seconds = end, self.wasted_gpu_seconds + wasted

    def rounded(self) -> Episode:
        """As served: confidence to 0.01, waste to 0.1 GPU-second."""
        return replace(self, confidence=round(self.confidence, 2), wasted_gpu_seconds=round(self.wasted_gpu_seconds, 1))


@dataclass
class ClassShare:
    share: float
    wasted_gpu_seconds: float
    wasted_cost: float


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
    #: From the first sample to the end of the last, in seconds.
    window_seconds: float = 0.0
    #: Share of the window (per GPU) that samples cover: gaps in the data count neither as work nor as
    #: waste. 1.0 for data without gaps.
    coverage: float = 1.0
    #: Seconds between one GPU's samples (the median): what the signatures could resolve.
    sample_seconds: float = 0.0
    #: Over the span: the runs of one class, oldest first (one for a single window).
    episodes: list[Episode] = field(default_factory=list)
    #: Over the span, per class: share of the covered time, and the GPU-seconds and money wasted in it.
    by_class: dict[str, ClassShare] = field(default_factory=dict)
    #: The pod's workload (analyzer/owners.py): Deployment, StatefulSet, DaemonSet, Job, CronJob, Pod or
    #: another controller's kind ("" where kube-state-metrics is not read), its name, and its team.
    owner_kind: str = ""
    owner: str = ""
    team: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def workload(self) -> str:
        """The owner as reports name it: namespace/Kind/name, the pod where the owner is unknown, and
        "(unallocated)" for a GPU no pod holds."""
        if not self.pod:
            return "(unallocated)"
        if not self.owner_kind:
            return f"{self.namespace}/{self.pod}"
        return f"{self.namespace}/{self.owner_kind}/{self.owner}"


#: The evidence key of sparse use called idle (_sparse): history.py lets it judge the start of the data.
SPARSE = "busy_fraction"

#: One row of pod_features(): a pod's (or an unheld GPU's) features over the window.
Features = Any
#: A class and its raw confidence, or None when the signature does not hold.
Finding = tuple[str, float] | None


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def classify(
    trace: pd.DataFrame,
    t: Thresholds | None = None,
    prices: dict[str, float] | None = None,
    node_prices: Mapping[str, float] | None = None,
) -> list[Verdict]:
    """Verdicts for every pod (and every GPU no pod holds) in the trace window."""
    t = t or Thresholds()
    return judge(pod_features(trace, t), t, prices, node_prices)


def judge(
    features: pd.DataFrame,
    t: Thresholds,
    prices: dict[str, float] | None,
    node_prices: Mapping[str, float] | None = None,
) -> list[Verdict]:
    """A verdict for every row of pod_features(). A GPU's price per hour is its node's in `node_prices`
    (the cluster's cost tool: OpenCost), else its model's in `prices` (the price file), else the catalogue's."""
    models = {name: model_info(name, prices) for name in features["gpu_model"].unique()} if len(features) else {}
    node_prices = node_prices or {}
    verdicts = []
    for row in features.itertuples():
        model, node_price = models[row.gpu_model], node_prices.get(str(row.node))
        verdicts.append(_verdict(row, t, model if node_price is None else replace(model, price_per_hour=node_price)))
    return verdicts


def _verdict(f: Features, t: Thresholds, info: GpuModel) -> Verdict:
    evidence: dict[str, str] = {}
    activity = None if math.isnan(f.activity) else float(f.activity)
    # Overlays first, so that their evidence leads whatever the primary class is.
    throttled = _throttled(f, t, evidence)
    oversized = _oversized(f, t, info, activity)
    found = next((finding for check in SIGNATURES if (finding := check(f, t, info, evidence))), None)
    name, confidence = found or _without_signature(f, t, activity, throttled, oversized, evidence)
    if name == "healthy" and not f.has_prof and _waiting(f, t, evidence):
        name, confidence = "data_starvation", 0.5
    confidence = round(min(max(confidence, 0.0), 1.0), 2)
    not_judged = _not_judged(f, t)
    if not_judged and name != "insufficient_data":
        evidence["not_judged"] = not_judged
    if not f.has_prof and BY_NAME[name].profiling == "helps":
        evidence["profiling_fields"] = "absent: utilization shows that a kernel ran, not how much of the GPU worked"
        confidence = min(confidence, 0.5)
    secondary = []
    if throttled and name != "throttling":
        secondary.append("throttling")
    if oversized and name not in ("wrong_gpu_type", "idle", "insufficient_data"):
        secondary.append("wrong_gpu_type")
    wasted = 0.0 if activity is None or name == "insufficient_data" else (1.0 - activity) * f.gpu_seconds
    cost = wasted / 3600 * info.price_per_hour
    return Verdict(
        namespace=f.namespace,
        pod=f.pod,
        node=f.node,
        gpus=list(f.gpu_list),
        gpu_model=f.gpu_model,
        bottleneck=name,
        confidence=confidence,
        evidence=evidence,
        recommendation=RECOMMENDATIONS[name],
        wasted_gpu_seconds=round(wasted, 1),
        wasted_cost=round(cost, 4),
        secondary=secondary,
        mean_activity=None if activity is None else round(activity, 4),
        idle_ratio=None if math.isnan(f.idle) else round(float(f.idle), 4),
        window_seconds=float(f.window_seconds),
        coverage=round(float(f.coverage), 4),
        sample_seconds=float(f.sample_seconds),
        episodes=[Episode(name, float(f.ts_min), float(f.ts_min + f.window_seconds), confidence, round(wasted, 1))],
        by_class={name: ClassShare(1.0, round(wasted, 1), round(cost, 4))},
    )


def _waiting(f: Features, t: Thresholds, evidence: dict[str, str]) -> bool:
    """Without profiling fields, utilization says a kernel ran, not that the GPU worked: busy at a small
    share of the board's power is a kernel spinning while it waits (for a peer in a collective, for the
    host), and the GPU waits on its input, not works."""
    if math.isnan(f.busy_power) or f.busy_power >= t.waiting_power_share:
        return False
    evidence["power_while_busy"] = (
        f"{_fmt(f.busy_power)} of the power limit < {t.waiting_power_share} while utilization > "
        f"{t.starvation_high}: busy but waiting (a kernel spinning in a collective, a stalled stream), not working"
    )
    return True


def _not_judged(f: Features, t: Thresholds) -> str:
    """What the input could not show, and why: every verdict says so, so that a fleet read from
    dcgm-exporter or nvidia-smi alone knows what adding gpulens' exporter would add."""
    gaps = []
    if not f.shape and f.resolution_seconds > t.starvation_max_sample_seconds:
        gaps.append(
            f"stalls and bursts shorter than the {f.resolution_seconds:.0f} s between samples (each sample is one "
            "instant; gpulens' exporter counts every driver sample between scrapes)"
        )
    if not f.has_prof:
        needed = ", ".join(b.name for b in BOTTLENECKS if b.profiling == "needed")
        gaps.append(f"{needed} (the input has no profiling fields: SM, DRAM and pipe activity)")
    if f.gpus >= 2 and not (f.numa_nodes or f.pcie_roots or f.nvlink_groups):
        gaps.append(
            "placement across sockets, PCIe roots and NVLink islands (the input has no topology; gpulens' "
            "exporter reports it)"
        )
    return "; ".join(gaps)


# --- overlays: findings that are primary only when nothing else is wrong ---------------------------
def _throttled(f: Features, t: Thresholds, evidence: dict[str, str]) -> bool:
    """Clock-event bits for HW slowdown, thermal or power brake over most of the busy time, long enough."""
    throttled_seconds = (0.0 if math.isnan(f.throttle_time) else f.throttle_time) * f.window_seconds
    if throttled_seconds < min(t.throttle_seconds, 0.5 * f.window_seconds) or f.throttle < t.signature_fraction:
        return False
    evidence["throttled_fraction"] = f"{_fmt(f.throttle)} of busy time with HW slowdown/thermal/power-brake bits"
    if not math.isnan(f.clock):
        evidence["sm_clock_vs_max"] = _fmt(f.clock)
    return True


def _oversized(f: Features, t: Thresholds, info: GpuModel, activity: float | None) -> bool:
    """A sliver of a high-end GPU used, in activity and in memory, by a pod that is not idle."""
    return (
        info.high_end
        and activity is not None
        and activity <= t.oversized_activity
        and not math.isnan(f.mem_used_max)
        and f.mem_used_max <= t.oversized_memory_bytes
        and f.trailing_idle_seconds < min(t.idle_seconds, f.window_seconds)
    )


# --- the signatures, in docs/signals.md's order ----------------------------------------------------
def _insufficient_data(f: Features, t: Thresholds, info: GpuModel, evidence: dict[str, str]) -> Finding:
    per_gpu_samples = f.samples / f.gpus
    if per_gpu_samples >= t.min_samples and f.has_activity:
        return None
    evidence["samples_per_gpu"] = (
        f"{per_gpu_samples:.0f} < {t.min_samples}" if f.has_activity else "no utilization or activity signal at all"
    )
    return "insufficient_data", 1.0


def _idle(f: Features, t: Thresholds, info: GpuModel, evidence: dict[str, str]) -> Finding:
    """No work for the last idle_seconds (or the whole window), after sustained work, or none, or
    quiet far longer than any pause while it worked: the work stopped, rather than paused between
    requests or notebook cells."""
    if _sparse(f, t, evidence):
        return "idle", 0.9
    idle_for = min(t.idle_seconds, f.window_seconds)
    quiet = f.trailing_idle_seconds
    if quiet < idle_for - f.sample_seconds / 2:
        return None
    worked = not math.isnan(f.recent_busy)
    # Pauses are measured only from samples that resolve them: from sparse point samples, the
    # "pauses" between the few busy samples seen are chance, and a replica would be told to go.
    resolved = f.sample_seconds <= t.starvation_max_sample_seconds
    stopped = resolved and quiet >= t.idle_pause_factor * f.longest_pause
    if worked and f.recent_busy < t.idle_sustained_share and not stopped:
        return None
    if not math.isnan(f.tail_cpu_sat) and f.tail_cpu_sat >= t.signature_fraction:
        return None  # the pod's CPU is at its limit meanwhile: working, not idle (input pipeline, CPU eval)
    evidence["idle_for_seconds"] = f"{quiet:.0f} >= {idle_for:.0f} (activity < {t.idle_activity})"
    if worked and f.recent_busy >= t.idle_sustained_share:
        evidence["busy_before_fraction"] = (
            f"{_fmt(f.recent_busy)} of the {t.recent_samples} samples before >= {t.idle_sustained_share}: "
            "sustained work that stopped"
        )
    elif worked:
        evidence["longest_pause_while_working_seconds"] = (
            f"{f.longest_pause:.0f}: quiet {quiet / f.longest_pause:.1f}x longer >= {t.idle_pause_factor:g}x"
        )
    if not math.isnan(f.mem_used_max):
        evidence["memory_held_bytes"] = f"{f.mem_used_max:.0f}"
    return "idle", 0.95 if f.idle >= 0.95 else 0.85


def _sparse(f: Features, t: Thresholds, evidence: dict[str, str]) -> bool:
    """Busy on under sparse_busy_share of a window of an hour or more: idle whatever the pattern of the few
    blips (a notebook's rare cells, a replica that loaded its model and served nothing), unless the pod's
    CPU is at its limit meanwhile (working on the CPU)."""
    busy = 1.0 - f.quiet
    if f.window_seconds < t.sparse_span_seconds or busy >= t.sparse_busy_share:
        return False
    if not math.isnan(f.cpu_sat) and f.cpu_sat >= t.signature_fraction:
        return False
    evidence[SPARSE] = (
        f"{_fmt(busy)} of {f.window_seconds / 3600:.3g} h < {t.sparse_busy_share}: sparse use (rare notebook cells, "
        "a replica with no requests) is idle"
    )
    if not math.isnan(f.mem_used_max):
        evidence["memory_held_bytes"] = f"{f.mem_used_max:.0f}"
    return True


def _memory_fragmentation(f: Features, t: Thresholds, info: GpuModel, evidence: dict[str, str]) -> Finding:
    """Memory near full and growing, with the process dying and restarting or staying full for long."""
    if math.isnan(f.mem_max) or f.mem_max < t.memory_full:
        return None
    if not math.isnan(f.mem_std) and f.mem_std < t.preallocator_flatness:
        return None  # flat and high: a pre-allocating server (vLLM, JAX, TensorRT-LLM)
    grew = f.mem_max - f.mem_min >= t.memory_growth
    restarted = f.drops >= 1 or (not math.isnan(f.restarts_max) and f.restarts_max > f.restarts_min)
    full_for_long = f.full * f.window_seconds >= t.memory_full_seconds
    if not (grew and (restarted or full_for_long)):
        return None
    evidence["memory_peak_fraction"] = f"{_fmt(f.mem_max)} >= {t.memory_full}"
    evidence["memory_range"] = f"{_fmt(f.mem_min)}..{_fmt(f.mem_max)} (grew >= {t.memory_growth})"
    if restarted:
        evidence["restarts_or_oom_drops"] = f"{f.drops:.0f} drops" + (
            "" if math.isnan(f.restarts_max) else f", {f.restarts_max - f.restarts_min:.0f} restarts"
        )
    return "memory_fragmentation", 0.7 + (0.2 if restarted else 0.0) + (0.1 if full_for_long else 0.0)


def _poor_placement(f: Features, t: Thresholds, info: GpuModel, evidence: dict[str, str]) -> Finding:
    """A multi-GPU pod whose GPUs cannot exchange at NVLink speed, or do not: on different CPU sockets or
    PCIe root complexes with no NVLink between them; joined by NVLink that sits idle while they exchange
    over PCIe (NCCL peer-to-peer turned off, a container that does not see its peers); NVLinks down or
    failing on its GPUs; or one GPU far busier than the others."""
    busiest, least = f.gpu_activity_max, f.gpu_activity_min
    if f.gpus < 2 or math.isnan(busiest) or busiest < t.placement_min_activity:
        return None  # an idle or barely used pod has a bigger problem than placement
    # One NVLink island, from the exporter's topology; without it, what the model's SXM boards have.
    nvlinked = f.nvlink_groups == 1 if f.nvlink_groups else info.nvlink_bytes_per_second > 0
    confidence = 0.0
    if not nvlinked and (f.numa_nodes >= 2 or f.pcie_roots >= 2):
        across = "CPU sockets" if f.numa_nodes >= 2 else "PCIe root complexes of one socket"
        where = "; ".join(_where(g) for g in f.gpu_links)
        evidence["split_placement"] = f"{where}: no NVLink between them, so they exchange over PCIe across {across}"
        confidence = 0.9
    if (
        nvlinked
        and info.nvlink_bytes_per_second > 0
        and f.nvlink_use < t.nvlink_idle
        and f.pcie_peer >= t.placement_pcie_peer
    ):
        evidence["nvlink_unused"] = (
            f"{', '.join(g.gpu for g in f.gpu_links) or 'the GPUs'} share NVLink, which carried {_fmt(f.nvlink_use)} "
            f"< {t.nvlink_idle} of its capacity while PCIe carried {_fmt(f.pcie_peer)} >= {t.placement_pcie_peer} "
            "both ways: peer traffic goes over PCIe (NCCL_P2P_DISABLE or NCCL_P2P_LEVEL set, or a container "
            "that sees only its own GPU)"
        )
        confidence = 0.9
    failing = [
        g
        for g in f.gpu_links
        if g.links_down > 0
        or g.crc_per_second >= t.nvlink_crc_errors_per_second
        or _retries(g) * f.window_seconds > t.nvlink_errors
    ]
    if failing:
        evidence["nvlink_faults"] = "; ".join(_link_faults(g, f.window_seconds) for g in failing) + (
            f" (CRC matters at >= {t.nvlink_crc_errors_per_second:g}/s, replay and recovery above "
            f"{t.nvlink_errors:g} per window: DCGM's limits)"
        )
        confidence = max(confidence, 0.85)
    if least / busiest <= t.placement_imbalance:
        evidence["gpu_activity_spread"] = (
            f"least busy {_fmt(least)} / busiest {_fmt(busiest)} <= {t.placement_imbalance}"
        )
        confidence = max(confidence, 0.75)
    elif confidence:
        evidence["gpu_activity_spread"] = f"least busy {_fmt(least)} / busiest {_fmt(busiest)}"
    return ("poor_placement", confidence) if confidence else None


def _where(g: GpuLinks) -> str:
    """'GPU-… (socket 0, PCIe root 1, NVLink island 0)', with what the trace says."""
    parts = [
        f"{name} {value:.0f}"
        for name, value in (("socket", g.socket), ("PCIe root", g.root), ("NVLink island", g.nvlink_group))
        if not math.isnan(value)
    ]
    return g.gpu + (f" ({', '.join(parts)})" if parts else "")


def _retries(g: GpuLinks) -> float:
    """Replay and recovery errors per second on a GPU's NVLinks (0 where the trace does not say)."""
    return sum(r for r in (g.replay_per_second, g.recovery_per_second) if not math.isnan(r))


def _link_faults(g: GpuLinks, window_seconds: float) -> str:
    """'GPU-…: 4 NVLinks down, CRC 150/s, 300 replay errors, 12 recovery errors'."""
    parts = []
    if g.links_down > 0:
        parts.append(f"{g.links_down:.0f} NVLink{'s' if g.links_down > 1 else ''} down")
    if g.crc_per_second > 0:
        parts.append(f"CRC {g.crc_per_second:.3g}/s")
    for kind, rate in (("replay", g.replay_per_second), ("recovery", g.recovery_per_second)):
        if rate > 0:
            parts.append(f"{rate * window_seconds:.0f} {kind} errors")
    return f"{g.gpu}: {', '.join(parts)}"


def _interconnect(f: Features, t: Thresholds, info: GpuModel, evidence: dict[str, str]) -> Finding:
    if math.isnan(f.ic) or f.ic < t.signature_fraction:
        return None
    evidence["link_bound_fraction"] = (
        f"{_fmt(f.ic)} of samples with a link >= {t.link_busy} of capacity and activity < {t.interconnect_sm}"
    )
    evidence["link_utilization"] = _fmt(f.link)
    return "interconnect", 0.55 + 0.4 * f.ic


def _data_starvation(f: Features, t: Thresholds, info: GpuModel, evidence: dict[str, str]) -> Finding:
    """Bursts near full activity and gaps near zero, switching several times a minute at a steady
    period (training steps, not requests), from samples fine enough to show them; from coarser
    samples, only a pod whose CPU sits at its limit while the GPU waits."""
    cpu_saturated = not math.isnan(f.cpu_sat) and f.cpu_sat >= t.signature_fraction
    if f.resolution_seconds > t.starvation_max_sample_seconds:
        if not (cpu_saturated and f.cpu_sat_activity < t.ineffective_sm):
            return None
        evidence["sample_interval_seconds"] = (
            f"{f.resolution_seconds:.0f} > {t.starvation_max_sample_seconds:g}: too coarse to see the bursts and "
            "gaps of training steps; judged on the CPU alone"
        )
        evidence["cpu_at_limit_fraction"] = f"{_fmt(f.cpu_sat)} >= {t.signature_fraction}"
        evidence["activity_while_cpu_at_limit"] = f"{_fmt(f.cpu_sat_activity)} < {t.ineffective_sm}"
        return "data_starvation", 0.6
    switches = f.switches / f.gpus / max(f.window_seconds / 60.0, 1e-9)
    if not (f.high > t.starvation_tail and f.low > t.starvation_tail and switches >= t.starvation_switches_per_minute):
        return None
    measured = f.bursts >= t.min_bursts
    regular = measured and _steady(f, t)
    if measured and not (regular or cpu_saturated):
        return None  # bursts at random, like requests arriving, and the CPU does not say otherwise
    evidence["activity_p95_above"] = f"{t.starvation_high} ({_fmt(f.high)} of samples)"
    evidence["activity_p5_below"] = f"{t.starvation_low} ({_fmt(f.low)} of samples)"
    evidence["busy_idle_switches_per_minute"] = f"{switches:.1f} >= {t.starvation_switches_per_minute}"
    if measured:
        _burst_evidence(f, t, evidence)
    else:
        evidence["bursts"] = f"{f.bursts:.0f} < {t.min_bursts}: too few to tell training steps from requests"
    _resolution_evidence(f, t, evidence)
    if not math.isnan(f.cpu_sat):
        evidence["cpu_at_limit_fraction"] = _fmt(f.cpu_sat)
    return "data_starvation", (0.75 if measured or cpu_saturated else 0.5) + (0.2 if cpu_saturated else 0.0)


def _steady(f: Features, t: Thresholds) -> bool:
    """Bursts at a steady period, like training steps: from the exporter's steady-burst counters where
    the trace has them, else from the spread of the time between burst starts in the rows."""
    if f.shape:
        return bool(f.steady_share >= t.starvation_steady_share)
    return bool(f.burst_spread <= t.starvation_regularity)


def _burst_evidence(f: Features, t: Thresholds, evidence: dict[str, str]) -> None:
    steady = _steady(f, t)
    if f.shape:
        evidence["steady_burst_fraction"] = (
            f"{_fmt(f.steady_share)} of {f.bursts:.0f} bursts started within 1.5x of the previous period"
            + (
                f" (>= {t.starvation_steady_share}: steady, like training steps)"
                if steady
                else f" (< {t.starvation_steady_share}: at random, like requests)"
            )
        )
    else:
        evidence["burst_period_seconds"] = f"{f.burst_period:.3g}, spread {_fmt(f.burst_spread)}" + (
            f" <= {t.starvation_regularity}: steady, like training steps"
            if steady
            else f" > {t.starvation_regularity}: at random, like requests"
        )


def _resolution_evidence(f: Features, t: Thresholds, evidence: dict[str, str]) -> None:
    if f.shape:
        evidence["driver_samples"] = (
            f"{f.shape_samples:.0f}, one every {f.resolution_seconds:.3g} s, counted by the exporter between "
            f"rows {f.sample_seconds:.3g} s apart"
        )
    else:
        evidence["sample_interval_seconds"] = f"{f.sample_seconds:.3g} <= {t.starvation_max_sample_seconds:g}"


def _overprovisioned_serving(f: Features, t: Thresholds, info: GpuModel, evidence: dict[str, str]) -> Finding:
    """A model held in memory, work in bursts with quiet spells between them, low activity overall: a
    serving replica with more GPU than requests. Not idle: it works whenever requests come."""
    if f.activity >= t.ineffective_sm or f.held < t.serving_held_share or f.quiet < t.serving_quiet_share:
        return None
    if not math.isnan(f.cpu_sat) and f.cpu_sat >= t.signature_fraction:
        return None  # a replica waits for requests; a pod at its CPU limit is busy feeding its GPU
    if _oversized(f, t, info, f.activity):
        return None  # a sliver of a high-end GPU: a smaller GPU or a MIG slice is the sharper fix
    _serving_evidence(f, t, evidence)
    seen = f"{f.bursts:.0f} bursts of work between them" if f.bursts else "no burst of work seen"
    evidence["quiet_fraction"] = f"{_fmt(f.quiet)} of samples >= {t.serving_quiet_share} ({seen})"
    measured = f.resolution_seconds <= t.starvation_max_sample_seconds and f.bursts >= t.min_bursts
    at_random = measured and not _steady(f, t)
    if measured:
        _burst_evidence(f, t, evidence)
        if f.shape:
            _resolution_evidence(f, t, evidence)
    elif f.resolution_seconds <= t.starvation_max_sample_seconds:
        evidence["bursts"] = f"{f.bursts:.0f} < {t.min_bursts} above {BUSY_LEVEL:g}: too few to time"
    else:
        evidence["sample_interval_seconds"] = f"{f.resolution_seconds:.3g}: too coarse to time single bursts"
    return "overprovisioned_serving", 0.75 if at_random else 0.6


def _serving_evidence(f: Features, t: Thresholds, evidence: dict[str, str]) -> None:
    evidence["mean_activity"] = f"{_fmt(f.activity)} < {t.ineffective_sm}"
    evidence["model_memory_bytes"] = f"{f.mem_used_max:.0f} held on {f.held:.0%} of samples"


def _memory_bandwidth(f: Features, t: Thresholds, info: GpuModel, evidence: dict[str, str]) -> Finding:
    """DRAM near its peak while the compute pipes idle: only profiling fields can show it."""
    if not f.has_prof or math.isnan(f.mb) or f.mb < t.signature_fraction:
        return None
    evidence["dram_bound_fraction"] = f"{_fmt(f.mb)} of samples with DRAM >= {t.dram_active} and pipes < {t.pipes_idle}"
    evidence["dram_active"] = _fmt(f.dram)
    return "memory_bandwidth", 0.55 + 0.4 * f.mb


#: The first signature that holds is the pod's class.
SIGNATURES: tuple[Callable[[Features, Thresholds, GpuModel, dict[str, str]], Finding], ...] = (
    _insufficient_data,
    _idle,
    _memory_fragmentation,
    _poor_placement,
    _interconnect,
    _data_starvation,
    _overprovisioned_serving,
    _memory_bandwidth,
)


def _without_signature(
    f: Features, t: Thresholds, activity: float | None, throttled: bool, oversized: bool, evidence: dict[str, str]
) -> tuple[str, float]:
    """No signature holds: an overlay becomes the class, else low activity or healthy."""
    if throttled:
        return "throttling", 0.55 + 0.4 * f.throttle
    if oversized and activity is not None:
        evidence["mean_activity"] = f"{_fmt(activity)} <= {t.oversized_activity}"
        evidence["peak_memory_bytes"] = f"{f.mem_used_max:.0f} <= {t.oversized_memory_bytes:.0f} on a {f.gpu_model}"
        return "wrong_gpu_type", 0.8 if f.window_seconds >= 3600 else 0.65
    if activity is not None and activity < t.ineffective_sm:
        coarse = f.resolution_seconds > t.starvation_max_sample_seconds
        cpu_bound = not math.isnan(f.cpu_sat) and f.cpu_sat >= t.signature_fraction
        if coarse and f.held >= t.serving_held_share and not cpu_bound:
            # Samples too coarse to see training steps, and a model held: most GPUs in production serve
            # models, and a replica under steady light load has more GPU than requests.
            _serving_evidence(f, t, evidence)
            evidence["sample_interval_seconds"] = (
                f"{f.resolution_seconds:.3g} > {t.starvation_max_sample_seconds:g}: cannot tell a training job starved "
                "for input from a serving replica with few requests; if this is training, see data_starvation"
            )
            return "overprovisioned_serving", 0.35
        if coarse:
            evidence["sample_interval_seconds"] = (
                f"{f.resolution_seconds:.3g} > {t.starvation_max_sample_seconds:g}: too coarse to see training steps; "
                "the most common cause, not a finding"
            )
        # Low activity without a clearer signature: the input pipeline is the most common cause
        # (Microsoft ICSE'24: 46% of low-utilization issues are data operations).
        evidence["mean_activity"] = f"{_fmt(activity)} < {t.ineffective_sm} with no clearer signature"
        return "data_starvation", 0.3 if coarse else 0.4
    evidence["mean_activity"] = "nan" if activity is None else _fmt(activity)
    return "healthy", 0.9 if f.has_prof and (f.sm_active or 0) >= t.healthy_sm else 0.6
