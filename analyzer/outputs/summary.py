"""Waste summed the ways budgets are kept: by bottleneck class, namespace, workload (owner) and team.

Every report format and the live service sum the verdicts' own figures here, so a total in the HTML
report, the JSON and the terminal table is the same sum of the same verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpulens.analyzer.judging.classify import NO_POD, Verdict
from gpulens.core.bottlenecks import WASTEFUL

#: The ways waste is summed, in the order reports show them.
DIMENSIONS = ("class", "namespace", "owner", "team")
NO_TEAM = "(no team)"


@dataclass
class WasteSum:
    """One group's verdicts: how many (pods, and GPUs no pod holds), their sampled GPU-hours, and the
    GPU-hours and money wasted."""

    key: str
    pods: int = 0
    gpu_hours: float = 0.0
    wasted_gpu_hours: float = 0.0
    wasted_cost: float = 0.0

    def rounded(self) -> WasteSum:
        return WasteSum(
            self.key, self.pods, round(self.gpu_hours, 3), round(self.wasted_gpu_hours, 3), round(self.wasted_cost, 2)
        )


def _sampled_hours(v: Verdict) -> float:
    return v.window_seconds * v.coverage * len(v.gpus) / 3600


def _parts(dimension: str) -> Callable[[Verdict], Iterable[tuple[str, float, float, float]]]:
    """For a verdict, its (key, sampled GPU-hours, wasted GPU-hours, cost) in the dimension."""
    if dimension == "class":
        return lambda v: [
            (name, part.share * _sampled_hours(v), part.wasted_gpu_seconds / 3600, part.wasted_cost)
            for name, part in v.by_class.items()
            if name in WASTEFUL  # healthy headroom and unjudged time are no cause's waste
        ]
    key = group_of(dimension)
    return lambda v: [(key(v), _sampled_hours(v), v.wasted_gpu_seconds / 3600, v.wasted_cost)]


def group_of(dimension: str) -> Callable[[Verdict], str]:
    """A verdict's group in `dimension` (namespace, owner, team or gpu_model): GPUs no pod holds are NO_POD's, a
    pod without a team label NO_TEAM's."""
    return {
        "namespace": lambda v: v.namespace or NO_POD,
        "owner": lambda v: v.workload,
        "team": lambda v: v.team or (NO_POD if not v.pod else NO_TEAM),
        "gpu_model": lambda v: v.gpu_model,
    }[dimension]


def waste_by(verdicts: Iterable[Verdict], dimension: str) -> list[WasteSum]:
    """The verdicts' waste summed by `dimension` (one of DIMENSIONS), most wasted first."""
    sums: dict[str, WasteSum] = {}
    for v in verdicts:
        for key, hours, wasted, cost in _parts(dimension)(v):
            total = sums.setdefault(key, WasteSum(key))
            total.pods += 1
            total.gpu_hours += hours
            total.wasted_gpu_hours += wasted
            total.wasted_cost += cost
    return [s.rounded() for s in sorted(sums.values(), key=lambda s: (-s.wasted_gpu_hours, s.key))]
