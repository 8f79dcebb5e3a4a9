"""Showback: what each workload's GPUs cost day by day, how much of that time worked, and what was wasted;
summed by team, namespace, workload and GPU model (docs/showback.md).

A charge is one workload's devices of one model on one UTC day. Its device-hours are the time its pods held them
(each verdict's days: history.Ledger.day_uses(), from the samples of its GPUs), its cost those hours at the
device's price (catalog.device_price: a MIG instance costs its share of its GPU), its worked hours the time the
GPUs worked (activity) where an activity signal was read, and its waste the verdicts' own. GPUs no pod holds are
charged to NO_POD: capacity paid for that nobody used, what a FinOps team calls idle cost.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpulens.analyzer.judging.classify import NO_POD, Verdict
from gpulens.analyzer.outputs.summary import group_of
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
    #: What its hours were read from (FROM_SAMPLES).
    source: str = FROM_SAMPLES

    @property
    def used_share(self) -> float | None:
        """Share of its judged time its devices worked; None where no activity signal was read."""
        return self.worked_gpu_hours / self.judged_gpu_hours if self.judged_gpu_hours > 0 else None


@dataclass
class _Pending:
    units: set[str] = field(default_factory=set)
    seconds: float = 0.0
    judged: float = 0.0
    worked: float = 0.0
    wasted: float = 0.0
    wasted_cost: float = 0.0


def charges(verdicts: Iterable[Verdict], prices: dict[str, float] | None = None) -> list[Charge]:
    """The span verdicts' days as charges, by day, then workload and model."""
    pending: dict[tuple[str, str, str], tuple[Verdict, _Pending]] = {}
    for v in verdicts:
        for day in v.days:
            _, book = pending.setdefault((day.day, v.workload, v.gpu_model), (v, _Pending()))
            book.units.add(v.unit)
            book.seconds += day.gpu_seconds
            book.judged += day.judged_gpu_seconds
            book.worked += day.worked_gpu_seconds
            book.wasted += day.wasted_gpu_seconds
            book.wasted_cost += day.wasted_cost
    out = []
    for (day_name, workload, model), (v, book) in sorted(pending.items()):
        price = device_price(model, prices)
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

    @property
    def used_share(self) -> float | None:
        return self.worked_gpu_hours / self.judged_gpu_hours if self.judged_gpu_hours > 0 else None

    def rounded(self) -> ShowbackSum:
        return ShowbackSum(
            self.key,
            round(self.gpu_hours, 3),
            round(self.judged_gpu_hours, 3),
            round(self.worked_gpu_hours, 3),
            round(self.wasted_gpu_hours, 3),
            round(self.cost, 2),
            round(self.wasted_cost, 2),
            self.first_day,
            self.last_day,
        )


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
    return [s.rounded() for s in sorted(sums.values(), key=lambda s: (-s.cost, s.key))]


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
