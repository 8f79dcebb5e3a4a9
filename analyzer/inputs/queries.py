"""What a read asks: each range query with the key of the part it is read in and what places its answer (Query,
ValueQuery), and its bare form (Bare): the raw series with only the labels that place them, reduced here as the
PromQL would (max or group by), which costs a store less to answer over a long span than the aggregation."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import numpy as np

from gpulens.analyzer.inputs.store import counted_times, series_key, series_points
from gpulens.core import metrics as m
from gpulens.core import mixin
from gpulens.core import trace as tr
from gpulens.core.activity import HIGH_BOUND, IDLE_BOUND, LOW_BOUND

#: A GPU's pod is read from identity samples at most this many scrape intervals old: a live series never is
#: older than one; the half more allows a late scrape. A store with staleness markers (Prometheus scraping)
#: ends a gone pod's series at its next scrape anyway; one without (backfilled history) would carry it for
#: its lookback, five minutes, and the GPU with it.
IDENTITY_FRESH = 1.5
#: A column's source (a gauge's spec, a dcgm-exporter field), in _judged.
T = TypeVar("T")
#: A query that reads at least this many steps is asked bare (Bare): its labels (a dozen target labels a
#: series through kube-prometheus) then weigh less than its points. A live cycle's few steps are asked
#: aggregated, so that its answers carry only the labels that place them.
BARE_STEPS = 60
#: The labels that key a gpulens series' row (gpulens_gpu).
GPU_BY = ("instance", "uuid")
#: The activity histogram's count increase per row (read once, not a trace column: "_" matrices are not).
SHAPE_COUNT = "_activity_count"
#: The SHAPE columns that are a histogram bucket's share of the samples, and the bucket's bound.
SHAPE_BUCKETS = {"activity_idle_ratio": IDLE_BOUND, "activity_low_ratio": LOW_BOUND, "activity_high_ratio": HIGH_BOUND}


def part_key(column: str) -> str:
    """What ties a query to the others that must be read with it: the column it writes (gpulens' and
    dcgm-exporter's queries of a column write one matrix, cleared as one), and the activity histogram's
    count with its buckets (their ratios are taken after a read)."""
    return SHAPE_COUNT if column in SHAPE_BUCKETS else column


@dataclass(frozen=True)
class Query:
    """A range query of a read: the key of the queries read with it (part_key), the family of series it
    reads (gpulens, dcgm, pods), its expression, what places its answer in a part's matrices (part, answer
    -> the points placed), and its weight: what it costs the store per GPU, relative to a gauge's query."""

    key: str
    family: str
    expr: str
    place: Callable[[int, list[dict]], int]
    weight: float
    #: What a read of at least BARE_STEPS steps asks instead, each with what consumes its answer (None: `expr`).
    bare: list[tuple[str, Callable[[int, list[dict]], int]]] | None = None


def parts_of(queries: list[Query], parts: int) -> dict[str, int]:
    """Each query key's part of `parts`: the heaviest keys first (ties: the first asked), each to the part
    that weighs least so far (ties: the lowest), so that each part costs the store about as much. A key
    weighs what its heaviest family's queries do: a GPU reports through gpulens' exporter or dcgm-exporter,
    and a fleet mostly through one."""
    by_family: dict[str, dict[str, float]] = {}
    for query in queries:
        family = by_family.setdefault(query.key, {})
        family[query.family] = family.get(query.family, 0.0) + query.weight
    weights = {key: max(families.values()) for key, families in by_family.items()}
    load = [0.0] * parts
    part_of: dict[str, int] = {}
    for key in sorted(weights, key=lambda k: -weights[k]):
        part_of[key] = min(range(parts), key=lambda p: (load[p], p))
        load[part_of[key]] += weights[key]
    return part_of


def newest_last(identity: list[dict]) -> list[dict]:
    """An identity answer with the series that start later placed later, so that where two pods' series
    overlap on a GPU the newer pod wins: a pod that ended without a staleness marker (its exporter gone,
    backfilled data) lingers for the store's lookback (5 minutes in Prometheus) beside the one after it.
    Series that all start with the range (a range read after the handover) are told apart by their end:
    the lingering one ends first."""
    return sorted(
        identity,
        key=lambda series: (
            (float(series["values"][0][0]), float(series["values"][-1][0])) if len(series["values"]) else (0, 0)
        ),
    )


def scaled_answer(answer: list[dict], scale: float) -> list[dict]:
    """The answer with every value times `scale`: unit factors are applied here, not in PromQL, where
    Prometheus evaluates arithmetic at every step of every series (a quarter to a third of the cost of
    the live analyzer's shape-rate queries in benchmarks/live_prometheus.py's query log)."""
    if scale == 1.0:
        return answer
    with np.errstate(over="ignore"):  # a value too large for the factor is infinite, as PromQL's product is
        return [{"metric": series["metric"], "values": series_points(series) * (1.0, scale)} for series in answer]


class ValueQuery(NamedTuple):
    """A query of gpulens' exporter's values: its PromQL, the column it fills (or the column each series'
    labels name), the weight that adds series up (None: placed as they are), its bare form, and the factor
    its values are multiplied by when placed."""

    expr: str
    column: str
    weight: Callable[[dict], float] | None
    bare: Bare
    scale: float = 1.0


def keep_answer(answers: list[list[dict]]) -> Callable[[int, list[dict]], int]:
    """A consumer that keeps its answer in `answers` for a later one (placing no point)."""

    def keep(part: int, answer: list[dict]) -> int:
        answers.append(answer)
        return 0

    return keep


def to_each(consumers: list[Callable[[list[dict]], int]]) -> Callable[[list[dict]], int]:
    """One answer handed to each of `consumers` in turn: the points they placed."""
    return lambda answer: sum(consume(answer) for consume in consumers)


def _max_at_each_time(points: np.ndarray) -> np.ndarray:
    """The (t, value) points of several series as one: the largest value at each time (NaN where all are),
    as PromQL's max takes it."""
    points = points[np.argsort(points[:, 0], kind="stable")]
    starts = np.flatnonzero(np.r_[True, np.diff(points[:, 0]) != 0])
    return np.column_stack([points[starts, 0], np.fmax.reduceat(points[:, 1], starts)])


@dataclass(frozen=True)
class Bare:
    """A query as a store answers it from its fast path, and how this process makes of that answer what the
    query itself answers. Prometheus evaluates an aggregation, arithmetic or a function of an instant vector
    step by step, making every output series' point at every step: over 15.5 hours of 1,000 GPUs at 30 s,
    `max by (...) (X)` cost Prometheus 2.42 4.7 CPU-s, `X * 0.01` 3.2 and timestamp(X) 29, where X alone
    cost 0.5, and rate(X[2m]) and count_over_time(X[45s]) 0.6 (docs/stores.md). The bare form asks X (or
    rate or increase of X) and takes the max, the factor and the freshness here, on the same values: the
    grid holds what the aggregated query places (tests/test_bare_reads.py reads every family both ways)."""

    expr: str
    #: The labels the query takes the max by; None: placed as answered (the placement adds series up).
    by: tuple[str, ...] | None = None
    #: Keep only the steps whose sample is at most this many seconds old (fresh()), read from a second
    #: answer: count_over_time(expr[fresh]) counts a sample at a step exactly where fresh() keeps it, if the
    #: store shows `expr` there at all (a staleness marker ends it). None: every step the store shows.
    fresh: float | None = None
    #: Every point kept is 1 (PromQL's `group`: an identity, whatever the series' value).
    group: bool = False

    def asked(self, place: Callable[[int, list[dict]], int]) -> list[tuple[str, Callable[[int, list[dict]], int]]]:
        """The bare queries, each with what consumes its answer (in the order asked): `place` gets the
        reduced answer."""
        if self.fresh is None:
            return [(self.expr, lambda part, answer: place(part, self.reduce(answer)))]
        counted: list[list[dict]] = []
        return [
            (f"count_over_time({self.expr}[{round(self.fresh * 1000)}ms])", keep_answer(counted)),
            (self.expr, lambda part, answer: place(part, self.reduce(answer, counted.pop()))),
        ]

    def reduce(self, answer: list[dict], counted: list[dict] | None = None) -> list[dict]:
        """The answer to the aggregated query, from the answer to `expr` (and to its count_over_time where
        `fresh`): a series per value of `by` (the labels it has), each point the max of those series' at
        its time."""
        if self.by is None:
            return answer
        fresh_at = None if counted is None else {series_key(c["metric"]): counted_times(c) for c in counted}
        groups: dict[tuple[str, ...], list[np.ndarray]] = {}
        for series in answer:
            points = series_points(series)
            labels = series["metric"]
            if fresh_at is not None:
                points = points[np.isin(points[:, 0], fresh_at.get(series_key(labels), ()))]
            if self.group:  # a new array: the answer may feed another consumer (SeriesReader.read)
                points = np.column_stack([points[:, 0], np.ones(len(points))])
            groups.setdefault(tuple(labels.get(name, "") for name in self.by), []).append(points)
        out = []
        for key, members in groups.items():
            points = members[0] if len(members) == 1 else _max_at_each_time(np.concatenate(members))
            if not len(points):
                continue
            out.append(
                {"metric": {name: value for name, value in zip(self.by, key, strict=True) if value}, "values": points}
            )
        return out


def judged_columns(columns: dict[str, T]) -> dict[str, T]:
    """The columns of `columns` a verdict reads (trace.NOT_JUDGED left out): what a store is asked for."""
    return {column: source for column, source in columns.items() if column not in tr.NOT_JUDGED}


def fresh(selector: str, seconds: float) -> str:
    """`selector` at the steps its newest sample is at most `seconds` old (timestamp(): the sample's own
    time), so that a series a store holds no staleness marker for ends when its samples do, not a lookback
    later."""
    return f"({selector} unless (time() - timestamp({selector})) > {seconds:g})"


def instances_matcher(instances: Iterable[str]) -> str:
    """A label matcher selecting the series of exactly these exporters."""
    return "instance=~" + mixin.promql_string("|".join(re.escape(i) for i in sorted(instances)))


class QueryWriter:
    """What a reader asks a store, written out: the label matchers of each family's series (its job in `config`,
    MixinConfig.exporter and .dcgm, "" any job, with `gpulens_selector` and `dcgm_selector` added, and a shard's
    `instances`), and the PromQL of each signal at `step`: gpulens' values, its clock-event reasons and activity
    shape, the identity series read only while fresh (IDENTITY_FRESH of a family's `intervals`), and each pod's
    CPU and restarts. SeriesReader asks them and places the answers."""

    def __init__(
        self,
        step: float,
        config: mixin.MixinConfig | None = None,
        gpulens_selector: str = "",
        dcgm_selector: str = "",
        intervals: Mapping[str, float] | None = None,
    ):
        self.step = step
        self.config = config or mixin.ANY_JOB
        self.gpulens_selector, self.dcgm_selector = gpulens_selector, dcgm_selector
        #: The exporters read (an instance matcher, SeriesReader.scoped()); "": every one.
        self.instances = ""
        #: Seconds between a family's samples ("gpulens", "dcgm"), where SeriesReader.scrape_interval() measured
        #: them (or a reader before this one: `intervals`).
        self.intervals: dict[str, float] = dict(intervals or {})

    # --- selectors ---------------------------------------------------------------------------------
    def matchers(self, family: str, *extra: str) -> str:
        """The label matchers of a family's series ("gpulens", "dcgm"): its job's, the configured
        selector's, the shard's and `extra`."""
        if family == "gpulens":
            return mixin.matchers(self.config.exporter, self.gpulens_selector, self.instances, *extra)
        return mixin.matchers(self.config.dcgm, self.dcgm_selector, self.instances, *extra)

    def selector(self, name: str, *extra: str) -> str:
        """A gpulens series with the configured selector, the shard's and `extra` matchers."""
        matchers = self.matchers("gpulens", *extra)
        return f"{name}{{{matchers}}}" if matchers else name

    def looked_for(self) -> tuple[str, str]:
        """The GPU series a read looks for, gpulens' and dcgm-exporter's, as a person would query them with the
        selectors in use."""
        dcgm = self.matchers("dcgm")
        return self.selector(m.GPU_INFO.name), f"DCGM_FI_DEV_GPU_UTIL{f'{{{dcgm}}}' if dcgm else ''}"

    def _fresh(self, family: str, selector: str) -> str:
        """`selector` where its newest sample is at most IDENTITY_FRESH of the family's scrape intervals old
        (as it is where the interval was not measured)."""
        interval = self.intervals.get(family)
        return selector if interval is None else fresh(selector, IDENTITY_FRESH * interval)

    def rate_window(self) -> str:
        """The range of rate() and increase(): four steps, and never under a minute (four 15 s scrapes)."""
        return f"{self.rate_seconds():.0f}s"

    def rate_seconds(self) -> float:
        """rate_window() in seconds."""
        return max(4 * self.step, 60.0)

    def _bare_identity(self, family: str, selector: str, by: tuple[str, ...]) -> Bare:
        """The bare form of an identity query: `max` (gpulens) or `group` (dcgm) by `by` of the family's fresh
        selector (_fresh)."""
        interval = self.intervals.get(family)
        return Bare(selector, by, fresh=None if interval is None else IDENTITY_FRESH * interval, group=family == "dcgm")

    def _series_per_gpu(self, column: str) -> float:
        """The series a query of `column` reads per GPU: the clock-event reasons read, the NVLink error
        kinds the column adds up, else one."""
        if column == "clock_event_reasons":
            return float(self.config.throttle_reasons.count("|") + 1)
        kinds = tr.NVLINK_ERROR_RATES.get(column)
        return float(len(kinds)) if kinds else 1.0

    def _gpulens_queries(self) -> list[ValueQuery]:
        """gpulens' value queries."""
        rate_window, by_gpu = self.rate_window(), ", ".join(GPU_BY)

        def highest(inner: str, column: str, scale: float = 1.0) -> ValueQuery:
            # Each answer keeps only the labels that place its values (a GPU: its exporter and uuid): a scrape
            # through kube-prometheus adds a dozen target labels to every series, and once a cycle reads only
            # the newest steps, labels would be most of its bytes.
            return ValueQuery(f"max by ({by_gpu}) ({inner})", column, None, Bare(inner, GPU_BY), scale)

        def errors(kinds: tuple[str, ...]) -> str:
            kinds_matcher = 'type=~"' + "|".join(kinds) + '"'
            return f"rate({self.selector(m.NVLINK_ERRORS.name, kinds_matcher)}[{rate_window}])"

        return [
            *(highest(self.selector(spec.name), column) for column, spec in judged_columns(tr.FROM_GAUGES).items()),
            *(
                highest(f"rate({self.selector(spec.name)}[{rate_window}])", column)
                for column, spec in tr.FROM_RATES.items()
            ),
            # A column's NVLink error kinds add up, a query a column: one series a GPU in each answer. Asked by
            # kind and added up here, the answer held four series a GPU and cost Prometheus a third more
            # (benchmarks/live_prometheus.py, the costliest query of a live cycle).
            *(
                ValueQuery(f"sum by ({by_gpu}) ({errors(kinds)})", column, lambda labels: 1.0, Bare(errors(kinds)))
                for column, kinds in tr.NVLINK_ERROR_RATES.items()
            ),
            *self._clock_event_queries(highest),
            *(highest(inner, column, scale) for column, (inner, scale) in self._shape_queries().items()),
        ]

    def _clock_event_queries(self, highest: Callable[[str, str, float], ValueQuery]) -> list[ValueQuery]:
        """The clock-event reasons as the classifier reads them (thresholds' throttle_reasons_mask): the
        mask where any of its reasons is active at a step, 0 where none is, one series a GPU. Only the
        mask's reasons are read (four of nine by default), and a GPU that reports them but is not
        throttled reads 0 (known), as the exporter input reads it, rather than nothing."""
        mask = self.config.thresholds.throttle_reasons_mask
        if not mask:
            return []
        selector = self.selector(m.CLOCK_EVENT_ACTIVE.name, f'reason=~"{self.config.throttle_reasons}"')
        return [highest(selector, "clock_event_reasons", float(mask))]

    def _shape_queries(self) -> dict[str, tuple[str, float]]:
        """The SHAPE columns (core/trace.py) as PromQL and the factor it is multiplied by: counts per row are
        rates times the step, so that their sum over a window is the number of samples, transitions and
        bursts in it. The histogram's count is read once (into SHAPE_COUNT) and the buckets' increases
        divided by it after the read (_shape_ratios), as PromQL would divide them: each bucket's query no
        longer reads the count again."""
        window = self.rate_window()

        def increase(name: str, *extra: str) -> tuple[str, float]:
            return f"increase({self.selector(name, *extra)}[{window}])", 1.0

        def per_row(name: str) -> tuple[str, float]:
            return f"rate({self.selector(name)}[{window}])", self.step

        return {
            SHAPE_COUNT: increase(m.ACTIVITY.name + "_count"),
            **{
                column: increase(m.ACTIVITY.name + "_bucket", f'le="{bound:g}"')
                for column, bound in SHAPE_BUCKETS.items()
            },
            "activity_transitions": per_row(m.ACTIVITY_TRANSITIONS.name),
            "steady_bursts": per_row(m.STEADY_BURSTS.name),
        }

    def _pod_queries(self) -> list[tuple[str, str]]:
        """Per pod, at each step: CPU used (cAdvisor), its limit (kube-state-metrics, else the CFS quota
        cAdvisor reports), and its containers' restarts (kube-state-metrics' counter: a rise in a window
        is a restart in it)."""

        cadvisor = mixin.matchers(self.config.cadvisor, 'container!=""')
        cpu_limit = mixin.matchers(self.config.kube_state_metrics, 'resource="cpu"')
        restarts = f"{{{self.config.kube_state_metrics}}}" if self.config.kube_state_metrics else ""
        return [
            (
                f'sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{{{cadvisor},container!="POD"}}'
                f"[{self.rate_window()}]))",
                "cpu_usage_cores",
            ),
            (
                f"sum by (namespace, pod) (kube_pod_container_resource_limits{{{cpu_limit}}}) or sum by (namespace, "
                f"pod) (container_spec_cpu_quota{{{cadvisor}}} / container_spec_cpu_period{{{cadvisor}}})",
                "cpu_limit_cores",
            ),
            (f"sum by (namespace, pod) (kube_pod_container_status_restarts_total{restarts})", "restarts_total"),
        ]
