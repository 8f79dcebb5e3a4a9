"""Showback: what each workload's GPUs cost day by day, how much of that time worked, and what was wasted;
summed by team, namespace, workload and GPU model (docs/showback.md).

A charge is one workload's devices of one model on one UTC day. Its device-hours are the time its pods held them
(each verdict's days: history.Ledger.day_uses(), from the samples of its GPUs), its cost those hours at the
device's price (catalog.device_price: a MIG instance costs its share of its GPU), its worked hours the time the
GPUs worked (activity) where an activity signal was read, and its waste the verdicts' own. GPUs no pod holds are
charged to NO_POD: capacity paid for that nobody used, what a FinOps team calls idle cost.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gpulens.analyzer.judging.classify import NO_POD, Verdict
from gpulens.analyzer.outputs.summary import NO_TEAM, group_of
from gpulens.core.catalog import device_price, model_info

#: The ways charges are summed, in the order reports show them.
DIMENSIONS = ("team", "namespace", "owner", "gpu_model")
#: Where a charge's device-hours were read from.
FROM_SAMPLES = "gpu samples"


@dataclass(frozen=True)
class Charge:
    """One workload's devices of one GPU model on one UTC day. Hours are device-hours (a GPU's or a MIG
    instance's each); money is in the prices' currency (USD unless the price file says otherwise)."""

    day: str
    namespace: str
    #: The workload as reports name it (Verdict.workload: namespace/Kind/name), its kind, name and team.
    workload: str
    owner_kind: str
    owner: str
    team: str
    workload_kind: str
    gpu_model: str
    #: Units (pods, or GPUs no pod holds) that held its devices that day.
    pods: int
    gpu_hours: float
    #: Of those, the hours with an activity signal, and the hours they worked: worked / judged is its use.
    judged_gpu_hours: float
    worked_gpu_hours: float
    wasted_gpu_hours: float
    #: A device-hour's price: its GPU's, times its share for a MIG instance.
    price_per_hour: float
    cost: float
    wasted_cost: float
    #: The efficiency funnel (docs/showback.md): per field, the device-hours it was read over and the device-hours
    #: it shows of them: a kernel ran (utilization), the SMs were active (profiling fields), and the tensor FLOPs
    #: delivered of the peak (OFU: tensor activity x SM clock over its maximum).
    busy_read_hours: float = 0.0
    busy_hours: float = 0.0
    sm_active_read_hours: float = 0.0
    sm_active_hours: float = 0.0
    flop_read_hours: float = 0.0
    flop_hours: float = 0.0
    #: What its hours were read from (FROM_SAMPLES).
    source: str = FROM_SAMPLES
    #: The GPU-hours kube-state-metrics says its pods requested that day while on a node: what the cluster
    #: allocated, to check gpu_hours against: whole GPUs, or a MIG instance's (nvidia.com/mig-<profile>) each a
    #: device. None where its requests were not read, and for GPUs no pod holds.
    requested_gpu_hours: float | None = None
    #: Of gpu_hours, those on nodes OpenCost prices (its node_gpu_hourly_cost, averaged over the span), and what
    #: OpenCost charges for them (a MIG instance at its share); None where it prices none of its nodes.
    opencost_gpu_hours: float | None = None
    opencost_cost: float | None = None

    @property
    def used_share(self) -> float | None:
        """Share of its judged time its devices worked; None where no activity signal was read."""
        return self.worked_gpu_hours / self.judged_gpu_hours if self.judged_gpu_hours > 0 else None


#: The funnel's fields (history.FUNNEL), as Charge and ShowbackSum name their hours.
FUNNEL = ("busy", "sm_active", "flop")


@dataclass
class _Pending:
    units: set[str] = field(default_factory=set)
    pods: set[tuple[str, str]] = field(default_factory=set)
    #: Device-seconds by node, for OpenCost's prices by node.
    by_node: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    judged: float = 0.0
    worked: float = 0.0
    wasted: float = 0.0
    wasted_cost: float = 0.0
    funnel: dict[str, list[float]] = field(default_factory=lambda: {name: [0.0, 0.0] for name in FUNNEL})

    def hours(self, name: str, part: int) -> float:
        """A funnel field's hours read over (part 0) or shown (part 1)."""
        return round(self.funnel[name][part] / 3600, 6)


#: A pod's requested GPU-seconds by UTC day (scheduling.Scheduling.requested).
Requested = Mapping[tuple[str, str], Mapping[str, float]]


def charges(
    verdicts: Iterable[Verdict],
    prices: dict[str, float] | None = None,
    requested: Requested | None = None,
    node_prices: Mapping[str, float] | None = None,
) -> list[Charge]:
    """The span verdicts' days as charges, by day, then workload and model; each checked against what
    kube-state-metrics says its pods `requested` and priced at OpenCost's `node_prices` (USD per GPU-hour by
    node), where those were read."""
    pending: dict[tuple[str, str, str], tuple[Verdict, _Pending]] = {}
    for v in verdicts:
        for day in v.days:
            _, book = pending.setdefault((day.day, v.workload, v.gpu_model), (v, _Pending()))
            book.units.add(v.unit)
            if v.pod:
                book.pods.add((v.namespace, v.pod))
            book.by_node[v.node] = book.by_node.get(v.node, 0.0) + day.gpu_seconds
            book.seconds += day.gpu_seconds
            book.judged += day.judged_gpu_seconds
            book.worked += day.worked_gpu_seconds
            book.wasted += day.wasted_gpu_seconds
            book.wasted_cost += day.wasted_cost
            for name, (read, shown) in day.funnel.items():
                book.funnel[name][0] += read
                book.funnel[name][1] += shown
    out = []
    for (day_name, workload, model), (v, book) in sorted(pending.items()):
        price = device_price(model, prices)
        asked = None
        if requested is not None and book.pods:
            asked = round(sum(requested.get(pod, {}).get(day_name, 0.0) for pod in book.pods) / 3600, 6)
        priced = {node: seconds for node, seconds in book.by_node.items() if node in (node_prices or {})}
        share = price / model_info(model, prices).price_per_hour  # a MIG instance's share of its GPU
        opencost = sum(seconds / 3600 * (node_prices or {})[node] * share for node, seconds in priced.items())
        out.append(
            Charge(
                day_name,
                v.namespace,
                workload,
                v.owner_kind,
                v.owner or v.pod,
                group_of("team")(v),
                v.workload_kind,
                model,
                len(book.units),
                round(book.seconds / 3600, 6),
                round(book.judged / 3600, 6),
                round(book.worked / 3600, 6),
                round(book.wasted / 3600, 6),
                round(price, 6),
                round(book.seconds / 3600 * price, 6),
                round(book.wasted_cost, 6),
                busy_read_hours=book.hours("busy", 0),
                busy_hours=book.hours("busy", 1),
                sm_active_read_hours=book.hours("sm_active", 0),
                sm_active_hours=book.hours("sm_active", 1),
                flop_read_hours=book.hours("flop", 0),
                flop_hours=book.hours("flop", 1),
                requested_gpu_hours=asked,
                opencost_gpu_hours=round(sum(priced.values()) / 3600, 6) if priced else None,
                opencost_cost=round(opencost, 6) if priced else None,
            )
        )
    return out


@dataclass
class ShowbackSum:
    """One group's charges over the span: device-hours held, judged and worked, what they cost, and the waste."""

    key: str
    gpu_hours: float = 0.0
    judged_gpu_hours: float = 0.0
    worked_gpu_hours: float = 0.0
    wasted_gpu_hours: float = 0.0
    cost: float = 0.0
    wasted_cost: float = 0.0
    #: Its first and last day with a charge.
    first_day: str = ""
    last_day: str = ""
    #: The funnel's hours, as Charge's.
    busy_read_hours: float = 0.0
    busy_hours: float = 0.0
    sm_active_read_hours: float = 0.0
    sm_active_hours: float = 0.0
    flop_read_hours: float = 0.0
    flop_hours: float = 0.0
    #: Where kube-state-metrics' requests were read: the GPU-hours its pods requested, and the hours held by the
    #: same charges (what they are checked against). None where none was read.
    requested_gpu_hours: float | None = None
    requested_held_gpu_hours: float | None = None
    #: Where OpenCost priced its nodes: the GPU-hours it priced, what it charges for them, and what gpulens does.
    opencost_gpu_hours: float | None = None
    opencost_cost: float | None = None
    opencost_gpulens_cost: float | None = None

    @property
    def used_share(self) -> float | None:
        return self.worked_gpu_hours / self.judged_gpu_hours if self.judged_gpu_hours > 0 else None

    def funnel(self) -> dict[str, float | None]:
        """Each funnel field's share of the time it was read over (None where it never was): a kernel ran
        (`busy`), the SMs were active (`sm_active`), the peak tensor FLOPs delivered (`flop`, OFU)."""
        out: dict[str, float | None] = {}
        for name in FUNNEL:
            read, shown = getattr(self, f"{name}_read_hours"), getattr(self, f"{name}_hours")
            out[name] = shown / read if read > 0 else None
        return out

    def rounded(self) -> ShowbackSum:
        # Money to the cent, hours to 3.6 s; the funnel's hours to 6 places, so that its shares keep theirs.
        places = {f.name: 2 if "cost" in f.name else 6 if f.name.startswith(FUNNEL) else 3 for f in fields(self)}
        numbers = (f.name for f in fields(self) if f.type in ("float", "float | None"))
        changed: dict[str, Any] = {
            name: None if getattr(self, name) is None else round(getattr(self, name), places[name]) for name in numbers
        }
        return replace(self, **changed)


def _key(c: Charge, dimension: str) -> str:
    if dimension == "team":
        return c.team
    if dimension == "namespace":
        return c.namespace or NO_POD
    if dimension == "owner":
        return c.workload
    return c.gpu_model


def showback_by(rows: Iterable[Charge], dimension: str) -> list[ShowbackSum]:
    """The charges summed by `dimension` (one of DIMENSIONS), costliest first."""
    sums: dict[str, ShowbackSum] = {}
    for c in rows:
        key = _key(c, dimension)
        total = sums.setdefault(key, ShowbackSum(key, first_day=c.day, last_day=c.day))
        total.gpu_hours += c.gpu_hours
        total.judged_gpu_hours += c.judged_gpu_hours
        total.worked_gpu_hours += c.worked_gpu_hours
        total.wasted_gpu_hours += c.wasted_gpu_hours
        total.cost += c.cost
        total.wasted_cost += c.wasted_cost
        total.first_day, total.last_day = min(total.first_day, c.day), max(total.last_day, c.day)
        for name in FUNNEL:
            for part in (f"{name}_read_hours", f"{name}_hours"):
                setattr(total, part, getattr(total, part) + getattr(c, part))
        if c.requested_gpu_hours is not None:
            total.requested_gpu_hours = (total.requested_gpu_hours or 0.0) + c.requested_gpu_hours
            total.requested_held_gpu_hours = (total.requested_held_gpu_hours or 0.0) + c.gpu_hours
        if c.opencost_gpu_hours is not None and c.opencost_cost is not None:
            total.opencost_gpu_hours = (total.opencost_gpu_hours or 0.0) + c.opencost_gpu_hours
            total.opencost_cost = (total.opencost_cost or 0.0) + c.opencost_cost
            total.opencost_gpulens_cost = (total.opencost_gpulens_cost or 0.0) + c.opencost_gpu_hours * c.price_per_hour
    return [s.rounded() for s in sorted(sums.values(), key=lambda s: (-s.cost, s.key))]


#: A difference under this share of the larger figure is agreement: rounding, a scrape's edge (tools).
AGREE_SHARE = 0.005


def unsampled(requested: Requested | None, verdicts: Iterable[Verdict]) -> dict[tuple[str, str], float]:
    """The pods kube-state-metrics says requested GPUs that no GPU series of the span names, and the GPU-hours
    they requested: allocated time no charge holds."""
    seen = {(v.namespace, v.pod) for v in verdicts if v.pod}
    return {
        pod: round(sum(days.values()) / 3600, 6) for pod, days in sorted((requested or {}).items()) if pod not in seen
    }


def checks(rows: Iterable[Charge], unseen: Mapping[tuple[str, str], float] | None = None) -> list[str]:
    """What the charges were checked against, and by how much they disagree, in words: kube-state-metrics'
    requests (what the cluster allocated) against the hours the GPU series held, and the pods it says
    requested GPUs that no GPU series names (`unseen`: unsampled()); OpenCost's prices against gpulens'. Each
    the fleet's, then the groups (teams, else namespaces) that disagree most."""
    rows = list(rows)
    if not rows:
        return []
    dimension = "team" if any(c.team not in (NO_POD, NO_TEAM) for c in rows) else "namespace"
    [fleet] = showback_by([replace(c, team="fleet", namespace="fleet") for c in rows], dimension)
    groups = showback_by(rows, dimension)
    out = []
    if fleet.requested_gpu_hours is None:
        out.append(
            "Requests: kube-state-metrics' GPU requests were not read (no kube_pod_container_resource_requests for "
            "nvidia.com/gpu): the hours are the GPU series' alone."
        )
    else:
        asked, held = fleet.requested_gpu_hours, fleet.requested_held_gpu_hours or 0.0
        worst = sorted(
            (
                s
                for s in groups
                if s.requested_gpu_hours is not None
                and _differ(s.requested_gpu_hours, s.requested_held_gpu_hours or 0.0)
            ),
            key=lambda s: (-abs((s.requested_gpu_hours or 0.0) - (s.requested_held_gpu_hours or 0.0)), s.key),
        )[:3]
        if not _differ(asked, held):
            out.append(
                f"Requests: kube-state-metrics' GPU requests agree: {asked:,.1f} GPU-h requested, {held:,.1f} held."
            )
        else:
            by = "; ".join(
                f"{s.key} {(s.requested_gpu_hours or 0.0) - (s.requested_held_gpu_hours or 0.0):+,.1f}" for s in worst
            )
            out.append(
                f"Requests: the pods requested {asked:,.1f} GPU-h on their nodes where the GPU series saw {held:,.1f} "
                f"held: {asked - held:+,.1f} GPU-h ({(asked - held) / max(held, 1e-9):+.1%}); more requested than "
                "held is time no exporter sampled (an exporter down, GPUs not attributed to their pods), less is "
                f"time a pod held GPUs without a request (by {dimension}: {by})."
            )
    if unseen:
        named = ", ".join(f"{namespace}/{pod}" for namespace, pod in list(unseen)[:5])
        more = f" and {len(unseen) - 5:,} more" if len(unseen) > 5 else ""
        out.append(
            f"Requests: {len(unseen):,} pod{'s' if len(unseen) != 1 else ''} requested {sum(unseen.values()):,.1f} "
            f"GPU-h that no GPU series names, so no charge holds ({named}{more}): their nodes' exporters were not "
            "read, or their GPUs were not attributed to them."
        )
    if fleet.opencost_cost is not None:
        theirs, ours = fleet.opencost_cost, fleet.opencost_gpulens_cost or 0.0
        hours = fleet.opencost_gpu_hours or 0.0
        if not _differ(theirs, ours):
            out.append(f"OpenCost: its prices agree: ${theirs:,.2f} for the {hours:,.1f} GPU-h on nodes it prices.")
        else:
            out.append(
                f"OpenCost: it prices the {hours:,.1f} GPU-h on nodes it prices at ${theirs:,.2f}, gpulens at "
                f"${ours:,.2f}: {theirs - ours:+,.2f} ({(theirs - ours) / max(ours, 1e-9):+.1%}); to bill at one "
                "price, give gpulens OpenCost's prices (--prices) or OpenCost gpulens' (docs/showback.md)."
            )
    return out


def _differ(a: float, b: float) -> bool:
    return abs(a - b) > AGREE_SHARE * max(abs(a), abs(b), 1e-9)


def price_sources(rows: Iterable[Charge], prices: dict[str, float] | None) -> dict[str, str]:
    """Each GPU model's price per GPU-hour and where it came from, as the assumptions of a report say it."""
    out = {}
    for model in sorted({c.gpu_model for c in rows}):
        parent = model.partition(" MIG ")[0]
        named = any(key in model for key in prices or {})
        price = model_info(model, prices).price_per_hour
        out[model] = f"${price:.2f}/GPU-h ({'--prices' if named else 'the catalogue'})" + (
            f", its share of {parent}: ${device_price(model, prices):.2f}/h" if parent != model else ""
        )
    return out
