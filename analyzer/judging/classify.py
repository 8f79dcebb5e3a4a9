"""Why each pod's GPU is underused: one verdict per pod, with confidence, evidence and a fix to try.

The class names are public API (gpulens.core.bottlenecks). Each signature reads a unit's features
(PodFeatures) and returns its Finding, or None. Two gates decide alone where they hold (GATES): missing data (a
job's start-up is left out before), then idle. Every cause is then tried (CAUSES: memory fragmentation, poor
placement, interconnect, pipeline stages, host stalls, data starvation, over-provisioned serving, memory
bandwidth), and where several hold, the one whose evidence settles the others is the class (weighed(),
SETTLES), never the one tried first; healthy where none holds. Throttling and wrong GPU type are overlays
that become the primary class only when nothing else is wrong. Without profiling fields (consumer GPUs,
stock dcgm-exporter) the analyzer says so with low confidence and never claims memory_bandwidth.

Every check knows the sample interval of its input: a signature that needs to see a training step's
bursts and gaps is claimed only from samples fine enough to resolve them, and the evidence says so.
This module judges one window; gpulens.analyzer.judging.history slides windows across hours or days.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

import numpy as np
import pandas as pd

from gpulens.analyzer.inputs.engines import EngineLoad
from gpulens.analyzer.inputs.kinds import Kind, WorkloadKind
from gpulens.analyzer.judging.evidence import Evidence, byte_count, duration, percent, seconds, share
from gpulens.analyzer.judging.features import PodFeatures, PodGpu, pod_features
from gpulens.analyzer.judging.sizing import Size
from gpulens.core.activity import BUSY_LEVEL
from gpulens.core.bottlenecks import BOTTLENECKS, BY_NAME, RECOMMENDATIONS, STALL_CAUSES
from gpulens.core.catalog import GpuModel, gpu_share_of, model_info
from gpulens.core.metrics import APPLICATION_XIDS, describe_xid
from gpulens.core.thresholds import Thresholds
from gpulens.core.times import for_people


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
class DayUse:
    """A unit's GPUs over one UTC day of a span (history.Ledger): what showback bills and sums by team. Seconds
    are device-seconds, a GPU's or a MIG instance's each (its price is its share: catalog.device_price)."""

    #: The UTC day, "2026-12-01".
    day: str
    #: Device-seconds its samples cover that day (samples x interval, each GPU's): the time it held them.
    gpu_seconds: float
    #: Of those, the device-seconds with an activity signal, and their worked seconds (activity, or the share
    #: of time with work where sparse use is measured): worked / judged is its use that day.
    judged_gpu_seconds: float
    worked_gpu_seconds: float
    #: Its episodes' waste that day (each episode's split by its time in the day) and the money it cost.
    wasted_gpu_seconds: float
    wasted_cost: float
    #: The efficiency funnel's fields (history.FUNNEL: busy, sm_active, flop): per field read that day, the
    #: device-seconds it was read over and the device-seconds of it that field shows (its mean x them).
    funnel: dict[str, list[float]] = field(default_factory=dict)


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
    #: Share of the GPU time that did work, what sparse use is measured in (features.PodFeatures.work_share).
    work_share: float | None = None
    #: From the first sample to the end of the last, in seconds.
    window_seconds: float = 0.0
    #: Share of the window (per GPU) that samples cover: gaps in the data count neither as work nor as
    #: waste. 1.0 for data without gaps.
    coverage: float = 1.0
    #: Seconds between one GPU's samples (the median): what the signatures could resolve.
    sample_seconds: float = 0.0
    #: Over the span: the runs of one class, oldest first (one for a single window).
    episodes: list[Episode] = field(default_factory=list)
    #: Over the span: its rests that work followed (history.rest_kinds(): a notebook between cells, a replica at
    #: night), oldest first, each as idle, whatever class its time is booked under; a workload in use, whose
    #: pauses the plan culls or scales to zero where they are long. Empty for a single window.
    pauses: list[Episode] = field(default_factory=list)
    #: Over the span, per class: share of the covered time, and the GPU-seconds and money wasted in it.
    by_class: dict[str, ClassShare] = field(default_factory=dict)
    #: The pod's workload (analyzer/inputs/owners.py): Deployment, StatefulSet, DaemonSet, Job, CronJob, Pod or
    #: another controller's kind ("" where kube-state-metrics is not read), its name, and its team.
    owner_kind: str = ""
    owner: str = ""
    team: str = ""
    #: What the workload is (analyzer/inputs/kinds.py: notebook, serving, job, unknown), its serving engine ("" where
    #: none is known: vllm, tgi, triton, sglang), and what said so (the rule that matched).
    workload_kind: Kind = "unknown"
    engine: str = ""
    kind_source: str = ""
    #: What its serving engine counted over the span (analyzer/inputs/engines.py), where it exports its metrics.
    engine_load: EngineLoad | None = None
    #: Share of samples busy at under waiting_power_share of the power limit, counted as no work in the waste
    #: where activity is utilization (it shows that a kernel ran, and a kernel spinning on a peer runs all
    #: the time); None where activity shows the work itself (SM activity) or the class claims no waiting.
    waiting_share: float | None = None
    #: Work still being served: a serving replica, or sparse use with some work (a replica's quiet hour,
    #: under sparse_busy_share of work, still served a few requests). Not work that stopped.
    served: bool = False
    #: The cause its evidence shows where the class names several (host_stall: a key of
    #: core.bottlenecks.STALL_CAUSES, whose fix is the recommendation), or where host_stall is its secondary
    #: (wrong_gpu_type over a loop one host thread drives: the fix the plan gives after the move); "" otherwise.
    cause: str = ""
    #: What it found beyond its class that outputs act on (Fact), sorted.
    facts: list[str] = field(default_factory=list)
    #: The smallest GPU its measured use fits over the span (sizing.Size: a MIG slice, a cheaper model, a
    #: time-sliced share, its GPU as it is, or unknown and why), whatever its class: set where its use is
    #: measured (plan.sized(): reports, the live service's history), None in a single window's verdict.
    size: Size | None = None
    #: Over a span: its use day by day (UTC), oldest first; empty for a single window.
    days: list[DayUse] = field(default_factory=list)

    def verdict(self) -> Verdict:
        """Itself: a Verdict is written out already (Judgement.verdict() writes one out), so that a ledger
        books either."""
        return self

    @property
    def kind(self) -> WorkloadKind:
        """What the pod is, as its kind fields say (workload is its owner)."""
        return WorkloadKind(self.workload_kind, self.engine, self.kind_source)

    def to_dict(self) -> dict:
        return {"unit": self.unit, **asdict(self)}

    @classmethod
    def from_dict(cls, fields: dict) -> Verdict:
        """The verdict to_dict() gave (its `unit` is derived, and dropped). TypeError or KeyError where a
        field is missing or unknown (a dict another version of gpulens wrote)."""
        fields = {name: value for name, value in fields.items() if name != "unit"}
        fields["episodes"] = [Episode(**e) for e in fields["episodes"]]
        fields["pauses"] = [Episode(**e) for e in fields["pauses"]]
        fields["by_class"] = {name: ClassShare(**share) for name, share in fields["by_class"].items()}
        if fields["engine_load"] is not None:
            fields["engine_load"] = EngineLoad(**fields["engine_load"])
        if fields["size"] is not None:
            fields["size"] = Size(**fields["size"])
        fields["days"] = [DayUse(**d) for d in fields.get("days", [])]  # files of gpulens before days: none
        return cls(**fields)

    @property
    def unit(self) -> str:
        """What the verdict judges, as every output names it: "namespace/pod", or "gpu:node/GPU" for a GPU no
        pod holds (a namespace cannot hold ":", so the two never collide)."""
        return f"{self.namespace}/{self.pod}" if self.pod else f"gpu:{self.node}/{self.gpus[0] if self.gpus else ''}"

    @property
    def workload(self) -> str:
        """The owner as reports name it: namespace/Kind/name, the pod where the owner is unknown, and
        NO_POD for a GPU no pod holds."""
        if not self.pod:
            return NO_POD
        if not self.owner_kind:
            return f"{self.namespace}/{self.pod}"
        return f"{self.namespace}/{self.owner_kind}/{self.owner}"


def worked(activity: float, waiting_share: float | None) -> float:
    """The share of GPU time that did work (0-1), what waste is counted from: mean `activity`, less the
    samples busy at low power where they count as no work (Verdict.waiting_share)."""
    return activity * (1.0 - (waiting_share or 0.0))


#: The namespace, workload and team of a GPU no pod holds, where waste is summed by them.
NO_POD = "(no pod)"

#: The evidence key of sparse use called idle (_sparse): history.py lets it judge the start of the data.
SPARSE = "busy_fraction"
#: The evidence key of a hardware XID on a unit's GPUs (_hardware_xid): the plan leaves such units alone.
XID_FAULTS = "xid_faults"


#: What a verdict found beyond its class that outputs act on (Verdict.facts), typed rather than read from
#: its evidence: a hardware XID on its GPUs (the plan leaves it to be repaired), NVLinks down or failing (the
#: same), idle judged on sparse use (history lets a later window that saw enough judge the data's start), bursts
#: of work whose window ends quiet for idle_seconds or more and idle_pause_factor times its longest pause while it
#: worked (a notebook's kernel idle now, where Kubernetes says the unit is a notebook: history.notebook_relabels()).
Fact = Literal["xid_fault", "nvlink_fault", "sparse_use", "quiet_at_end"]


@dataclass(frozen=True)
class Finding:
    """What a signature found: the class, how sure (0-1, from Thresholds' confidences), the evidence that
    decided it, the cause it found where its class names several (host_stall: a STALL_CAUSES key, whose fix
    the verdict gives), the share of samples whose kernel ran as no work where activity cannot show it
    (Verdict.waiting_share), whether work was still being served (Verdict.served), and its facts."""

    bottleneck: str
    confidence: float
    evidence: dict[str, str]
    cause: str = ""
    waiting_share: float | None = None
    served: bool = False
    facts: frozenset[Fact] = frozenset()
    #: Classes whose evidence held too, which the finding's evidence settled against (Verdict.secondary).
    also: tuple[str, ...] = ()


#: A signature: a Finding when it holds for the unit, else None.
Signature = Callable[[PodFeatures, Thresholds, GpuModel], "Finding | None"]


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
    return [_written_out(judged, f) for f, judged in _judging(features, t, prices, node_prices)]


def judgements(
    features: pd.DataFrame,
    t: Thresholds,
    prices: dict[str, float] | None,
    node_prices: Mapping[str, float] | None = None,
) -> list[Judgement]:
    """judge() without writing each verdict out: what a report's windows need, most of which only a ledger
    books (history.ledgers)."""
    return [judged for _, judged in _judging(features, t, prices, node_prices)]


def _judging(
    features: pd.DataFrame, t: Thresholds, prices: dict[str, float] | None, node_prices: Mapping[str, float] | None
) -> Iterator[tuple[PodFeatures, Judgement]]:
    """Each row of `features` as a record, and its judgement."""
    models = {name: model_info(name, prices) for name in features["gpu_model"].unique()} if len(features) else {}
    node_prices = node_prices or {}
    # Data that attributes GPUs to pods (some GPU has one): a GPU without a pod there is capacity nobody
    # holds. Data that attributes none (a dmon or nvidia-smi capture, dcgm-exporter without its pod mapping)
    # says nothing of pods: each GPU is judged as the workload on it.
    attributed = bool(len(features)) and bool((features["pod"] != "").any())
    columns = PodFeatures.columns(features) if len(features) else []
    for position, f in enumerate(PodFeatures.rows(features) if len(features) else ()):
        model, node_price = models[f.gpu_model], node_prices.get(str(f.node))
        info = model if node_price is None else replace(model, price_per_hour=node_price)
        yield f, _judgement(f, t, info, attributed, columns, position)


@dataclass(frozen=True, eq=False)
class Judgement:
    """A unit's class in one window, with what a ledger books of it (history.Ledger), and its Verdict,
    evidence and all, written out only when asked (verdict()). A report judges every window of its span and
    keeps the evidence of few (each class's newest window): writing each out took half of judging. The
    window's features stay in their frame's columns (PodFeatures.columns(), row `position`) until then: a
    record of a hundred Python numbers for each window would hold several times the frame."""

    columns: list[np.ndarray]
    position: int
    t: Thresholds
    info: GpuModel
    found: Finding
    #: The verdict's confidence: the finding's, capped where profiling fields would help and are absent.
    confidence: float
    #: The class is one profiling fields (SM activity) would judge better, and the unit has none.
    profiling_would_help: bool
    #: The throttling overlay's evidence (None: not throttled), and whether the GPU is larger than needed.
    throttled: dict[str, str] | None
    oversized: bool
    without_pod: bool
    #: What a ledger books of the window (PodFeatures' fields of the same names).
    gpu_model: str
    gpus: tuple[str, ...]
    window_seconds: float
    sample_seconds: float
    hardware_xid: float

    @property
    def bottleneck(self) -> str:
        return self.found.bottleneck

    @property
    def waiting_share(self) -> float | None:
        return self.found.waiting_share

    @property
    def served(self) -> bool:
        return self.found.served

    @property
    def facts(self) -> list[str]:
        return sorted(self.found.facts | ({"xid_fault"} if self.hardware_xid > 0 else set()))

    @functools.cached_property
    def _written(self) -> Verdict:
        return _written_out(self, PodFeatures.at(self.columns, self.position))

    def verdict(self) -> Verdict:
        """The Verdict (the same object each time it is asked)."""
        return self._written


def _judgement(
    f: PodFeatures, t: Thresholds, info: GpuModel, attributed: bool, columns: list[np.ndarray], position: int
) -> Judgement:
    """The class of `f` (row `position` of `columns`, PodFeatures.columns())."""
    activity = None if math.isnan(f.activity) else float(f.activity)
    without_pod = not f.pod and attributed
    throttled = None if without_pod else _throttled(f, t)
    oversized = not without_pod and _oversized(f, t, info, activity)
    found = (
        # A GPU no pod holds is judged from as many samples as a pod: from one scrape, neither is anything yet.
        (_insufficient_data(f, t, info) or _without_pod(f, t))
        if without_pod
        else next((finding for gate in GATES if (finding := gate(f, t, info))), None)
        or weighed([finding for cause in CAUSES if (finding := cause(f, t, info))])
        or _without_signature(f, t, activity, throttled is not None, oversized)
    )
    if oversized and found.cause == "host_thread":
        found = _sized_over_loop(found, f, t)
    confidence = found.confidence
    profiling_would_help = not f.has_profiling and BY_NAME[found.bottleneck].profiling == "helps"
    if profiling_would_help:
        confidence = min(confidence, t.confidence_without_profiling)
    confidence = round(min(max(confidence, 0.0), 1.0), 2)
    return Judgement(
        columns,
        position,
        t,
        info,
        found,
        confidence,
        profiling_would_help,
        throttled,
        oversized,
        without_pod,
        f.gpu_model,
        tuple(f.gpu_list),
        float(f.window_seconds),
        float(f.sample_seconds),
        f.hardware_xid,
    )


def _written_out(judged: Judgement, f: PodFeatures) -> Verdict:
    """A judgement's Verdict (`f`: the features it judged): its evidence, overlays first, the fix, the waste
    and the rest."""
    t, found, name = judged.t, judged.found, judged.bottleneck
    activity = None if math.isnan(f.activity) else float(f.activity)
    # Overlays first, so that their evidence leads whatever the primary class is.
    evidence = {**_hardware_xid(f), **(judged.throttled or {}), **found.evidence}
    if f.start_up_seconds > 0:  # whatever the class: what it was judged on began after the start-up
        evidence.update(_start_up(f))
    not_judged = _not_judged(f, t)
    if not_judged and name != "insufficient_data" and not judged.without_pod:
        evidence["not_judged"] = not_judged
    if judged.profiling_would_help:
        evidence["profiling_fields"] = (
            "graphics-engine activity only: it shows that a kernel ran, not how much of the SMs worked"
            if not math.isnan(f.engine_active)
            else "absent: utilization shows that a kernel ran, not how much of the GPU worked"
        )
    secondary = list(found.also)
    if judged.throttled and name != "throttling":
        secondary.append("throttling")
    if judged.oversized and name not in ("wrong_gpu_type", "idle", "insufficient_data"):
        secondary.append("wrong_gpu_type")
    wasted = 0.0
    if activity is not None and BY_NAME[name].waste:
        wasted = (1.0 - worked(activity, found.waiting_share)) * f.gpu_seconds
    cost = wasted / 3600 * judged.info.price_per_hour * gpu_share_of(f.gpu_model)  # a MIG slice costs its share
    confidence = judged.confidence
    return Verdict(
        namespace=f.namespace,
        pod=f.pod,
        node=f.node,
        gpus=list(judged.gpus),
        gpu_model=f.gpu_model,
        bottleneck=name,
        confidence=confidence,
        evidence=evidence,
        recommendation=STALL_CAUSES[found.cause] if name == "host_stall" and found.cause else RECOMMENDATIONS[name],
        wasted_gpu_seconds=round(wasted, 1),
        wasted_cost=round(cost, 4),
        secondary=secondary,
        mean_activity=None if activity is None else round(activity, 4),
        idle_ratio=None if math.isnan(f.idle_share) else round(float(f.idle_share), 4),
        work_share=None if math.isnan(f.work_share) else round(float(f.work_share), 4),
        window_seconds=float(f.window_seconds),
        coverage=round(float(f.coverage), 4),
        sample_seconds=float(f.sample_seconds),
        episodes=[Episode(name, float(f.start), float(f.start + f.window_seconds), confidence, round(wasted, 1))],
        by_class={name: ClassShare(1.0, round(wasted, 1), round(cost, 4))},
        waiting_share=found.waiting_share,
        served=found.served,
        cause=found.cause,
        facts=judged.facts,
    )


def _not_judged(f: PodFeatures, t: Thresholds) -> str:
    """What the input could not show, and why: every verdict says so, so that a fleet read from
    dcgm-exporter or nvidia-smi alone knows what adding gpulens' exporter would add."""
    gaps = []
    if not f.has_shape and f.resolution_seconds > t.starvation_max_sample_seconds:
        gaps.append(
            f"stalls and bursts shorter than the {f.resolution_seconds:.0f} s between samples (each sample is one "
            "instant; gpulens' exporter counts every driver sample between scrapes)"
        )
    if math.isnan(f.dram_active):
        needed = ", ".join(b.name for b in BOTTLENECKS if b.profiling == "needed")
        profiled = f.has_profiling or not math.isnan(f.engine_active)
        what = "no DRAM or pipe activity" if profiled else "no profiling fields: SM, DRAM and pipe activity"
        gaps.append(f"{needed} (the input has {what})")
    if f.gpus >= 2 and not (f.numa_nodes or f.pcie_roots or f.nvlink_groups):
        gaps.append(
            "placement across sockets, PCIe roots and NVLink islands (the input has no topology; gpulens' "
            "exporter reports it)"
        )
    return "; ".join(gaps)


# --- overlays: findings that are primary only when nothing else is wrong ---------------------------
def _throttled(f: PodFeatures, t: Thresholds) -> dict[str, str] | None:
    """Clock-event bits for HW slowdown, thermal or power brake over most of the busy time, long enough:
    the evidence, or None."""
    throttled_seconds = (0.0 if math.isnan(f.throttled_time_share) else f.throttled_time_share) * f.window_seconds
    if throttled_seconds < min(t.throttle_seconds, t.signature_fraction * f.window_seconds) or not (
        f.throttled_share >= t.signature_fraction
    ):
        return None
    evidence: dict[str, str] = {
        "throttled_fraction": Evidence(
            share(f.throttled_share), " of busy time with HW slowdown/thermal/power-brake bits"
        )
    }
    if not math.isnan(f.clock_share):
        evidence["sm_clock_vs_max"] = percent(f.clock_share)
    return evidence


def _hardware_xid(f: PodFeatures) -> dict[str, str]:
    """A hardware XID on the unit's GPUs: evidence that the GPU, its driver or its links are at fault, which
    no change to the workload mends (the plan leaves such units alone). Empty without one."""
    if not f.hardware_xid > 0:
        return {}
    when = for_people(f.hardware_xid_last)
    return {
        XID_FAULTS: f"{describe_xid(f.hardware_xid)} reported, the last at {when}: hardware, driver or NVLink "
        f"trouble by NVIDIA's XID catalogue (the application's are {', '.join(map(str, APPLICATION_XIDS))}); "
        "dcgm-exporter repeats a GPU's last XID until it restarts, so from it the XID may predate the window"
    }


def _oversized(f: PodFeatures, t: Thresholds, info: GpuModel, activity: float | None) -> bool:
    """A sliver of a high-end GPU used, in activity and in memory, by a pod that is not idle."""
    return (
        info.high_end
        and activity is not None
        and activity <= t.oversized_activity
        and not math.isnan(f.memory_peak_bytes)
        and f.memory_peak_bytes <= t.oversized_memory_bytes
        and f.trailing_idle_seconds < min(t.idle_seconds, f.window_seconds)
    )


def _without_pod(f: PodFeatures, t: Thresholds) -> Finding:
    """A GPU no pod holds: held without a pod when memory above a CUDA context stays used on most samples or
    kernels run (busy on sparse_busy_share or more of the samples), else unallocated capacity."""
    evidence = {"pod": "none: the kubelet assigned this GPU to no pod, while it assigned others"}
    held = f.model_held_share >= t.signature_fraction
    if held:
        evidence["memory_held_fraction"] = Evidence(
            share(f.model_held_share),
            f" of samples hold >= {t.serving_memory_bytes / 1024**3:g} GiB >= ",
            share(t.signature_fraction),
            ": a process outside any pod",
        )
    busy = 1.0 - f.quiet_share
    working = busy >= t.sparse_busy_share  # False where the data has no activity (NaN)
    if working:
        evidence[SPARSE] = Evidence(share(busy), " >= ", share(t.sparse_busy_share), ": kernels run without a pod")
    _memory_held(f, evidence)
    return Finding("held_without_pod" if held or working else "unallocated", t.confidence_without_pod, evidence)


# --- the signatures, in docs/signals.md's order ----------------------------------------------------
def _insufficient_data(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    per_gpu_samples = f.samples / f.gpus
    if per_gpu_samples >= t.min_samples and f.has_activity:
        return None
    return Finding(
        "insufficient_data",
        1.0,
        {
            "samples_per_gpu": f"{per_gpu_samples:.0f} < {t.min_samples}"
            if f.has_activity
            else "no utilization or activity signal at all"
        },
    )


def _idle(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """No work for the last idle_seconds (or the whole window), after sustained work, or none, or
    quiet far longer than any pause while it worked: the work stopped, rather than paused between
    requests or notebook cells. Or sparse use (_sparse)."""
    found = _sparse(f, t) or _nothing_served(f, t)
    if found:
        return found
    # Idle after a model load is measured from the load's end, and the load is no work.
    idle_for = min(t.idle_seconds, f.window_seconds if math.isnan(f.steady_seconds) else f.steady_seconds)
    quiet = f.trailing_idle_seconds
    if quiet < idle_for - f.sample_seconds / 2:
        return None
    worked = not math.isnan(f.busy_before_share) and not (f.load_seen and f.last_busy < f.load_end)
    # Pauses are measured only from samples that resolve them: from sparse point samples, the
    # "pauses" between the few busy samples seen are chance, and a replica would be told to go.
    resolved = f.sample_seconds <= t.starvation_max_sample_seconds
    stopped = resolved and quiet >= t.idle_pause_factor * f.longest_pause_seconds
    if worked and f.busy_before_share < t.idle_sustained_share and not stopped:
        return None
    if f.cpu_at_limit_after_work >= t.signature_fraction:
        return None  # the pod's CPU is at its limit meanwhile: working, not idle (input pipeline, CPU eval)
    evidence = {
        "idle_for_seconds": Evidence(
            seconds(quiet), " >= ", seconds(idle_for), f" (activity < {percent(t.idle_activity)})"
        ),
        **_start_up(f),
    }
    if worked and f.busy_before_share >= t.idle_sustained_share:
        evidence["busy_before_fraction"] = Evidence(
            share(f.busy_before_share),
            f" of the {t.recent_samples} samples before >= ",
            share(t.idle_sustained_share),
            ": sustained work that stopped",
        )
    elif worked:
        evidence["longest_pause_while_working_seconds"] = Evidence(
            seconds(f.longest_pause_seconds),
            f": quiet {quiet / f.longest_pause_seconds:.1f}x longer >= {t.idle_pause_factor:g}x",
        )
    _memory_held(f, evidence)
    confident = f.idle_share >= t.idle_confident_share
    return Finding("idle", t.confidence_idle if confident else t.confidence_idle_partly, evidence)


def _sparse(f: PodFeatures, t: Thresholds) -> Finding | None:
    """Work on under sparse_busy_share of a window of an hour or more: idle whatever the pattern of the few
    blips (a notebook's rare cells, a replica that loaded its model and served nothing), unless the pod's
    CPU is at its limit meanwhile (working on the CPU). Measured in seconds of work (work_share), not in
    samples that caught a blip: at 30 s, a 2 s health check caught by one row is not 30 s of work. Read
    after the start-up (a model load is no work served)."""
    if not f.steady_seconds >= t.sparse_span_seconds or not f.work_share < t.sparse_busy_share:
        return None
    if f.cpu_at_limit_share >= t.signature_fraction:
        return None
    evidence = {SPARSE: sparse_use(f.work_share, f.steady_seconds, t), **_start_up(f)}
    _memory_held(f, evidence)
    # Any work at all: requests still arrive (a replica's quiet hour), where a stopped job's hour has none.
    return Finding("idle", t.confidence_sparse, evidence, served=f.work_share > 0, facts=frozenset({"sparse_use"}))


def _nothing_served(f: PodFeatures, t: Thresholds) -> Finding | None:
    """No burst of work (activity rising through BUSY_LEVEL) in idle_seconds or more of steady state, and
    under sparse_busy_share of it worked: a replica that loaded its model and served nothing, a notebook
    left open. Its blips (health checks, probes, the model load before) are no work served, however coarse
    the samples that caught them."""
    if not f.steady_seconds >= t.idle_seconds or _served(f, t):
        return None
    if f.cpu_at_limit_share >= t.signature_fraction:
        return None
    evidence = {
        "no_burst_seconds": Evidence(
            seconds(f.steady_seconds),
            " >= ",
            seconds(t.idle_seconds),
            f" without a burst of work (activity rising through {percent(BUSY_LEVEL)}), ",
            *sparse_use(f.work_share, f.steady_seconds, t).parts,
        ),
        **_start_up(f),
    }
    _memory_held(f, evidence)
    return Finding("idle", t.confidence_idle_partly, evidence)


def _served(f: PodFeatures, t: Thresholds) -> bool:
    """Work seen after the start-up, as serving requests would leave it: a burst (activity rising through
    BUSY_LEVEL), or sparse_busy_share of the time worked (coarse samples may catch requests only part-way)."""
    return f.bursts_after_load >= 1 or f.work_share >= t.sparse_busy_share


def _start_up(f: PodFeatures) -> dict[str, str]:
    """The evidence of a start-up left out of the steady state the verdict read: the rows before the features'
    start (a process starting with the data: pod_features), or those before load_end within them."""
    seconds = f.start_up_seconds if f.start_up_seconds > 0 else f.load_end - f.start if f.load_seen else 0.0
    if not seconds > 0:
        return {}
    return {"start_up": f"a model load and its warm-up, the first {seconds:.0f} s, left out"}


def sparse_use(work: float, span_seconds: float, t: Thresholds) -> Evidence:
    """The evidence of sparse use: `work` (0-1) of `span_seconds` of a GPU's time worked."""
    return Evidence(
        share(work),
        f" of {duration(span_seconds)} worked ({duration(work * span_seconds)}) < ",
        share(t.sparse_busy_share),
        ": sparse use (rare notebook cells, a replica with no requests) is idle",
    )


def _memory_held(f: PodFeatures, evidence: dict[str, str]) -> None:
    if not math.isnan(f.memory_peak_bytes):
        evidence["memory_held_bytes"] = Evidence(byte_count(f.memory_peak_bytes))


def _memory_fragmentation(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """Memory near full and growing, with the process dying and restarting or staying full for long."""
    if not f.memory_peak >= t.memory_full:
        return None
    if f.memory_spread < t.preallocator_flatness or f.memory_spread_after_load < t.preallocator_flatness:
        return None  # flat and high (after its model load): a pre-allocating server (vLLM, JAX, TensorRT-LLM)
    grew = f.memory_peak - f.memory_low >= t.memory_growth
    restarted = f.memory_drops >= 1 or f.restarts_max > f.restarts_min
    full_for_long = f.memory_full_share * f.window_seconds >= t.memory_full_seconds
    if not (grew and (restarted or full_for_long)):
        return None
    evidence = {
        "memory_peak_fraction": Evidence(share(f.memory_peak), " >= ", share(t.memory_full)),
        "memory_range": f"{percent(f.memory_low)}..{percent(f.memory_peak)} (grew >= {percent(t.memory_growth)})",
    }
    if restarted:
        evidence["restarts_or_oom_drops"] = f"{f.memory_drops:.0f} drops" + (
            "" if math.isnan(f.restarts_max) else f", {f.restarts_max - f.restarts_min:.0f} restarts"
        )
    confidence = (
        t.confidence_fragmentation
        + (t.confidence_fragmentation_restarts if restarted else 0.0)
        + (t.confidence_fragmentation_full if full_for_long else 0.0)
    )
    if f.capacity_from_catalogue:
        evidence["memory_capacity"] = (
            f"the catalogue's for the {f.gpu_model} (or the most used, where more): the input has no memory total "
            "(dcgm-exporter without DCGM_FI_DEV_FB_FREE)"
        )
    return Finding("memory_fragmentation", confidence, evidence)


def _poor_placement(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """A multi-GPU pod whose GPUs cannot exchange at NVLink speed: on different CPU sockets or PCIe root
    complexes with no NVLink between them; joined by NVLink that sits idle while they exchange over PCIe
    (NCCL peer-to-peer turned off, a container that does not see its peers); NVLinks down or failing on its
    GPUs. Only with that evidence: uneven activity alone is a stall or a straggler (_host_stall)."""
    busiest, least = f.gpu_activity_max, f.gpu_activity_min
    if f.gpus < 2 or not busiest >= t.placement_min_activity:
        return None  # an idle or barely used pod has a bigger problem than placement
    # One NVLink island, from the exporter's topology; without it, what the model's SXM boards have.
    nvlinked = f.nvlink_groups == 1 if f.nvlink_groups else info.nvlink_bytes_per_second > 0
    evidence: dict[str, str] = {}
    confidence = 0.0
    if not nvlinked and (f.numa_nodes >= 2 or f.pcie_roots >= 2):
        across = "CPU sockets" if f.numa_nodes >= 2 else "PCIe root complexes of one socket"
        where = "; ".join(_where(g, info) for g in f.pod_gpus)
        evidence["split_placement"] = f"{where}: no NVLink between them, so they exchange over PCIe across {across}"
        confidence = t.confidence_placement
    if (
        nvlinked
        and info.nvlink_bytes_per_second > 0
        and f.nvlink_use < t.nvlink_idle
        and f.pcie_peer_use >= t.placement_pcie_peer
    ):
        evidence["nvlink_unused"] = (
            f"{', '.join(g.gpu for g in f.pod_gpus) or 'the GPUs'} share NVLink, which carried {percent(f.nvlink_use)} "
            f"< {percent(t.nvlink_idle)} of its capacity while PCIe carried {percent(f.pcie_peer_use)} >= "
            f"{percent(t.placement_pcie_peer)} both ways: peer traffic goes over PCIe (NCCL_P2P_DISABLE or "
            "NCCL_P2P_LEVEL "
            "set, or a container that sees only its own GPU)"
        )
        confidence = t.confidence_placement
    failing = [
        g
        for g in f.pod_gpus
        if g.links_down > 0
        or g.crc_per_second >= t.nvlink_crc_errors_per_second
        or _retries(g) * f.window_seconds > t.nvlink_errors
    ]
    if failing:
        evidence["nvlink_faults"] = "; ".join(_link_faults(g, f.window_seconds) for g in failing) + (
            f" (CRC matters at >= {t.nvlink_crc_errors_per_second:g}/s, replay and recovery above "
            f"{t.nvlink_errors:g} per window: DCGM's limits)"
        )
        confidence = max(confidence, t.confidence_link_faults)
    if not confidence:
        return None
    evidence["gpu_activity_spread"] = f"least busy {percent(least)} / busiest {percent(busiest)}"
    return Finding("poor_placement", confidence, evidence, facts=frozenset({"nvlink_fault"} if failing else ()))


def _where(g: PodGpu, info: GpuModel) -> str:
    """'GPU-… (socket 0, PCIe root 1, NVLink island 0)', with what the trace says (no island on a model
    without NVLink, an L40S: its GPUs are each an island of their own)."""
    island = g.nvlink_group if info.nvlink_bytes_per_second > 0 else math.nan
    parts = [
        f"{name} {value:.0f}"
        for name, value in (("socket", g.socket), ("PCIe root", g.root), ("NVLink island", island))
        if not math.isnan(value)
    ]
    return g.gpu + (f" ({', '.join(parts)})" if parts else "")


def _retries(g: PodGpu) -> float:
    """Replay and recovery errors per second on a GPU's NVLinks (0 where the trace does not say)."""
    return sum(r for r in (g.replay_per_second, g.recovery_per_second) if not math.isnan(r))


def _link_faults(g: PodGpu, window_seconds: float) -> str:
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


def _interconnect(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    if not f.link_bound_share >= t.signature_fraction:
        return None
    evidence = {
        "link_bound_fraction": Evidence(
            share(f.link_bound_share),
            f" of samples with a link >= {percent(t.link_busy)} of capacity and activity < "
            f"{percent(t.interconnect_sm)}",
        ),
        "link_utilization": percent(f.link_use),
    }
    return Finding("interconnect", t.confidence_share_base + t.confidence_share_gain * f.link_bound_share, evidence)


def _pipeline(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """The pod's GPUs take turns: when one waits with no work, another works (stagger_share), two or more wait
    so on pipeline_gap_share of their samples, and they exchange (NVLink or PCIe both ways): pipeline stages,
    each waiting in its bubble. A bubble over GPipe's for its stages with pipeline_microbatches_per_stage
    micro-batches each, by pipeline_bubble_standard_errors, leaves the GPUs waiting on the schedule
    (host_stall); up to it, it is what the schedule costs (healthy, the bubble named). Data-parallel ranks wait
    together (one collective, one input) and are not stages."""
    if f.gpus < 2 or not f.stagger_share >= t.pipeline_stagger_share or not f.gapped_gpus >= 2:
        return None
    exchange = _exchange(f, t)
    if not exchange:
        return None  # independent processes take turns by chance: none of them waits for another
    p, bubble = f.gpus, f.bubble_share
    if math.isnan(bubble):
        return None  # no GPU worked above BUSY_LEVEL: no turns to measure a bubble between
    expected = (p - 1) / ((t.pipeline_microbatches_per_stage + 1) * p - 1)
    implied = (p - 1) * (1 - bubble) / bubble if bubble > 0 else math.inf
    margin = t.pipeline_bubble_standard_errors * math.sqrt(bubble * (1 - bubble) / f.samples)
    stalled = bubble - margin > expected
    evidence = {
        "stages_take_turns": f"{percent(f.stagger_share)} of the moments a GPU waits (activity < "
        f"{percent(t.starvation_low)}) "
        f"another works (> {percent(BUSY_LEVEL)}), >= {percent(t.pipeline_stagger_share)}; "
        f"{f.gapped_gpus:.0f} of {p} GPUs wait on "
        f">= {percent(t.pipeline_gap_share)} of their samples: pipeline stages, not ranks that wait together",
        "one_job": exchange,
        "pipeline_bubble": f"{percent(bubble)} +/- {percent(margin)} of the time (1 - mean activity / working "
        "activity, "
        f"{f.samples} samples); GPipe's (p-1)/(m+p-1) for p = {p} stages here implies m = {implied:.3g} "
        f"micro-batches per step; with m >= {t.pipeline_microbatches_per_stage}p = "
        f"{t.pipeline_microbatches_per_stage * p} it is <= {percent(expected)}"
        + (": above it" if stalled else "")
        + " (stages in other pods raise p and the bar)",
    }
    if not stalled:
        return Finding("healthy", t.confidence_pipeline, evidence)
    return Finding("host_stall", t.confidence_pipeline, evidence, "pipeline")


def _host_stall(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """The GPU waits on its host or on a peer rather than works. Without profiling fields utilization says
    that a kernel ran, not that the GPU worked: a rank waiting in a collective spins a kernel at 100%
    utilization and a fifth of its power (docs/signals.md). The causes, each with its own fix
    (STALL_CAUSES): fetches from host memory (CPU offload); one host thread driving one GPU; one rank stalls
    the others (a checkpoint written from it, its input); a straggler works while its peers wait; the whole
    pod waits on a peer outside it; synchronous saves on a GPU judged alone; uneven activity where power
    cannot say who waits. Pipeline stages waiting in their bubbles are _pipeline's, before these."""
    return (
        _offload(f, t, info)
        or _host_thread(f, t)
        or _rank_stalls(f, t)
        or _straggler(f, t)
        or _pod_waits(f, t)
        or _saves(f, t)
        or _uneven(f, t)
    )


def _transfers(f: PodFeatures, t: Thresholds, info: GpuModel) -> Literal["both ways", "one way", ""]:
    """How the GPU's host traffic flows while it waits between its bursts (its samples under starvation_low, on
    more than starvation_tail of them), where PCIe carries host traffic only (one GPU, or GPUs whose collectives
    go over NVLink): "both ways" where it fetches offload_pcie_bytes_per_second or more on average then and
    sends offload_return_share of that back (CPU offload: parameters in, gradients out); "one way" where it
    fetches that much with less back (an input pipeline's batches); "" where it fetches less, does not wait,
    PCIe may carry the pod's own exchange, or the input has no PCIe counters. A healthy job's steady input is
    no wait's."""
    into, back = f.host_to_device_in_gaps_bytes_per_second, f.device_to_host_in_gaps_bytes_per_second
    if not f.low_share > t.starvation_tail or not into >= t.offload_pcie_bytes_per_second or math.isnan(back):
        return ""
    if f.gpus >= 2 and not info.nvlink_bytes_per_second > 0:
        return ""
    return "both ways" if back >= t.offload_return_share * into else "one way"


def _transfers_evidence(f: PodFeatures, t: Thresholds) -> Evidence:
    into, back = f.host_to_device_in_gaps_bytes_per_second, f.device_to_host_in_gaps_bytes_per_second
    both = back >= t.offload_return_share * into
    return Evidence(
        f"while it waits, {into / 1e9:.3g} GB/s into the GPU over PCIe and {back / 1e9:.3g} GB/s back "
        f"({percent(back / into)} "
        f"{'>=' if both else '<'} {percent(t.offload_return_share)}): ",
        "parameters fetched and gradients sent back, at a volume only offloaded state moves (CPU offload)"
        if both
        else "one way, as an input pipeline's batches go",
    )


def _offload(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """The GPU fetches its parameters or activations from host memory (CPU offload): host-to-device PCIe traffic
    of offload_pcie_bytes_per_second or more while the SMs wait, on most samples; or, however bursty (a real
    FSDP job fetches at 27 GB/s for a tenth of a second, 1.4 GB/s on average), transfers both ways at that
    volume (_transfers()), which settle offload over an input pipeline whatever the steps' shape. One way with
    the pod's CPU at its limit is the input pipeline's (data_starvation): the CPU settles input over offload.
    PCIe carries host traffic only where it carries no peer exchange: one GPU, or GPUs whose collectives go over
    NVLink."""
    transfers = _transfers(f, t, info)
    if not (f.host_fetch_share >= t.signature_fraction or transfers == "both ways"):
        return None
    if f.gpus >= 2 and not info.nvlink_bytes_per_second > 0:
        return None  # PCIe may carry the exchange between the pod's GPUs: interconnect and placement's to judge
    if transfers != "both ways" and f.cpu_at_limit_share >= t.signature_fraction:
        return None  # its CPU at its limit while the GPU waits, fetching one way: its input pipeline
    evidence: dict[str, str] = {}
    if f.host_fetch_share >= t.signature_fraction:
        evidence["host_fetch_fraction"] = Evidence(
            share(f.host_fetch_share),
            f" of samples with >= {t.offload_pcie_bytes_per_second / 1e9:g} GB/s into the GPU over PCIe while "
            f"activity < {percent(t.interconnect_sm)} (mean {f.host_to_device_bytes_per_second / 1e9:.3g} "
            "GB/s): it waits on "
            "what it fetches from host memory",
        )
    if transfers:
        evidence["transfers"] = _transfers_evidence(f, t)
    return Finding("host_stall", t.confidence_offload, evidence, "offload")


def _host_thread(f: PodFeatures, t: Thresholds) -> Finding | None:
    """One GPU working little (activity under ineffective_sm) but seldom quiet (under serving_quiet_share of
    its samples: short launches, one after another) while its pod's CPU use sits within host_thread_cores of
    one core, under a limit of more, on most samples: one host thread drives the GPU, which waits between its
    launches. A notebook busy on its CPU leaves the GPU quiet for long; a pod at its CPU limit is
    data_starvation's or unexplained's to judge."""
    if f.gpus != 1 or not f.activity < t.ineffective_sm or not f.one_core_share >= t.signature_fraction:
        return None
    if not f.quiet_share < t.serving_quiet_share or f.cpu_at_limit_share >= t.signature_fraction:
        return None
    evidence: dict[str, str] = {
        "one_core_fraction": Evidence(
            share(f.one_core_share),
            f" of samples with the pod's CPU at 1 +/- {t.host_thread_cores:g} cores (under a higher limit) while "
            f"activity is {percent(f.activity)} < {percent(t.ineffective_sm)}: one host thread drives the "
            "GPU, which waits "
            "between its launches",
        ),
        "quiet_fraction": Evidence(
            share(f.quiet_share), " of samples < ", share(t.serving_quiet_share), ": launches one after another"
        ),
    }
    return Finding("host_stall", t.confidence_host_thread, evidence, "host_thread")


def _sized_over_loop(loop: Finding, f: PodFeatures, t: Thresholds) -> Finding:
    """A loop bound by one host thread (`loop`) on a sliver of a high-end GPU: its footprint settles the size
    whatever else holds, and the loop runs as fast on a GPU a seventh the price, so the class is wrong_gpu_type,
    with host_stall (the loop, its evidence kept) what else held; batching the loop is the fix after the move."""
    sized = _without_signature(f, t, None if math.isnan(f.activity) else float(f.activity), False, True)
    evidence = {
        **sized.evidence,
        **loop.evidence,
        "deciding": "its footprint fits a smaller GPU, and a loop one host thread drives runs as fast on one: the "
        "size first, then the loop (batch it: host_stall's host_thread fix)",
    }
    return replace(sized, evidence=evidence, also=("host_stall",), cause=loop.cause)


def _one_job(f: PodFeatures, t: Thresholds) -> str:
    """What shows that a multi-GPU unit's GPUs are ranks of one job (exchange between them, or samples that
    move together), without which no wait is put on a straggler or a collective: independent processes, one
    per GPU, have no peer to wait for. "" where nothing does."""
    if exchange := _exchange(f, t):
        return exchange
    if f.gpu_correlation >= t.job_correlation:
        return f"their samples move together (correlation {_fmt(f.gpu_correlation)} >= {t.job_correlation})"
    return ""


def _exchange(f: PodFeatures, t: Thresholds) -> str:
    """What shows a multi-GPU unit's GPUs exchanging data: NVLink in use, or PCIe both ways. "" where nothing does."""
    if f.nvlink_use >= t.nvlink_idle:
        return f"NVLink carries {percent(f.nvlink_use)} >= {percent(t.nvlink_idle)} of its capacity: the GPUs exchange"
    if f.pcie_peer_use >= t.placement_pcie_peer:
        return (
            f"PCIe carries {percent(f.pcie_peer_use)} >= {percent(t.placement_pcie_peer)} of its capacity "
            "both ways: the GPUs "
            "exchange"
        )
    return ""


def _unrelated(f: PodFeatures, t: Thresholds) -> str:
    """Why a multi-GPU unit's GPUs may be independent processes: what the data shows of their exchange and
    correlation (for the evidence where _one_job found nothing)."""
    links = (
        f"NVLink at {percent(f.nvlink_use)} of its capacity"
        if not math.isnan(f.nvlink_use)
        else "no NVLink traffic in the input"
    )
    together = "" if math.isnan(f.gpu_correlation) else f", correlation between their samples {_fmt(f.gpu_correlation)}"
    return f"{links}{together}: no sign that the GPUs are ranks of one job"


def _waiting_means(t: Thresholds) -> str:
    return (
        f"a kernel running at < {percent(t.waiting_power_share)} of the power limit or with SMs < "
        f"{percent(t.starvation_low)} "
        "active: waiting (a kernel spinning in a collective), not working"
    )


def _rank_stalls(f: PodFeatures, t: Thresholds) -> Finding | None:
    """Some GPUs of the pod wait on stall_share of their samples or more while one barely waits: the one
    they wait for. Without a kernel meanwhile, its host holds it (a checkpoint, its input); working, it is
    a straggler."""
    waiting = [g for g in f.pod_gpus if g.waiting >= t.stall_share]
    if not waiting:
        return None
    held_by = min(f.pod_gpus, key=lambda g: math.inf if math.isnan(g.waiting) else g.waiting)
    if not held_by.waiting < t.stall_share / 2:
        return None  # all of them wait: on something outside the pod (_pod_waits)
    job = _one_job(f, t)
    if not job:
        return None
    evidence = {
        "waiting_gpus": ", ".join(f"{g.gpu} {percent(g.waiting)}" for g in waiting)
        + f" of samples >= {percent(t.stall_share)}: {_waiting_means(t)}",
        "one_job": job,
    }
    if held_by.no_kernel >= t.stall_share:
        cause, shape = _stall_shape(f, t)
        evidence["stalling_gpu"] = (
            f"{held_by.gpu}: no kernel on {percent(held_by.no_kernel)} of samples while its peers wait: its host holds "
            "it (a checkpoint written from this rank, its input)"
        )
        evidence["stalls"] = shape
    else:
        cause = "straggler"
        evidence["stalling_gpu"] = f"{held_by.gpu}: works while its peers wait" + _clocks(held_by, f.pod_gpus, t)
    return Finding("host_stall", t.confidence_stall, evidence, cause)


def _straggler(f: PodFeatures, t: Thresholds) -> Finding | None:
    """Every GPU of the pod runs kernels, and one draws far more power than the others while it does: it
    works through each step while they finish early and wait for it, in waits shorter than a sample."""
    powered = [g for g in f.pod_gpus if g.busy_power >= t.waiting_power_share and g.no_kernel < t.stall_share]
    if len(powered) < 2 or len(powered) < len(f.pod_gpus):
        return None
    slow = max(powered, key=lambda g: g.busy_power)
    most = max(g.busy_power for g in powered if g is not slow)
    if most / slow.busy_power > t.straggler_power_ratio:
        return None
    job = _one_job(f, t)
    if not job:
        return None  # one process drawing more power than another: a heavier model, not a peer waited for
    evidence = {
        "straggler_gpu": f"{slow.gpu} draws {percent(slow.busy_power)} of its power limit while busy, its peers at "
        f"most {percent(most)} ({percent(most / slow.busy_power)} <= {percent(t.straggler_power_ratio)}): "
        "they finish each step "
        "early and wait for it" + _clocks(slow, f.pod_gpus, t),
        "one_job": job,
    }
    return Finding("host_stall", t.confidence_straggler, evidence, "straggler")


def _clocks(slow: PodGpu, gpus: tuple[PodGpu, ...], t: Thresholds) -> str:
    """What the clocks say of the rank the others wait for: its GPU slow, or its work or host."""
    peers = [g.clock for g in gpus if g is not slow and not math.isnan(g.clock)]
    if math.isnan(slow.clock) or not peers:
        return ""
    if slow.clock < min(peers) - t.straggler_clock_margin:
        return f"; its SM clock at {slow.clock:.0%} of its maximum, theirs at {min(peers):.0%}: its GPU is slow"
    return f"; its SM clock at {slow.clock:.0%} of its maximum, as theirs: its work or its host, not its GPU"


def _pod_waits(f: PodFeatures, t: Thresholds) -> Finding | None:
    """The pod's GPUs wait on stall_share of their samples or more, none of them holding the others: on a
    peer outside the pod (a rank on another node), or a stalled stream. A pod of one GPU has no peer in
    the data: only its SMs idle under a running kernel (a spin-wait) show it waits, not low power alone (a
    replica decoding at batch 1 draws a third of an H100's power; _busy_at_low_power)."""
    if not f.waiting_share >= t.stall_share:
        return None
    spinning = f.spinning_share >= t.stall_share
    job = _one_job(f, t) if f.gpus >= 2 else ""
    if not (spinning or job):
        return None
    evidence = {
        "waiting_fraction": Evidence(
            share(f.waiting_share),
            " of samples >= ",
            share(t.stall_share),
            f": {_waiting_means(t)}; on no GPU of this pod: a peer outside it (another pod's rank) or a stalled stream",
        ),
        "power_while_busy": f"{percent(f.busy_power_share)} of the power limit",
        "stalls": _stall_shape(f, t)[1],
    }
    if job:
        evidence["one_job"] = job
    return _waiting_waste(Finding("host_stall", t.confidence_waiting, evidence, "peer"), f, t)


def _saves(f: PodFeatures, t: Thresholds) -> Finding | None:
    """Long stalls without a kernel at a steady period, with work between them, where the data times them
    (_stall_shape): synchronous saves (a checkpoint written from this rank). Short ones are the input pipeline
    (_data_starvation)."""
    if not f.stalled_share >= t.stall_share or f.cpu_at_limit_share >= t.signature_fraction:
        return None  # a pod whose CPU sits at its limit while the GPU waits is feeding it: data_starvation
    cause, shape = _stall_shape(f, t)
    if cause != "checkpoint" or not f.high_share > t.starvation_tail:
        return None
    evidence = {
        "stalled_fraction": Evidence(share(f.stalled_share), " of samples >= ", share(t.stall_share)),
        "stalls": shape,
    }
    return Finding("host_stall", t.confidence_saves, evidence, "checkpoint")


def _stall_shape(f: PodFeatures, t: Thresholds) -> tuple[str, str]:
    """The cause the stalls' shape shows ("checkpoint", "input", or "" where it cannot tell), and what the
    evidence says of it: from the exporter's counters where the trace has them (the mean gap below
    starvation_low between bursts, and the share of steady bursts), else from rows that time them."""
    if f.has_shape and f.bursts:
        length = f.low_share * f.window_seconds * f.gpus / f.bursts
        steady = f.steady_burst_share >= t.starvation_steady_share
        timed = f"{f.bursts:.0f} gaps of {length:.3g} s (mean, from the exporter's counters)"
        spread = f"{percent(f.steady_burst_share)} of bursts steady" + (" >=" if steady else " <")
        spread += f" {percent(t.starvation_steady_share)}"
    elif f.sample_seconds > t.starvation_max_sample_seconds:
        return "", (
            f"not timed: stalls shorter than the {f.sample_seconds:.0f} s between samples cannot be, so checkpoints "
            "(tens of seconds every few minutes) cannot be told from input gaps (every step)"
        )
    else:
        length = f.stall_samples * f.sample_seconds
        steady = f.stall_spread <= t.starvation_regularity
        timed = f"{f.stalls:.0f} of {length:.3g} s (median) every {f.stall_period_seconds:.3g} s"
        spread = f"spread {_fmt(f.stall_spread)}" + (" <=" if steady else " >") + f" {t.starvation_regularity}"
    if length < t.stall_long_seconds:
        return "input", f"{timed} < {t.stall_long_seconds:g} s: short gaps every step"
    if length >= t.idle_seconds:
        return "", (
            f"{timed} >= {t.idle_seconds:g} s (idle_seconds): rests between work (a notebook between its cells, a "
            "job between runs), longer than a checkpoint written even to slow storage, not saves"
        )
    if f.stall_held_share < t.serving_held_share:
        return "", (
            f"{timed} >= {t.stall_long_seconds:g} s, the GPU's memory released in them (held on "
            f"{percent(f.stall_held_share)} of stalled samples): the process ended and another began, not a save"
        )
    if steady:
        return "checkpoint", f"{timed} >= {t.stall_long_seconds:g} s at a steady period ({spread}): synchronous saves"
    return "", f"{timed} >= {t.stall_long_seconds:g} s at no steady period ({spread})"


def _uneven(f: PodFeatures, t: Thresholds) -> Finding | None:
    """One GPU far busier than another, with no placement evidence and no power to say which waits."""
    busiest, least = f.gpu_activity_max, f.gpu_activity_min
    if f.gpus < 2 or not busiest >= t.placement_min_activity or not least / busiest <= t.placement_imbalance:
        return None
    job = _one_job(f, t)
    if not job:
        return None  # independent processes with different loads: nobody waits for anybody
    evidence = {
        "gpu_activity_spread": f"least busy {percent(least)} / busiest {percent(busiest)} <= "
        f"{percent(t.placement_imbalance)}, "
        "with no topology or link evidence against the placement: a stall or a straggler",
        "one_job": job,
    }
    if math.isnan(f.busy_power_share):
        evidence["power"] = "absent: cannot tell whether the less busy GPU waits for the busier one or has less work"
    return Finding("host_stall", t.confidence_uneven, evidence, "uneven")


def _data_starvation(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """Bursts near full activity and gaps near zero, switching several times a minute at a steady
    period (training steps, not requests), from samples fine enough to show them; else (coarser samples,
    or bursts that do not switch like steps) only a pod whose CPU sits at its limit while the GPU waits."""
    if _transfers(f, t, info) == "both ways":
        return None  # parameters in and gradients out at offload's volume: CPU offload's (host_stall), not input
    cpu_saturated = f.cpu_at_limit_share >= t.signature_fraction
    coarse = f.resolution_seconds > t.starvation_max_sample_seconds
    switches = f.switches / f.gpus / max(f.window_seconds / 60.0, 1e-9)
    if coarse or not (
        f.high_share > t.starvation_tail
        and f.low_share > t.starvation_tail
        and switches >= t.starvation_switches_per_minute
    ):
        if not (cpu_saturated and f.activity_at_cpu_limit < t.ineffective_sm):
            return None
        evidence = {
            "cpu_at_limit_fraction": Evidence(share(f.cpu_at_limit_share), " >= ", share(t.signature_fraction)),
            "activity_while_cpu_at_limit": f"{percent(f.activity_at_cpu_limit)} < {percent(t.ineffective_sm)}",
        }
        if coarse:
            evidence["sample_interval_seconds"] = Evidence(
                seconds(f.resolution_seconds),
                " > ",
                seconds(t.starvation_max_sample_seconds, "g"),
                ": too coarse to see the bursts and gaps of training steps; judged on the CPU alone",
            )
        else:
            evidence["busy_idle_switches_per_minute"] = (
                f"{switches:.1f} < {t.starvation_switches_per_minute}: not the bursts and gaps of training steps; "
                "judged on the CPU alone"
            )
        return Finding("data_starvation", t.confidence_starvation_coarse, evidence)
    measured = f.bursts >= t.min_bursts
    regular = measured and _steady(f, t)
    if not (regular or cpu_saturated):
        # Bursts at random (requests arriving), or too few to time (a serving period's edges, a warm-up), and
        # the CPU does not say otherwise: nothing here shows a starved input pipeline.
        return None
    evidence = {
        "activity_p95_above": f"{percent(t.starvation_high)} ({percent(f.high_share)} of samples)",
        "activity_p5_below": f"{percent(t.starvation_low)} ({percent(f.low_share)} of samples)",
        "busy_idle_switches_per_minute": f"{switches:.1f} >= {t.starvation_switches_per_minute}",
    }
    if measured:
        _burst_evidence(f, t, evidence)
    else:
        evidence["bursts"] = f"{f.bursts:.0f} < {t.min_bursts}: too few to tell training steps from requests"
    _resolution_evidence(f, t, evidence)
    if not math.isnan(f.cpu_at_limit_share):
        evidence["cpu_at_limit_fraction"] = Evidence(share(f.cpu_at_limit_share))
    cpu = t.confidence_starvation_cpu if cpu_saturated else 0.0
    return Finding("data_starvation", t.confidence_starvation + cpu, evidence)


def _steady(f: PodFeatures, t: Thresholds) -> bool:
    """Bursts at a steady period, like training steps: from the exporter's steady-burst counters where
    the trace has them, else from the spread of the time between burst starts in the rows."""
    if f.has_shape:
        return bool(f.steady_burst_share >= t.starvation_steady_share)
    return bool(f.burst_spread <= t.starvation_regularity)


def _burst_evidence(f: PodFeatures, t: Thresholds, evidence: dict[str, str]) -> None:
    steady = _steady(f, t)
    if f.has_shape:
        evidence["steady_burst_fraction"] = Evidence(
            share(f.steady_burst_share),
            f" of {f.bursts:.0f} bursts started within 1.5x of the previous period",
            f" (>= {percent(t.starvation_steady_share)}: steady, like training steps)"
            if steady
            else f" (< {percent(t.starvation_steady_share)}: at random, like requests)",
        )
    else:
        evidence["burst_period_seconds"] = Evidence(
            seconds(f.burst_period_seconds, ".3g"),
            f", spread {_fmt(f.burst_spread)}",
            f" <= {t.starvation_regularity}: steady, like training steps"
            if steady
            else f" > {t.starvation_regularity}: at random, like requests",
        )


def _resolution_evidence(f: PodFeatures, t: Thresholds, evidence: dict[str, str]) -> None:
    if f.has_shape:
        evidence["driver_samples"] = (
            f"{f.shape_samples:.0f}, one every {f.resolution_seconds:.3g} s, counted by the exporter between "
            f"rows {f.sample_seconds:.3g} s apart"
        )
    else:
        evidence["sample_interval_seconds"] = Evidence(
            seconds(f.sample_seconds, ".3g"), " <= ", seconds(t.starvation_max_sample_seconds, "g")
        )


def _overprovisioned_serving(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """A model held in memory, work in bursts with quiet spells between them, low activity overall: a
    serving replica with more GPU than requests. Not idle: it works whenever requests come. Not bursts
    measured at a steady period: those are training steps, not requests."""
    if (
        not f.activity < t.ineffective_sm
        or f.model_held_share < t.serving_held_share
        or f.quiet_share < t.serving_quiet_share
        or not _served(f, t)
    ):
        return None
    if f.cpu_at_limit_share >= t.signature_fraction:
        return None  # a replica waits for requests; a pod at its CPU limit is busy feeding its GPU
    if _oversized(f, t, info, f.activity):
        return None  # a sliver of a high-end GPU: a smaller GPU or a MIG slice is the sharper fix
    measured = f.resolution_seconds <= t.starvation_max_sample_seconds and f.bursts >= t.min_bursts
    if measured and _steady(f, t):
        return None
    evidence = _serving_evidence(f, t)
    seen = f"{f.bursts_after_load:.0f} bursts of work between them" if f.bursts_after_load else "work without bursts"
    evidence["quiet_fraction"] = Evidence(
        share(f.quiet_share), " of samples >= ", share(t.serving_quiet_share), f" ({seen})"
    )
    if measured:
        _burst_evidence(f, t, evidence)
        if f.has_shape:
            _resolution_evidence(f, t, evidence)
    elif f.resolution_seconds <= t.starvation_max_sample_seconds:
        evidence["bursts"] = f"{f.bursts:.0f} < {t.min_bursts} above {percent(BUSY_LEVEL)}: too few to time"
    else:
        evidence["sample_interval_seconds"] = Evidence(
            seconds(f.resolution_seconds, ".3g"), ": too coarse to time single bursts"
        )
    confidence = t.confidence_serving if measured else t.confidence_serving_untimed
    quiet = f.trailing_idle_seconds >= max(
        t.idle_seconds - f.sample_seconds / 2, t.idle_pause_factor * _or_zero(f.longest_pause_seconds)
    )
    facts: frozenset[Fact] = frozenset({"quiet_at_end"}) if quiet else frozenset()
    return Finding("overprovisioned_serving", confidence, evidence, served=True, facts=facts)


def _or_zero(value: float) -> float:
    return 0.0 if math.isnan(value) else value


def _serving_evidence(f: PodFeatures, t: Thresholds) -> dict[str, str]:
    return {
        "mean_activity": f"{percent(f.activity)} < {percent(t.ineffective_sm)}",
        "model_memory_bytes": _model_memory(f),
    }


def _model_memory(f: PodFeatures) -> Evidence:
    return Evidence(byte_count(f.memory_peak_bytes), f" held on {percent(f.model_held_share)} of samples")


def _memory_bandwidth(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """DRAM near its peak while the compute pipes idle: only profiling fields can show it."""
    if not f.has_profiling or not f.dram_bound_share >= t.signature_fraction:
        return None
    evidence = {
        "dram_bound_fraction": Evidence(
            share(f.dram_bound_share),
            f" of samples with DRAM >= {percent(t.dram_active)} and pipes < {percent(t.pipes_idle)}",
        ),
        "dram_active": percent(f.dram_active),
    }
    return Finding("memory_bandwidth", t.confidence_share_base + t.confidence_share_gain * f.dram_bound_share, evidence)


#: What is judged before any cause, and decides alone where it holds: too few samples to judge, and work
#: that stopped (or never came): whatever else its earlier samples show, a unit is not worked on now.
GATES: tuple[Signature, ...] = (_insufficient_data, _idle)
#: The causes, every one tried: where several hold, the one whose evidence settles the others is the class
#: (weighed()), whatever their order here, which is docs/signals.md's.
CAUSES: tuple[Signature, ...] = (
    _memory_fragmentation,
    _poor_placement,
    _interconnect,
    _pipeline,
    _host_stall,
    _data_starvation,
    _overprovisioned_serving,
    _memory_bandwidth,
)


@dataclass(frozen=True)
class Settles:
    """Evidence (a key a signature writes) that rules out a rival class where both signatures hold: the
    evidence that excludes the other decides, never the order they run in. docs/analyzer.md's class table
    names each, beside its class (tests/test_weighing.py holds the two to each other)."""

    #: The classes whose signatures write the key.
    of: tuple[str, ...]
    rivals: tuple[str, ...]
    #: Why it rules them out, in words the verdict's `deciding` evidence quotes.
    why: str


_PLACED = "its GPUs cannot exchange at NVLink speed: their ranks wait on the exchange its placement slows"
_ONE_RANK = "the GPUs wait on one rank, a peer or a save its evidence names, not each on its own input or requests"

#: By evidence key: what it settles.
SETTLES: dict[str, Settles] = {
    "split_placement": Settles(("poor_placement",), ("host_stall", "interconnect"), _PLACED),
    "nvlink_unused": Settles(("poor_placement",), ("host_stall", "interconnect"), _PLACED),
    "nvlink_faults": Settles(("poor_placement",), ("host_stall", "interconnect"), _PLACED),
    "link_bound_fraction": Settles(
        ("interconnect",),
        ("host_stall",),
        "a link runs near its capacity while the SMs wait: the waits are the link's, not a host's or a peer's",
    ),
    "stages_take_turns": Settles(
        ("host_stall", "healthy"),
        ("data_starvation", "overprovisioned_serving"),
        "its GPUs take turns, one working while another waits: a pipeline's schedule, where starved ranks wait "
        "together and a replica's GPUs serve a request together",
    ),
    "host_fetch_fraction": Settles(
        ("host_stall",),
        ("data_starvation", "overprovisioned_serving"),
        "it fetches from host memory through its waits, its pod's CPU under its limit: the wait is the fetch (CPU "
        "offload), where an input pipeline's batches arrive as its bursts start, or with its CPU at its limit, and "
        "a replica waiting for requests fetches nothing",
    ),
    "transfers": Settles(
        ("host_stall",),
        ("data_starvation", "overprovisioned_serving"),
        "while it waits, data crosses PCIe both ways at a volume that scales with the model: parameters in, "
        "gradients out (CPU offload), where an input pipeline sends little back and a replica between requests "
        "moves nothing",
    ),
    "stalling_gpu": Settles(("host_stall",), ("data_starvation", "overprovisioned_serving"), _ONE_RANK),
    "straggler_gpu": Settles(("host_stall",), ("data_starvation", "overprovisioned_serving"), _ONE_RANK),
    "waiting_fraction": Settles(
        ("host_stall",),
        ("data_starvation", "overprovisioned_serving"),
        "a kernel spins at a small share of its power while it waits: a collective waiting on a peer, where a "
        "starved or unrequested GPU runs no kernel",
    ),
    "stalled_fraction": Settles(
        ("host_stall",),
        ("data_starvation",),
        "the stalls' length and period (its `stalls` evidence) are a save's or a rank's, not every step's input",
    ),
}


def weighed(findings: list[Finding]) -> Finding | None:
    """The finding whose evidence settles every other class that held (SETTLES), with those classes as what
    else was consistent (Finding.also) and the deciding evidence; None where none held. Where no finding settles
    the others, the causes stay open: the most confident (then by name: never by the order tried) is the class,
    the others beside it, and its evidence says both and what would tell them apart."""
    if len(findings) <= 1:
        return findings[0] if findings else None

    def settled(finding: Finding) -> dict[str, str]:
        """The rivals its evidence settles, each with why."""
        return {
            rival: rule.why
            for key in finding.evidence
            if (rule := SETTLES.get(key)) and finding.bottleneck in rule.of
            for rival in rule.rivals
        }

    classes = {finding.bottleneck for finding in findings}
    deciding = [
        (finding, settles) for finding in findings if classes - {finding.bottleneck} <= set(settles := settled(finding))
    ]
    if len({finding.bottleneck for finding, _ in deciding}) == 1:
        # Two findings of the winning class (a pipeline's and a checkpoint's host_stall): the surer, then by cause.
        finding, settles = min(deciding, key=lambda pair: (-pair[0].confidence, pair[0].cause))
        others = sorted(classes - {finding.bottleneck})
        if not others:
            return finding
        why = "; ".join(sorted({settles[rival] for rival in others}))
        evidence = {**finding.evidence, "deciding": f"{', '.join(others)} held too, settled: {why}"}
        return replace(finding, evidence=evidence, also=(*finding.also, *others))
    finding = min(findings, key=lambda found: (-found.confidence, found.bottleneck))
    rivals = sorted(classes - {finding.bottleneck})
    evidence = {
        **finding.evidence,
        "causes_open": f"{finding.bottleneck} and {', '.join(rivals)} both hold, and no evidence here excludes "
        f"either: {finding.bottleneck} is named for its higher confidence",
        "would_tell_them_apart": _would_settle(classes),
    }
    return replace(finding, evidence=evidence, also=(*finding.also, *rivals))


def _would_settle(classes: set[str]) -> str:
    """What would settle a choice between `classes` that held together: the evidence keys (SETTLES) by which
    one of them rules out another, which this data did not show."""
    keys = sorted(
        f"{key} ({', '.join(sorted(set(rule.of) & classes))})"
        for key, rule in SETTLES.items()
        if set(rule.of) & classes and set(rule.rivals) & classes
    )
    if not keys:
        return (
            "no evidence gpulens reads settles these classes against each other: the pod's CPU and its limit, the "
            "GPU's power and PCIe both ways, and gpulens' exporter's every second between scrapes show more of each"
        )
    return f"evidence that would settle it, not in this data (docs/analyzer.md's class table): {'; '.join(keys)}"


def _without_signature(
    f: PodFeatures, t: Thresholds, activity: float | None, throttled: bool, oversized: bool
) -> Finding:
    """No signature holds: an overlay becomes the class, else low activity or healthy."""
    if throttled:
        return Finding("throttling", t.confidence_share_base + t.confidence_share_gain * f.throttled_share, {})
    if oversized and activity is not None:
        evidence = {
            "mean_activity": f"{percent(activity)} <= {percent(t.oversized_activity)}",
            "peak_memory_bytes": Evidence(
                byte_count(f.memory_peak_bytes), " <= ", byte_count(t.oversized_memory_bytes), f" on a {f.gpu_model}"
            ),
        }
        long = f.window_seconds >= t.oversized_span_seconds
        return Finding("wrong_gpu_type", t.confidence_wrong_gpu if long else t.confidence_wrong_gpu_short, evidence)
    if activity is not None and activity < t.ineffective_sm:
        return _unexplained(f, t, activity)
    if f.waiting_share >= t.stall_share:
        return _busy_at_low_power(f, t)
    healthy = f.has_profiling and f.sm_active >= t.healthy_sm
    return Finding(
        "healthy",
        t.confidence_healthy if healthy else t.confidence_healthy_utilization,
        {"mean_activity": "nan" if activity is None else percent(activity)},
    )


def _unexplained(f: PodFeatures, t: Thresholds, activity: float) -> Finding:
    """Low activity that no signature explains. A class is a claim with a fix attached, so none is
    claimed: the evidence names the causes this data leaves open and the inputs that would tell them apart,
    and the plan proposes no resize and no code fix. Its waste is counted all the same."""
    coarse = f.resolution_seconds > t.starvation_max_sample_seconds
    evidence = {"mean_activity": f"{percent(activity)} < {percent(t.ineffective_sm)} with no signature of a cause"}
    causes, inputs = [], []
    if math.isnan(f.cpu_at_limit_share):
        causes.append("an input pipeline or a serving loop bound by the pod's CPU")
        inputs.append("the pod's CPU use and limit (cAdvisor, kube-state-metrics)")
    elif f.cpu_at_limit_share >= t.signature_fraction:
        evidence["cpu_at_limit_fraction"] = Evidence(
            share(f.cpu_at_limit_share),
            " >= ",
            share(t.signature_fraction),
            ", but the GPU is no less busy while it is",
        )
        causes.append("work on the pod's CPU beside the GPU's, or an input pipeline bound by it")
    else:
        evidence["cpu_at_limit_fraction"] = Evidence(
            share(f.cpu_at_limit_share), " < ", share(t.signature_fraction), ": not at its limit"
        )
        causes.append("input or a host loop bound by storage, the network or one thread, not the CPU limit")
    if coarse:
        causes.append("training steps starved for input (bursts and gaps at a steady period)")
        inputs.append(
            "gpulens' exporter on its node (it counts every second between scrapes), or samples at most "
            f"{t.starvation_max_sample_seconds:g} s apart, to time the bursts"
        )
    if f.model_held_share >= t.serving_held_share:
        evidence["model_memory_bytes"] = _model_memory(f)
        causes.append("a serving replica with few requests")
        inputs.append("its serving engine's request metrics (vLLM, Triton), or its owner's kind (kube-state-metrics)")
    if f.kernel_busy_share > 0 and math.isnan(f.busy_power_share):  # a kernel spinning in a collective looks busy
        causes.append("a rank waiting on a peer or its host (busy at low power)")
        inputs.append("its power draw")
    causes.append("a light workload by design (small batches, short notebook cells)")
    inputs.append("the workload's own profile (PyTorch profiler, Nsight Systems)")
    _independent(f, t, evidence, causes, inputs)
    evidence["causes_open"] = "; ".join(causes)
    evidence["would_tell_them_apart"] = "; ".join(inputs)
    return Finding("unexplained", t.confidence_low_activity_coarse if coarse else t.confidence_low_activity, evidence)


def _busy_at_low_power(f: PodFeatures, t: Thresholds) -> Finding:
    """A kernel runs most of the time at a small share of the power, with nothing in the data that it waits
    for (one GPU, no SM activity to show a spin-wait): a rank spinning in a collective on a peer in another
    pod, or light kernels by design (a small-batch decode). Not healthy, and no cause claimed."""
    evidence = {
        "waiting_fraction": Evidence(
            share(f.waiting_share), " of samples >= ", share(t.stall_share), f": {_waiting_means(t)}"
        ),
        "power_while_busy": f"{percent(f.busy_power_share)} of the power limit",
    }
    causes = [
        "a rank waiting in a collective on a peer in another pod",
        "light kernels by design (a small-batch decode draws a third of an H100's power)",
    ]
    inputs = [
        "SM activity (DCGM profiling fields: a spinning kernel leaves the SMs idle)",
        "the pod's owner (kube-state-metrics: one pod of a multi-pod job)",
    ]
    _independent(f, t, evidence, causes, inputs)
    evidence["causes_open"] = "; ".join(causes)
    evidence["would_tell_them_apart"] = "; ".join(inputs)
    return _waiting_waste(Finding("unexplained", t.confidence_low_activity, evidence), f, t)


def _independent(f: PodFeatures, t: Thresholds, evidence: dict[str, str], causes: list[str], inputs: list[str]) -> None:
    """For a multi-GPU unit with nothing to show it is one job (_one_job): the evidence says so, and that its
    GPUs may run independent processes, which neither wait for each other nor have a straggler."""
    if f.gpus < 2 or _one_job(f, t):
        return
    evidence["one_job"] = _unrelated(f, t)
    causes.append("independent processes, one per GPU (an inference server each), not ranks of one job")
    if math.isnan(f.nvlink_use):
        inputs.append("NVLink traffic between the GPUs (DCGM_FI_PROF_NVLINK_TX_BYTES / RX_BYTES)")


def _waiting_waste(found: Finding, f: PodFeatures, t: Thresholds) -> Finding:
    """`found` with its waste counting the samples busy at low power as no work, where activity is
    utilization or graphics-engine activity (no SM activity): both say only that a kernel ran, and a kernel
    spinning on a peer runs all the time. With SM activity, activity already shows the SMs idle."""
    if not math.isnan(f.sm_active) or math.isnan(f.activity):
        return found
    found.evidence["waste"] = (
        f"the {percent(f.waiting_share)} of samples busy under {percent(t.waiting_power_share)} of the power "
        "limit counted as no "
        "work (utilization shows only that a kernel ran)"
    )
    return replace(found, waiting_share=float(f.waiting_share))
