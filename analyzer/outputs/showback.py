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
from dataclasses import dataclass, field, fields, replace

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

    @property
    def used_share(self) -> float | None:
        """Share of its judged time its devices worked; None where no activity signal was read."""
        return self.worked_gpu_hours / self.judged_gpu_hours if self.judged_gpu_hours > 0 else None


#: The funnel's fields (history.FUNNEL), as Charge and ShowbackSum name their hours.
FUNNEL = ("busy", "sm_active", "flop")


@dataclass
class _Pending:
    units: set[str] = field(default_factory=set)
    seconds: float = 0.0
    judged: float = 0.0
    worked: float = 0.0
    wasted: float = 0.0
    wasted_cost: float = 0.0
    funnel: dict[str, list[float]] = field(default_factory=lambda: {name: [0.0, 0.0] for name in FUNNEL})

    def hours(self, name: str, part: int) -> float:
        """A funnel field's hours read over (part 0) or shown (part 1)."""
        return round(self.funnel[name][part] / 3600, 6)


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
            for name, (read, shown) in day.funnel.items():
                book.funnel[name][0] += read
                book.funnel[name][1] += shown
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
                busy_read_hours=book.hours("busy", 0),
                busy_hours=book.hours("busy", 1),
                sm_active_read_hours=book.hours("sm_active", 0),
                sm_active_hours=book.hours("sm_active", 1),
                flop_read_hours=book.hours("flop", 0),
                flop_hours=book.hours("flop", 1),
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
        numbers = (f.name for f in fields(self) if f.type == "float")
        return replace(self, **{name: round(getattr(self, name), places[name]) for name in numbers})


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
