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

#: What a change changed: a workload's replicas, or its autoscaler's least or most replicas.
Changed = Literal["replicas", "autoscaler_min_replicas", "autoscaler_max_replicas"]


@dataclass(frozen=True)
class Change:
    """One change a workload went through (docs/changes.md)."""

    namespace: str
    #: The workload as reports name it: namespace/Kind/name (Verdict.workload).
    workload: str
    what: Changed
    before: float
    after: float
    #: The first step seen at a new value, and the last (unix seconds): a change made in one step has both the
    #: same; the true moment lies within the step before the first (kube-state-metrics' scrape interval).
    start: float
    end: float
    #: The series it was read from.
    source: str


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
