"""What Kubernetes says of the cluster's GPUs over a span, read from kube-state-metrics' series (in a store, or
recorded in files: analyzer/inputs/kube_state.py): each node's allocatable GPUs, pool and model; each GPU pod's
request and, step by step, whether it waited for a node or which node held it; each namespace's GPU quota.

Series read (kube-state-metrics 2.x names and labels, kubernetes/kube-state-metrics docs/metrics):
- kube_node_status_allocatable{node, resource="nvidia_com_gpu"}: the GPUs the device plugin offers;
- kube_node_spec_unschedulable{node}: a cordoned node (1) takes no new pod, so its free GPUs are not free;
- kube_node_labels{node, label_<key>}: the node's pool and GPU model (GPU feature discovery's
  nvidia.com/gpu.product). kube-state-metrics exports node labels only where its
  --metric-labels-allowlist names them; without them every node of a model is one pool, its model read from
  its GPU series;
- kube_pod_container_resource_requests{namespace, pod, node, resource="nvidia_com_gpu"} with
  kube_pod_status_phase{phase}: a pod asking GPUs, with no node while it waits (phase Pending), and its node
  once scheduled, until it leaves Pending and Running (Succeeded, Failed) or is deleted;
- kube_pod_nodeselectors{namespace, pod, nodeselector_<key>} (opt-in in kube-state-metrics): the pool and
  model a waiting pod asked for;
- kube_pod_created{namespace, pod}: when a pod began waiting, if before the span;
- kube_resourcequota{namespace, resource="requests.nvidia.com/gpu", type="hard"|"used"};
- kube_deployment_spec_replicas{namespace, deployment}, kube_statefulset_replicas{namespace, statefulset}: a
  workload's replicas as its spec sets them; kube_horizontalpodautoscaler_spec_min_replicas and
  _max_replicas{namespace, horizontalpodautoscaler}, with kube_horizontalpodautoscaler_info{scaletargetref_kind,
  scaletargetref_name} naming what each scales: the workloads' history (ClusterReader.workloads(), the changes
  they went through: analyzer/judging/changes.py).

A pod's GPUs are free from the step kube-state-metrics stops saying it holds them: at once where its phase
turns Succeeded or Failed; where the pod is deleted, its series end. A store that backfilled its history
(promtool) or lost a staleness marker carries a series' last sample for its lookback (5 minutes in
Prometheus) after it ended: every series here is read only while its newest sample is at most FRESH of
kube-state-metrics' scrape intervals old (`timestamp()`), so a pod deleted is gone within one scrape and a
half. A pod both waiting and on a node at a step (the wait's series carried that long) is on the node.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from gpulens.analyzer.inputs.kinds import PodKey, Pools
from gpulens.analyzer.inputs.kube_state import AUTOSCALER_INFO, GPU_RESOURCE, GPUS, KubeState, StoreKubeState
from gpulens.analyzer.inputs.owners import Owner, OwnerReader, label_name
from gpulens.analyzer.inputs.queries import IDENTITY_FRESH
from gpulens.analyzer.inputs.store import Store
from gpulens.core.catalog import model_info
from gpulens.core.times import rfc3339

#: GPU feature discovery's label of a node's GPU model ("NVIDIA-A100-SXM4-80GB").
PRODUCT_LABEL = "nvidia.com/gpu.product"
#: Node labels that name a pool on the common platforms, tried in order where the settings name none: Karpenter,
#: GKE, EKS managed node groups, AKS.
POOL_LABELS = (
    "karpenter.sh/nodepool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "kubernetes.azure.com/agentpool",
)
#: Steps read per range query: a day of minutes, so that memory follows the pods, not the span.
PIECE_STEPS = 1440
#: A pod on no node: it waits to be scheduled.
WAITING = -1
#: Series are read while their newest sample is at most this many scrape intervals old (queries.IDENTITY_FRESH).
FRESH = IDENTITY_FRESH
#: The most GPUs a node offers or a pod asks for that is believed: 8 GPUs time-sliced 512 ways (the device
#: plugin's `replicas`), far past any real node (16 GPUs at most, 7 MIG instances each). A larger count is a
#: broken or hostile series: believed, one node "offering" 1e18 GPUs makes a pool of them and erases every
#: real wait for a GPU in it.
MOST_GPUS = 4096


@dataclass
class _LeftOut:
    """The samples of one series name left out: how many, the series they were in, and the first."""

    samples: int
    series: set[tuple[tuple[str, str], ...]]
    first_labels: dict[str, str]
    first: float


class _Counts:
    """GPU counts checked where they enter: a count is a whole number from 0 to MOST_GPUS (a quota may be any
    whole number: a large one means no limit); other samples are left out, as if not exported, and tallied by
    series name, so that what was left out is said once."""

    def __init__(self) -> None:
        self.left_out: dict[str, _LeftOut] = {}

    def checked(
        self, name: str, labels: dict[str, str], values: list[tuple[float, float]], most: float = MOST_GPUS
    ) -> list[tuple[float, float]]:
        """`values` itself where every one is a count (a day of a fleet's requests is millions of points: never
        copied, nor their pairs made anew), else the points that are, the others tallied."""
        counts = np.fromiter((v for _, v in values), dtype=np.float64, count=len(values))
        good = (counts >= 0) & (counts <= most) & (counts == np.floor(counts))
        if good.all():
            return values
        kept = [point for point, ok in zip(values, good.tolist(), strict=True) if ok]
        tally = self.left_out.setdefault(name, _LeftOut(0, set(), labels, float(counts[~good][0])))
        tally.samples += len(values) - len(kept)
        tally.series.add(tuple(sorted(labels.items())))
        return kept

    def notes(self) -> list[str]:
        out = []
        for name, tally in sorted(self.left_out.items()):
            said = ", ".join(
                f"{k}={v}" for k, v in sorted(tally.first_labels.items()) if k in ("node", "namespace", "pod")
            )
            out.append(
                f"{name}: {tally.samples:,} sample{'s' if tally.samples != 1 else ''} of {len(tally.series):,} series "
                f"left out, not a count of GPUs (a whole number, at most {MOST_GPUS:,} a node or pod), the first "
                f"{tally.first:g} ({said}); check the device plugin's or the pod's spec, and what exports the series"
            )
        return out


def model_name(name: str) -> str:
    """A GPU model as the catalogue names it where it knows it (GPU feature discovery's NVIDIA-A100-SXM4-80GB
    and NVML's NVIDIA A100-SXM4-80GB are one), else as given."""
    known = model_info(name)
    return known.name if name and known.match else name


def selector_name(key: str) -> str:
    """The Prometheus label kube-state-metrics makes of a node selector's key (kube_pod_nodeselectors)."""
    return "nodeselector_" + label_name(key).removeprefix("label_")


@dataclass(frozen=True)
class Node:
    """A GPU node: its name, its pool ("" where no pool label is exported) and its GPU model ("" unknown)."""

    name: str
    pool: str
    model: str


@dataclass(frozen=True)
class Run:
    """Steps `first` to `last` (inclusive, indices of the span's grid) in which a pod held `gpus` GPUs on node
    index `node`, or waited for them (node WAITING)."""

    first: int
    last: int
    node: int
    gpus: float


@dataclass
class PodTrack:
    """A GPU pod over the span: its runs in time order, when it was created (unix seconds; None unknown) and
    the pool and model its node selector asks for ("" where it names none or is not exported)."""

    key: PodKey
    runs: list[Run] = field(default_factory=list)
    created: float | None = None
    wants_pool: str = ""
    wants_model: str = ""

    @property
    def gpus(self) -> float:
        """The GPUs it asked for (the most, if it changed)."""
        return max((r.gpus for r in self.runs), default=0.0)

    def waited(self) -> bool:
        return any(r.node == WAITING for r in self.runs)


@dataclass
class ClusterHistory:
    """The cluster over a span on a step grid: `start` + i x `step` for i < `steps` (unix seconds)."""

    start: float
    step: float
    steps: int
    nodes: list[Node]
    #: Per node and step, the GPUs it offers (0 where absent) and whether it is cordoned.
    allocatable: np.ndarray
    cordoned: np.ndarray
    pods: dict[PodKey, PodTrack]
    #: Per namespace with a GPU quota, its hard limit at each step (NaN where none).
    quota_hard: dict[str, np.ndarray] = field(default_factory=dict)
    #: What the store did not say, and what that leaves out ("kube_pod_nodeselectors is not exported: ...").
    missing: list[str] = field(default_factory=list)
    #: The node label the pools were read from ("" none).
    pool_label: str = ""
    #: Pods' requests of MIG instances (nvidia.com/mig-<profile>), in instances: read for what they requested
    #: (requested_by_day), not scheduled as GPUs (their runs' node is ON_A_NODE or WAITING).
    mig_pods: dict[PodKey, PodTrack] = field(default_factory=dict)

    def time_of(self, index: int) -> float:
        return self.start + index * self.step

    def requested_by_day(self) -> dict[PodKey, dict[str, float]]:
        """Per pod, the device-seconds it requested while on a node (scheduled: Pending or Running), by UTC day
        ("2026-12-01"): GPUs, or MIG instances (an instance a device, as showback counts one); each step counts
        `step` seconds from its time, as a GPU's sample does in showback."""
        out: dict[PodKey, dict[str, float]] = {}
        for key, track in [*self.pods.items(), *self.mig_pods.items()]:
            for run in track.runs:
                if run.node == WAITING or run.gpus <= 0:
                    continue
                days = out.setdefault(key, {})
                t_first, t_last = self.time_of(run.first), self.time_of(run.last)
                for day in range(int(t_first // DAY_SECONDS), int(t_last // DAY_SECONDS) + 1):
                    # The run's steps whose time falls in the day.
                    lo = max(run.first, math.ceil((day * DAY_SECONDS - self.start) / self.step - 1e-9))
                    hi = min(run.last, math.ceil(((day + 1) * DAY_SECONDS - self.start) / self.step - 1e-9) - 1)
                    if hi >= lo:
                        name = rfc3339(day * DAY_SECONDS)[:10]
                        days[name] = days.get(name, 0.0) + (hi - lo + 1) * self.step * run.gpus
        return out

    def used(self) -> np.ndarray:
        """Per node and step, the GPUs its pods asked for."""
        diff = np.zeros((len(self.nodes), self.steps + 1))
        for track in self.pods.values():
            for run in track.runs:
                if run.node != WAITING:
                    diff[run.node, run.first] += run.gpus
                    diff[run.node, run.last + 1] -= run.gpus
        return np.cumsum(diff, axis=1)[:, : self.steps]


#: The node of a run of MIG instances requested on a node (which node matters to no one: they are not scheduled).
ON_A_NODE = -2
#: A UTC day's seconds: requests are summed by day, as showback's charges are.
DAY_SECONDS = 86400

#: A series' (unix seconds, value) points, where it has one.
Points = list[tuple[float, float]]


@dataclass
class WorkloadHistory:
    """What kube-state-metrics says of each workload over a span: its spec's replicas, and its autoscalers'
    bounds (ClusterReader.workloads())."""

    #: (namespace, kind, name, points) of each Deployment's and StatefulSet's replicas.
    replicas: list[tuple[str, str, str, Points]] = field(default_factory=list)
    #: (namespace, target kind, target name, least points, most points) of each autoscaler.
    autoscalers: list[tuple[str, str, str, Points, Points]] = field(default_factory=list)


class ClusterReader:
    """Reads a ClusterHistory from kube-state-metrics' series: in a store, or recorded
    (analyzer/inputs/kube_state.py)."""

    def __init__(self, source: Store | KubeState, pool_label: str = "", selector: str = ""):
        #: Where the series are read (a Store is read through PromQL; `selector` adds matchers to its queries).
        self.source = StoreKubeState(source, selector) if isinstance(source, Store) else source
        #: The node label that names a pool (the settings'), else the first of POOL_LABELS a node carries.
        self.pool_labels = (pool_label,) if pool_label else POOL_LABELS

    def scrape_interval(self, start: float, end: float) -> float | None:
        """Seconds between kube-state-metrics' samples, from the most samples a GPU node's allocatable series
        holds in the last hour of the span (a node there all hour); None where none is."""
        window = min(3600.0, end - start)
        if window < 60:
            return None
        count = self.source.samples_per_series("kube_node_status_allocatable", end, window, GPUS)
        return window / count if count > 1 else None

    def read(self, start: float, end: float, step: float, models: dict[str, str] | None = None) -> ClusterHistory:
        """The cluster from `start` to `end` (unix seconds, both read) at `step`; `models` names each node's GPU
        model where its labels do not (from its GPU series)."""
        interval = self.scrape_interval(start, end)
        # Without a measured interval, a series lives for Prometheus' lookback, as it would unfiltered.
        age = FRESH * interval if interval else 300.0
        steps = int(round((end - start) / step)) + 1
        node_index: dict[str, int] = {}
        allocatable: dict[int, np.ndarray] = {}
        cordoned: dict[int, np.ndarray] = {}
        quota: dict[str, np.ndarray] = {}
        pods: dict[PodKey, PodTrack] = {}
        mig: dict[PodKey, PodTrack] = {}

        def node_of(name: str) -> int:
            if name not in node_index:
                node_index[name] = len(node_index)
            return node_index[name]

        source = self.source
        counts = _Counts()
        for first in range(0, steps, PIECE_STEPS):
            last = min(steps, first + PIECE_STEPS) - 1
            at, until = start + first * step, start + last * step
            for labels, values in source.node_gpus(at, until, step, age):
                if not (values := counts.checked("kube_node_status_allocatable", labels, values)):
                    continue
                _place(allocatable.setdefault(node_of(labels.get("node", "")), np.zeros(steps)), values, start, step)
            for labels, values in source.cordoned(at, until, step, age):
                if not (values := counts.checked("kube_node_spec_unschedulable", labels, values, most=1)):
                    continue
                _place(cordoned.setdefault(node_of(labels.get("node", "")), np.zeros(steps)), values, start, step)
            for labels, values in source.gpu_quota(at, until, step, age):
                values = counts.checked("kube_resourcequota", labels, values, most=math.inf)
                _place(quota.setdefault(labels.get("namespace", ""), np.full(steps, np.nan)), values, start, step)
            for labels, values in source.gpu_pods(at, until, step, age):
                values = counts.checked("kube_pod_container_resource_requests", labels, values)
                if not all(gpus for _, gpus in values):  # a request of 0 GPUs neither holds nor waits for one
                    values = [point for point in values if point[1]]
                if not values:
                    continue
                key = (labels.get("namespace", ""), labels.get("pod", ""))
                node = labels.get("node", "")
                if labels.get("resource", GPU_RESOURCE) != GPU_RESOURCE:  # MIG instances: requested, not scheduled
                    _add_runs(mig.setdefault(key, PodTrack(key)), values, start, step, ON_A_NODE if node else WAITING)
                    continue
                track = pods.setdefault(key, PodTrack(key))
                _add_runs(track, values, start, step, node_of(node) if node else WAITING)
        for track in pods.values():
            track.runs = _placed_over_waiting(track.runs)

        names = sorted(node_index, key=node_index.__getitem__)
        node_labels, pool_label, missing = self._node_labels(bool(names), end, end - start)
        missing += counts.notes()
        models = models or {}
        nodes = []
        for name in names:
            pool, product = node_labels.get(name, ("", ""))
            nodes.append(Node(name, pool, model_name(product or models.get(name, ""))))
        grid = np.zeros((len(names), steps))
        for i, row in allocatable.items():
            grid[i] = row
        cordon = np.zeros((len(names), steps), dtype=bool)
        for i, row in cordoned.items():
            cordon[i] = row > 0
        if pods and not allocatable:
            missing.append(
                f'kube_node_status_allocatable{{resource="{GPU_RESOURCE}"}} names no node: no GPU is free or '
                "offered, so every wait reads no_node (a device plugin that offers another resource, as MIG's "
                "nvidia.com/mig-<profile>, is not read)"
            )
        history = ClusterHistory(start, step, steps, nodes, grid, cordon, pods, quota, missing, pool_label, mig)
        self._waiting_pods(history, end)
        return history

    def workloads(self, start: float, end: float, step: float) -> WorkloadHistory:
        """Each workload's replicas and each autoscaler's bounds from `start` to `end` (unix seconds) at `step`,
        read in pieces as read() reads the cluster; an autoscaler whose target kube_horizontalpodautoscaler_info
        does not name is left out (what it scales is unknown)."""
        interval = self.scrape_interval(start, end)
        age = FRESH * interval if interval else 300.0
        steps = int(round((end - start) / step)) + 1
        replicas: dict[tuple[str, str, str], Points] = {}
        bounds: dict[tuple[str, str], dict[str, Points]] = {}
        for first in range(0, steps, PIECE_STEPS):
            at, until = start + first * step, start + (min(steps, first + PIECE_STEPS) - 1) * step
            for kind, (labels, points) in self.source.workload_replicas(at, until, step, age):
                replicas.setdefault((labels["namespace"], kind, labels["name"]), []).extend(points)
            for bound, (labels, points) in self.source.autoscaler_bounds(at, until, step, age):
                key = (labels.get("namespace", ""), labels.get("horizontalpodautoscaler", ""))
                bounds.setdefault(key, {}).setdefault(bound, []).extend(points)
        by = ["namespace", "horizontalpodautoscaler", "scaletargetref_kind", "scaletargetref_name"]
        named = self.source.last(AUTOSCALER_INFO, by, end, end - start) if bounds else []
        targets = {
            (labels.get("namespace", ""), labels.get("horizontalpodautoscaler", "")): (
                labels.get("scaletargetref_kind", ""),
                labels.get("scaletargetref_name", ""),
            )
            for labels, _ in named
        }
        autoscalers = [
            (namespace, *targets[(namespace, name)], limits.get("min", []), limits.get("max", []))
            for (namespace, name), limits in sorted(bounds.items())
            if all(targets.get((namespace, name), ("", "")))
        ]
        return WorkloadHistory(
            [(namespace, kind, name, points) for (namespace, kind, name), points in sorted(replicas.items())],
            autoscalers,
        )

    def _node_labels(
        self, any_node: bool, end: float, span: float
    ) -> tuple[dict[str, tuple[str, str]], str, list[str]]:
        """Each node's (pool, model) from kube_node_labels, the pool label found ("" none), and what could not
        be read."""
        keys = [*self.pool_labels, PRODUCT_LABEL]
        by = ["node", *(label_name(k) for k in keys)]
        found = [labels for labels, _ in self.source.last("kube_node_labels", by, end, span)]
        out: dict[str, tuple[str, str]] = {}
        for labels in found:
            pool = next((labels[label_name(k)] for k in self.pool_labels if labels.get(label_name(k))), "")
            out[labels.get("node", "")] = (pool, labels.get(label_name(PRODUCT_LABEL), ""))
        pool_label = next((k for k in self.pool_labels if any(labels.get(label_name(k)) for labels in found)), "")
        missing = []
        if any_node and not pool_label:
            missing.append(
                f"no node carries a pool label ({', '.join(self.pool_labels)}) in kube_node_labels: each GPU model is "
                "one pool. Export the label (kube-state-metrics --metric-labels-allowlist=nodes=[<label>]) and name "
                "it in --analysis.config's pools.label"
            )
        return out, pool_label, missing

    def _waiting_pods(self, history: ClusterHistory, end: float) -> None:
        """For the pods that waited: when each was created and the pool and model its node selector asks."""
        waited = [t for t in history.pods.values() if t.waited()]
        if not waited:
            return
        window = end - history.start
        pods = ("pod", "=~", "|".join(sorted({re.escape(t.key[1]) for t in waited})))
        for labels, created in self.source.last("kube_pod_created", ["namespace", "pod"], end, window, pods):
            track = history.pods.get((labels.get("namespace", ""), labels.get("pod", "")))
            if track is not None:
                track.created = created
        keys = [*self.pool_labels, PRODUCT_LABEL]
        by = ["namespace", "pod", *(selector_name(k) for k in keys)]
        selectors = self.source.last("kube_pod_nodeselectors", by, end, window, pods)
        for labels, _ in selectors:
            track = history.pods.get((labels.get("namespace", ""), labels.get("pod", "")))
            if track is not None:
                track.wants_pool = next(
                    (labels[selector_name(k)] for k in self.pool_labels if labels.get(selector_name(k))), ""
                )
                track.wants_model = labels.get(selector_name(PRODUCT_LABEL), "")
        if not selectors:
            history.missing.append(
                "kube_pod_nodeselectors is not exported (it is opt-in: kube-state-metrics --metric-opt-in-list="
                "kube_pod_nodeselectors): a waiting pod is judged against the pool its kind is meant for in "
                "--analysis.config, else against every GPU node"
            )


def _placed_over_waiting(runs: list[Run]) -> list[Run]:
    """Runs in time order, a wait cut where the pod is on a node at the same steps (the wait's series carried
    past the pod's scheduling)."""
    placed = [r for r in runs if r.node != WAITING]
    kept = list(placed)
    for wait in (r for r in runs if r.node == WAITING):
        pieces = [(wait.first, wait.last)]
        for on in placed:
            pieces = [
                part
                for first, last in pieces
                for part in ((first, min(last, on.first - 1)), (max(first, on.last + 1), last))
                if part[0] <= part[1]
            ]
        kept += [Run(first, last, WAITING, wait.gpus) for first, last in pieces]
    return sorted(kept, key=lambda r: (r.first, r.node))


def _place(row: np.ndarray, values: list[tuple[float, float]], start: float, step: float) -> None:
    """A range answer's (time, value) points written into `row` at their steps."""
    for at, value in values:
        i = int(round((at - start) / step))
        if 0 <= i < len(row):
            row[i] = value


def _add_runs(track: PodTrack, values: list[tuple[float, float]], start: float, step: float, node: int) -> None:
    """A range answer's points as runs of consecutive steps of one request, each joined to the track's run of
    the same node and request that ended the step before it (the previous piece of a span read in pieces)."""
    if not values:
        return
    index = np.rint((np.array([at for at, _ in values]) - start) / step).astype(np.int64)
    gpus = np.array([value for _, value in values])
    breaks = np.flatnonzero((np.diff(index) != 1) | (np.diff(gpus) != 0)) + 1
    for first, last in zip(np.r_[0, breaks], np.r_[breaks, len(index)] - 1, strict=True):
        run = Run(int(index[first]), int(index[last]), node, float(gpus[first]))
        joined = next(
            (
                i
                for i in range(len(track.runs) - 1, max(-1, len(track.runs) - 5), -1)
                if (r := track.runs[i]).node == node and r.gpus == run.gpus and r.last == run.first - 1
            ),
            None,
        )
        if joined is None:
            track.runs.append(run)
        else:
            track.runs[joined] = Run(track.runs[joined].first, run.last, node, run.gpus)


#: The most steps the cluster is judged at over a span: a week of minutes. A longer span is judged at a
#: coarser step (a month at 5 minutes), so that its memory follows the nodes and pods, not the span.
MAX_STEPS = 7 * 24 * 60


@dataclass(frozen=True)
class ClusterReading:
    """What scheduling.judge() judges: kube-state-metrics' cluster over a span, its GPU pods' owners and kinds,
    and where each kind belongs."""

    history: ClusterHistory
    owners: dict[PodKey, Owner]
    pools: Pools


def read_cluster(
    reader: ClusterReader,
    owners: OwnerReader,
    span: tuple[float, float, float],
    pools: Pools,
    models: dict[str, str] | None = None,
) -> ClusterReading | None:
    """The cluster over `span` (start, end, step: unix seconds) as a store says it: kube-state-metrics' nodes
    and GPU pods through `reader`, the pods' owners and kinds through `owners`; None where no pod asked for a
    GPU. A report reads it once over its span, the live analyzer over its window each minute."""
    start, end, step = span
    history = reader.read(start, end, step, models)
    if not history.pods:
        return None
    return ClusterReading(history, owners.read(history.pods, end, end - start), pools)


def judged_grid(start: float, end: float, step: float) -> tuple[float, float, float]:
    """The grid the cluster is judged on over a span read at `step`: the same where it has at most MAX_STEPS
    steps, else a whole multiple of `step` that fits, its end the last step within the span."""
    steps = (end - start) / step + 1
    coarser = step * math.ceil(steps / MAX_STEPS)
    return start, start + math.floor((end - start) / coarser) * coarser, coarser
