"""Why each pod's GPU is underused: one verdict per pod, with confidence, evidence and a fix to try.

The class names are public API (gpulens.core.bottlenecks). The rules (analyzer/judging/rules/) each read a
unit's features (PodFeatures) and return a Finding, or None: the gates decide alone where they hold (missing data,
a job's start-up left out before, then idle), then every cause is tried, and where several hold, the one whose
evidence settles the others is the class (rules.weighed()), never the one tried first; healthy where none holds.
Here the rules are run on each unit of a window (judge()), and what holds beside any class is added: throttling
and a wrong GPU type, overlays that become the primary class only when nothing else is wrong, and hardware XIDs.
Without profiling fields (consumer GPUs, stock dcgm-exporter) the verdict says so with low confidence.

Every check knows the sample interval of its input: a signature that needs to see a training step's
bursts and gaps is claimed only from samples fine enough to resolve them, and the evidence says so.
This module judges one window; gpulens.analyzer.judging.history slides windows across hours or days.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd

from gpulens.analyzer.inputs.engines import EngineLoad
from gpulens.analyzer.inputs.kinds import Kind, WorkloadKind
from gpulens.analyzer.judging.evidence import Evidence, percent, share
from gpulens.analyzer.judging.features import PodFeatures, pod_features
from gpulens.analyzer.judging.rules import CAUSES, GATES, weighed
from gpulens.analyzer.judging.rules.base import Finding, is_oversized, start_up, wasted_seconds
from gpulens.analyzer.judging.rules.fallback import sized_over_loop, without_signature
from gpulens.analyzer.judging.rules.gates import gpu_without_pod, insufficient_data
from gpulens.analyzer.judging.sizing import Size
from gpulens.core.bottlenecks import (
    BOTTLENECKS,
    BY_NAME,
    HOST_STALL,
    IDLE,
    INSUFFICIENT_DATA,
    RECOMMENDATIONS,
    STALL_CAUSES,
    THROTTLING,
    WRONG_GPU_TYPE,
)
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


#: The namespace, workload and team of a GPU no pod holds, where waste is summed by them.
NO_POD = "(no pod)"
#: The evidence key of a hardware XID on a unit's GPUs (_hardware_xid): the plan leaves such units alone.
XID_FAULTS = "xid_faults"


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
    oversized = not without_pod and is_oversized(f, t, info, activity)
    found = (
        # A GPU no pod holds is judged from as many samples as a pod: from one scrape, neither is anything yet.
        (insufficient_data(f, t, info) or gpu_without_pod(f, t))
        if without_pod
        else next((finding for gate in GATES if (finding := gate(f, t, info))), None)
        or weighed([finding for cause in CAUSES if (finding := cause(f, t, info))])
        or without_signature(f, t, activity, throttled is not None, oversized)
    )
    if oversized and found.cause == "host_thread":
        found = sized_over_loop(found, f, t)
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
        evidence.update(start_up(f))
    not_judged = _not_judged(f, t)
    if not_judged and name != INSUFFICIENT_DATA and not judged.without_pod:
        evidence["not_judged"] = not_judged
    if judged.profiling_would_help:
        evidence["profiling_fields"] = (
            "graphics-engine activity only: it shows that a kernel ran, not how much of the SMs worked"
            if not math.isnan(f.engine_active)
            else "absent: utilization shows that a kernel ran, not how much of the GPU worked"
        )
    secondary = list(found.also)
    if judged.throttled and name != THROTTLING:
        secondary.append(THROTTLING)
    if judged.oversized and name not in (WRONG_GPU_TYPE, IDLE, INSUFFICIENT_DATA):
        secondary.append(WRONG_GPU_TYPE)
    wasted = 0.0
    if activity is not None and BY_NAME[name].waste:
        wasted = wasted_seconds(activity, found.waiting_share, f.gpu_seconds)
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
        recommendation=STALL_CAUSES[found.cause] if name == HOST_STALL and found.cause else RECOMMENDATIONS[name],
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
