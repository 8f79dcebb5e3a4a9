"""Each change a workload went through over a span, found in what Kubernetes says of it rather than declared:
its replicas (a Deployment's or a StatefulSet's spec, where no autoscaler sets them) and its autoscaler's bounds
(an HPA's, KEDA's among them, min and max replicas), from kube-state-metrics' series on a step grid
(analyzer/inputs/cluster.py: ClusterReader.workloads()).

A change is one event per workload and what changed, not one per step: the steps of a scale done in several
commands, or of a controller walking to its new value, each within change_settle_seconds of the one before, are
one change from the value before the first to the value after the last; steps that end where they began are
none. A series that is absent for a while (kube-state-metrics restarting, a workload deleted) changes nothing by
its absence. The replicas of a workload an autoscaler targets move with its load: they are the autoscaler's, and
only its bounds are changes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from gpulens.analyzer.inputs.cluster import WorkloadHistory

#: What a change changed: a workload's replicas, its autoscaler's least or most replicas, the GPUs each of its pods
#: holds (how many, which model, which MIG slice: a resized request, a move to another pool or to a slice), or
#: a notebook's pod that ended with no controller to say so (a JupyterHub server culled).
Changed = Literal["replicas", "autoscaler_min_replicas", "autoscaler_max_replicas", "gpus_per_pod", "ended"]


@dataclass(frozen=True)
class Change:
    """One change a workload went through (docs/changes.md)."""

    namespace: str
    #: The workload as reports name it: namespace/Kind/name (Verdict.workload).
    workload: str
    what: Changed
    #: A count (replicas, bounds), or in words the GPUs each pod held ("1 x NVIDIA A100-SXM4-80GB"; "none" once
    #: a notebook's pod ended).
    before: float | str
    after: float | str
    #: The first step seen at a new value, and the last (unix seconds): a change made in one step has both the
    #: same; the true moment lies within the step before the first (kube-state-metrics' scrape interval).
    start: float
    end: float
    #: The series it was read from.
    source: str

    @property
    def fewer(self) -> bool | None:
        """Whether it cut what the workload holds (fewer replicas or bounds, a notebook ended), more (False),
        or neither is known from the change alone (None: another GPU, whose cost says)."""
        if self.what == "ended":
            return True
        if isinstance(self.before, str) or isinstance(self.after, str):
            return None
        return self.after < self.before

    def values(self) -> str:
        """What it changed from and to, in words: "4 -> 2", "1 x NVIDIA A100-SXM4-80GB -> 1 x ... MIG 3g.40gb"."""
        return " -> ".join(v if isinstance(v, str) else f"{v:g}" for v in (self.before, self.after))


#: A series on a step grid: its (unix seconds, value) points where it has one.
Points = Sequence[tuple[float, float]]


def steps_of(points: Points, settle: float) -> list[tuple[float, float, float, float]]:
    """The changes in one series' `points`, in time order, as (before, after, start, end): its value changes,
    those within `settle` seconds of the one before merged into one."""
    out: list[tuple[float, float, float, float]] = []
    open_change: list[float] | None = None  # before, after, start, end
    for (_, previous), (at, value) in zip(points, points[1:], strict=False):
        if value == previous:
            continue
        if open_change is not None and at - open_change[3] <= settle:
            open_change[1], open_change[3] = value, at
            continue
        if open_change is not None and open_change[0] != open_change[1]:
            out.append((open_change[0], open_change[1], open_change[2], open_change[3]))
        open_change = [previous, value, at, at]
    if open_change is not None and open_change[0] != open_change[1]:
        out.append((open_change[0], open_change[1], open_change[2], open_change[3]))
    return out


def changes(
    history: WorkloadHistory, settle: float, among: Collection[str] | None = None, source: str = "kube-state-metrics"
) -> list[Change]:
    """Every change in `history` (ClusterReader.workloads()), in time order (then by workload): each workload's
    replicas, but those an autoscaler targets, and each autoscaler's bounds; of the workloads `among` only (as
    Verdict.workload names them: those whose pods held GPUs), where given."""
    autoscaled = {(namespace, kind, name) for namespace, kind, name, _, _ in history.autoscalers}
    found: list[Change] = []
    for namespace, kind, name, points in history.replicas:
        if (namespace, kind, name) in autoscaled:
            continue
        workload = f"{namespace}/{kind}/{name}"
        series = "kube_deployment_spec_replicas" if kind == "Deployment" else "kube_statefulset_replicas"
        for before, after, start, end in steps_of(points, settle):
            found.append(Change(namespace, workload, "replicas", before, after, start, end, f"{source}: {series}"))
    for namespace, kind, name, least, most in history.autoscalers:
        workload = f"{namespace}/{kind}/{name}"
        bounds: tuple[tuple[Changed, Points, str], ...] = (
            ("autoscaler_min_replicas", least, "kube_horizontalpodautoscaler_spec_min_replicas"),
            ("autoscaler_max_replicas", most, "kube_horizontalpodautoscaler_spec_max_replicas"),
        )
        for what, bound, series in bounds:
            for before, after, start, end in steps_of(bound, settle):
                found.append(Change(namespace, workload, what, before, after, start, end, f"{source}: {series}"))
    kept = [c for c in found if among is None or c.workload in among]
    return sorted(kept, key=lambda c: (c.start, c.workload, c.what))


@dataclass(frozen=True)
class PodSpell:
    """One pod's time holding GPUs as its samples show it: its workload, what it is (kinds.py), the GPUs it held
    in words ("1 x NVIDIA H100 80GB HBM3"), and its first and last sample (unix seconds)."""

    namespace: str
    workload: str
    kind: str
    held: str
    first: float
    last: float


#: Where GPU changes are read from.
HELD_SOURCE = "the GPU series: the GPUs each pod held"


def held_changes(spells: Sequence[PodSpell], settle: float, span_end: float, known: Collection[str]) -> list[Change]:
    """The changes in the GPUs each workload's pods held, found in `spells`: a pod that starts on other GPUs
    than the workload's pods before it is a change, over its transition: from the new pod's first sample (or the
    old pods' last, where they ended before it) to the later of the two (a rolling update is one change);
    transitions within `settle` of the one before are one change, and a
    change that ends where it began is none. And each notebook pod whose samples end `settle` or more before
    `span_end` with none after it ("ended": a culled server no controller reports), but those of workloads in
    `known` (a StatefulSet's replicas say it already)."""
    by_workload: dict[str, list[PodSpell]] = {}
    for spell in spells:
        by_workload.setdefault(spell.workload, []).append(spell)
    found: list[Change] = []
    for workload, pods in by_workload.items():
        pods.sort(key=lambda p: (p.first, p.held))
        namespace, current = pods[0].namespace, pods[0].held
        steps: list[tuple[str, str, float, float]] = []  # before, after, start, end
        for pod in pods[1:]:
            if pod.held == current:
                continue
            # The transition: from the new pod's start, or the old ones' end where they ended before it (a gap
            # between a pod deleted and its successor), to the later of the two.
            old = max((p.last for p in pods if p.held == current and p.first <= pod.first), default=pod.first)
            start, end = min(pod.first, old), max(pod.first, old)
            if steps and start - steps[-1][3] <= settle:
                before, _, began, was = steps[-1]
                steps[-1] = (before, pod.held, began, max(was, end))
            else:
                steps.append((current, pod.held, start, end))
            current = pod.held
        found += [
            Change(namespace, workload, "gpus_per_pod", before, after, start, end, HELD_SOURCE)
            for before, after, start, end in steps
            if before != after
        ]
        last = pods[-1]
        if last.kind == "notebook" and workload not in known and span_end - max(p.last for p in pods) >= settle:
            ended = max(p.last for p in pods)
            found.append(Change(namespace, workload, "ended", last.held, "none", ended, ended, HELD_SOURCE))
    return sorted(found, key=lambda c: (c.start, c.workload, c.what))
