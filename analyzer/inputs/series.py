"""What the analyzer reads from a store, and how it holds it: the range queries for gpulens' series and
for NVIDIA dcgm-exporter's (fleets that run only the GPU Operator get verdicts too), cAdvisor's and
kube-state-metrics' per-pod series, and the step grid the answers are placed on.

The live analyzer (analyzer/inputs/live.py) reads a sliding window through it, and `gpulens report --prometheus`
a span of days, piece by piece (analyzer/runs/span.py). Every fact is read per step, the pod that holds a GPU
included: over a week a GPU passes from pod to pod.

Where a GPU reports through both gpulens' exporter and dcgm-exporter, gpulens' series are used (they hold
the activity shape between scrapes and the topology) and dcgm-exporter's rows for that GPU are dropped.
Which series a deployment's labels hold is configured in core/mixin.py (MixinConfig), the home of every
query the dashboards and alerts make too.
"""

from __future__ import annotations

import collections
import copy
import functools
import hashlib
import itertools
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple, TypeVar, overload

import numpy as np
import pandas as pd

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.inputs.store import Store, counted_times, series_key, series_points
from gpulens.core import catalog, mixin
from gpulens.core import metrics as m
from gpulens.core import trace as tr
from gpulens.core.activity import HIGH_BOUND, IDLE_BOUND, LOW_BOUND
from gpulens.core.topology import GROUPS

#: Steps a cycle reads again before the first it has not read: a scrape that reached the store after the
#: last cycle's query (a slow target, a remote-write queue) changes the newest values it held.
REREAD_STEPS = 2
#: A GPU's pod is read from identity samples at most this many scrape intervals old: a live series never is
#: older than one; the half more allows a late scrape. A store with staleness markers (Prometheus scraping)
#: ends a gone pod's series at its next scrape anyway; one without (backfilled history) would carry it for
#: its lookback, five minutes, and the GPU with it.
IDENTITY_FRESH = 1.5
#: How often the GPUs' models and NVLink topology are read again (SeriesReader.hardware).
HARDWARE_REFRESH_SECONDS = 300.0
#: The parts the live analyzer splits its queries into (Window): a cycle reads the part read least
#: recently, so each is read every four steps (a minute at 15 s) and a cycle reads a quarter of the series.
#: Prometheus' cost of a query grows with the series it reads, not the steps, so a cycle costs it about a
#: quarter; the verdicts then rest on the steps every part has read, three steps (45 s) before the newest
#: (benchmarks/live_prometheus.py, docs/sizing.md).
READ_PARTS = 4
#: The most parts a reader takes: past it a query would be read less than once every 16 steps, and the
#: verdicts would lag as many (and there are not many more queries than that to split).
MAX_READ_PARTS = 16
#: A column's source (a gauge's spec, a dcgm-exporter field), in _judged.
T = TypeVar("T")
#: Range queries asked of the store at once: two keep it evaluating the next while this process decodes
#: and places the last (about 40% of a cycle's time at 10,000 GPUs; benchmarks/live_prometheus.py).
QUERIES_IN_FLIGHT = 2
#: A query that reads at least this many steps is asked bare (_Bare): its labels (a dozen target labels a
#: series through kube-prometheus) then weigh less than its points. A live cycle's few steps are asked
#: aggregated, so that its answers carry only the labels that place them.
BARE_STEPS = 60
#: The labels that key a gpulens series' row (gpulens_gpu).
_GPU_BY = ("instance", "uuid")
#: The activity histogram's count increase per row (read once, not a trace column: "_" matrices are not).
_SHAPE_COUNT = "_activity_count"
#: The SHAPE columns that are a histogram bucket's share of the samples, and the bucket's bound.
_SHAPE_BUCKETS = {"activity_idle_ratio": IDLE_BOUND, "activity_low_ratio": LOW_BOUND, "activity_high_ratio": HIGH_BOUND}
#: A GPU's row key: (its exporter's instance, its uuid); a pod's: (namespace, pod).
Key = tuple[str, str]


def gpulens_gpu(labels: dict) -> Key | None:
    """The row of a gpulens series: its exporter and the GPU's (or MIG instance's) uuid."""
    uuid = labels.get("uuid", "")
    return (labels.get("instance", ""), uuid) if uuid else None


def left_by_a_pod(
    gpu: np.ndarray, ts: np.ndarray, pod: np.ndarray, held_before: np.ndarray, seconds: float
) -> tuple[np.ndarray, np.ndarray]:
    """Which rows (in GPU, time order; `gpu` an index into `held_before`, `pod` a code, 0 for none) are of a GPU no
    pod holds within `seconds` (the rate window) after a pod last held it, and each GPU's newest step a pod held it
    (NaN: none). `held_before`: each GPU's newest such step before these rows. gpulens' rates, its activity
    histogram's increases among them, reach back `seconds` over the pod's samples."""
    held_at = np.where(pod != 0, ts, np.nan)
    first = np.r_[True, gpu[1:] != gpu[:-1]] if len(gpu) else np.zeros(0, dtype=bool)
    seeded = np.where(first & np.isnan(held_at), held_before[gpu], held_at)
    latest = pd.Series(seeded).groupby(gpu).ffill().to_numpy()
    newest = pd.Series(held_at).groupby(gpu).max().reindex(range(len(held_before))).to_numpy()
    return (pod == 0) & (ts - latest < seconds), np.fmax(newest, held_before)


def dcgm_gpu(labels: dict) -> Key | None:
    """The row of a dcgm-exporter series: its exporter and the GPU's UUID, with "/gi<id>" for a MIG
    instance (dcgm-exporter labels an instance with its parent's UUID and its GPU instance id)."""
    uuid = labels.get("UUID", "")
    if not uuid:
        return None
    instance = labels.get("GPU_I_ID", "")
    return (labels.get("instance", ""), f"{uuid}/gi{instance}" if instance else uuid)


def pod_key(labels: dict) -> Key | None:
    pod = labels.get("pod", "")
    return (labels.get("namespace", ""), pod) if pod else None


def _part_key(column: str) -> str:
    """What ties a query to the others that must be read with it: the column it writes (gpulens' and
    dcgm-exporter's queries of a column write one matrix, cleared as one), and the activity histogram's
    count with its buckets (their ratios are taken after a read)."""
    return _SHAPE_COUNT if column in _SHAPE_BUCKETS else column


@dataclass(frozen=True)
class _Query:
    """A range query of a read: the key of the queries read with it (_part_key), the family of series it
    reads (gpulens, dcgm, pods), its expression, what places its answer in a part's matrices (part, answer
    -> the points placed), and its weight: what it costs the store per GPU, relative to a gauge's query."""

    key: str
    family: str
    expr: str
    place: Callable[[int, list[dict]], int]
    weight: float
    #: What a read of at least BARE_STEPS steps asks instead, each with what consumes its answer (None: `expr`).
    bare: list[tuple[str, Callable[[int, list[dict]], int]]] | None = None


def _parts(queries: list[_Query], parts: int) -> dict[str, int]:
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


class StepGrid:
    """Values on the store's step grid, kept from cycle to cycle so that each cycle queries only the steps
    it has not read (and the newest REREAD_STEPS again): the points a cycle reads grow with the analysis
    interval, not the window. One row per key (a GPU: its exporter's `instance` and its uuid; a pod: its
    namespace and name), one column per step, one matrix per trace column; NaN where the store had no
    value. Each matrix belongs to the part of the queries that writes it (Window). Matrices whose name
    starts with "_" hold identity (the code of a GPU's pod at each step): they say nothing of whether the
    GPU reported."""

    def __init__(self, step: float, points: int):
        self.step, self.points = step, points
        self.end: float | None = None  # unix seconds of the newest step held
        self.gpus: dict[tuple[str, str], int] = {}  # (instance, uuid) -> row
        self.values: dict[str, np.ndarray] = {}  # trace column -> (rows, points)
        self.part_of: dict[str, int] = {}  # trace column -> the part of the queries that writes it
        self._rows = 0  # rows allocated in each matrix

    @property
    def start(self) -> float:
        assert self.end is not None
        return self.end - (self.points - 1) * self.step

    def index(self, at: float) -> int:
        """The step of unix time `at` (on the grid)."""
        return round((at - self.start) / self.step)

    @overload
    def time_of(self, index: int) -> float: ...
    @overload
    def time_of(self, index: np.ndarray) -> np.ndarray: ...
    def time_of(self, index: int | np.ndarray) -> float | np.ndarray:
        """Unix seconds of step `index` (or of each of an array of steps): index()'s inverse."""
        return self.start + index * self.step

    def slide(self, end: float) -> int:
        """Slide the grid so that its newest step is `end`; the steps kept (the new ones are NaN). None are
        on the first slide, after a clock that went back, or a slide by a whole window: the grid is emptied."""
        shift = self.points if self.end is None else round((end - self.end) / self.step)
        if not 0 <= shift < self.points:
            self.gpus, self.values, self.part_of, self._rows = {}, {}, {}, 0
            shift = self.points
        kept = self.points - shift
        self.end = end
        for matrix in self.values.values():
            matrix[:, :kept] = matrix[:, shift:]
            matrix[:, kept:] = np.nan
        return kept

    def clear(self, first: int, last: int | None = None, part: int | None = None) -> None:
        """NaN in steps `first` to `last` (excluded; None: the newest included) of the matrices of `part`
        (None: all): steps about to be read again, so that a read that fails part way leaves nothing."""
        for name, matrix in self.values.items():
            if part is None or self.part_of[name] == part:
                matrix[:, first:last] = np.nan

    def restore(
        self, end: float | None, keys: list[Key], values: dict[str, np.ndarray], part_of: dict[str, int]
    ) -> None:
        """Hold what a grid of the same step and points held (analyzer/inputs/state.py): its newest step, its keys in
        row order, a matrix of len(keys) rows per column and the part each column belongs to."""
        for name, matrix in values.items():
            if matrix.shape != (len(keys), self.points) or matrix.dtype != np.float64:
                raise ValueError(f"{name} holds {matrix.shape} {matrix.dtype}, not {len(keys)} rows of {self.points}")
        if values.keys() != part_of.keys():
            raise ValueError(f"the columns {sorted(values)} belong to the parts of {sorted(part_of)}")
        self.end = end
        self.gpus = {key: row for row, key in enumerate(keys)}
        self.values = {name: np.array(matrix) for name, matrix in values.items()}
        self.part_of = {name: int(part) for name, part in part_of.items()}
        self._rows = len(keys)

    def add(
        self,
        result: list[dict],
        column: str,
        weight: Callable[[dict], float] | None = None,
        key: Callable[[dict], Key | None] = gpulens_gpu,
        summed: bool | None = None,
        part: int = 0,
    ) -> int:
        """A range query's series into `column`, a matrix of `part` (the part of the queries that asked it);
        with `weight` (labels -> factor), the series of a key add up (weight x value) instead; `key` (labels
        -> the row's key, None to skip the series) places each series. `summed=False` keeps the weight itself where the
        series' value is not 0 (0 where it is), without adding up: an identity code (the answers of `group`
        and `> bool 0` are 1; a store answering another value must not make another code). The points read.
        All of a query's points are converted and placed at once: per-series numpy calls would cost
        more than the points at 10,000 GPUs."""
        rows, factors, counts, chunks = [], [], [], []
        for series in result:
            labels = series["metric"]
            row_key = key(labels)
            if row_key is None:  # a series without the labels that identify it
                continue
            rows.append(self._row(row_key))
            factors.append(1.0 if weight is None else weight(labels))
            counts.append(len(series["values"]))
            chunks.append(series["values"])
        read = sum(counts)
        if not read:
            return 0
        values = _points(chunks)
        steps = np.rint((values[:, 0] - self.start) / self.step).astype(np.intp)
        inside = (steps >= 0) & (steps < self.points)
        row = np.repeat(rows, counts)[inside]
        keep = not (weight is not None if summed is None else summed)
        raw = values[:, 1]
        scale = raw if weight is None or not keep else np.where(np.isnan(raw), np.nan, (raw != 0).astype(np.float64))
        steps, values = steps[inside], (scale * np.repeat(factors, counts))[inside]
        matrix, at = self.matrix(column, part), (row, steps)
        if keep:
            matrix[at] = values
        else:
            matrix[at] = np.where(np.isnan(matrix[at]), 0.0, matrix[at])
            np.add.at(matrix, at, values)
        return read

    def _row(self, key: tuple[str, str]) -> int:
        row = self.gpus.setdefault(key, len(self.gpus))
        if row >= self._rows:
            self._rows = max(64, 2 * self._rows)
            for name, matrix in self.values.items():
                grown = np.full((self._rows, self.points), np.nan)
                grown[: len(matrix)] = matrix
                self.values[name] = grown
        return row

    def matrix(self, name: str, part: int = 0) -> np.ndarray:
        """The matrix of column `name`, made (all NaN, a matrix of `part`) if the grid has none yet."""
        if name not in self.values:
            self.values[name] = np.full((self._rows, self.points), np.nan)
            self.part_of[name] = part
        return self.values[name]

    def drop(self, name: str) -> np.ndarray:
        """The matrix of column `name` (all NaN if the grid has none), no longer held."""
        self.part_of.pop(name, None)
        held = self.values.pop(name, None)
        return np.full((self._rows, self.points), np.nan) if held is None else held

    def rows(self, until: float) -> tuple[list[tuple[str, str]], np.ndarray, dict[str, np.ndarray]]:
        """The GPUs with any value in the window (others are forgotten), and the window up to step `until`
        (unix seconds) as rows in (GPU, time) order: each row's GPU (an index into the GPUs) and its trace
        columns, timestamp included."""
        held = len(self.gpus)
        present = np.zeros((held, self.points), dtype=bool)
        for name, matrix in self.values.items():
            if not name.startswith("_"):
                present |= ~np.isnan(matrix[:held])
        keep = np.any(present, axis=1)
        if not keep.all():  # GPUs gone for a whole window: drop their rows
            kept = [key for key, row in self.gpus.items() if keep[row]]
            self.gpus = {key: row for row, key in enumerate(kept)}
            self.values = {name: matrix[:held][keep] for name, matrix in self.values.items()}
            self._rows, present = len(self.gpus), present[keep]
        gpu, step = np.nonzero(present[:, : self.index(until) + 1])
        columns = {name: matrix[gpu, step] for name, matrix in self.values.items()}  # "_" ones included
        columns["timestamp"] = self.time_of(step)
        return list(self.gpus), gpu, columns

    def at(self, name: str, keys: list[Key | None], step: np.ndarray, key: np.ndarray) -> np.ndarray:
        """The values of `name` at each (keys[key[i]], step[i]); NaN where the key or the value is missing."""
        matrix = self.values.get(name)
        rows = np.array([-1 if k is None else self.gpus.get(k, -1) for k in keys], dtype=np.intp)
        if matrix is None or not len(rows):
            return np.full(len(step), np.nan)
        row = rows[key]
        out = np.full(len(step), np.nan)
        known = row >= 0
        out[known] = matrix[row[known], step[known]]
        return out


def _newest_last(identity: list[dict]) -> list[dict]:
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


def _points(chunks: list) -> np.ndarray:
    """(n, 2) float64 of (unix seconds, value) from answers' values: [t, "v"] lists as the API gives them
    (converted at once), or arrays (a bare answer reduced here, _Bare)."""
    if all(isinstance(chunk, list) for chunk in chunks):
        return np.array(list(itertools.chain.from_iterable(chunks)), dtype=np.float64).reshape(-1, 2)
    return np.concatenate([np.asarray(chunk, dtype=np.float64).reshape(-1, 2) for chunk in chunks])


def _scaled(answer: list[dict], scale: float) -> list[dict]:
    """The answer with every value times `scale`: unit factors are applied here, not in PromQL, where
    Prometheus evaluates arithmetic at every step of every series (a quarter to a third of the cost of
    the live analyzer's shape-rate queries in benchmarks/live_prometheus.py's query log)."""
    if scale == 1.0:
        return answer
    with np.errstate(over="ignore"):  # a value too large for the factor is infinite, as PromQL's product is
        return [{"metric": series["metric"], "values": series_points(series) * (1.0, scale)} for series in answer]


class _ValueQuery(NamedTuple):
    """A query of gpulens' exporter's values: its PromQL, the column it fills (or the column each series'
    labels name), the weight that adds series up (None: placed as they are), its bare form, and the factor
    its values are multiplied by when placed."""

    expr: str
    column: str
    weight: Callable[[dict], float] | None
    bare: _Bare
    scale: float = 1.0


def _keep(answers: list[list[dict]]) -> Callable[[int, list[dict]], int]:
    """A consumer that keeps its answer in `answers` for a later one (placing no point)."""

    def keep(part: int, answer: list[dict]) -> int:
        answers.append(answer)
        return 0

    return keep


def _each(consumers: list[Callable[[list[dict]], int]]) -> Callable[[list[dict]], int]:
    """One answer handed to each of `consumers` in turn: the points they placed."""
    return lambda answer: sum(consume(answer) for consume in consumers)


def _max_at_each_time(points: np.ndarray) -> np.ndarray:
    """The (t, value) points of several series as one: the largest value at each time (NaN where all are),
    as PromQL's max takes it."""
    points = points[np.argsort(points[:, 0], kind="stable")]
    starts = np.flatnonzero(np.r_[True, np.diff(points[:, 0]) != 0])
    return np.column_stack([points[starts, 0], np.fmax.reduceat(points[:, 1], starts)])


@dataclass(frozen=True)
class _Bare:
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
            (f"count_over_time({self.expr}[{round(self.fresh * 1000)}ms])", _keep(counted)),
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


@dataclass
class Hardware:
    """What a store says of each GPU beyond its values: model and node by row key, and its topology
    groups (socket, PCIe root, NVLink island; core/topology.py) by uuid."""

    models: dict[Key, str] = field(default_factory=dict)
    nodes: dict[Key, str] = field(default_factory=dict)
    groups: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The GPUs in MIG mode (gpu_info's mig_mode "enabled"): their instances are the units, each with its own
    #: rows; the GPU's own rows (power, clocks, no activity: NVML has none for it) are none.
    mig_parents: frozenset[Key] = frozenset()


@dataclass
class PodTable:
    """The pods a window's "_pod" matrices name, by code: what those codes mean. Code 0 is no pod."""

    pods: list[tuple[str, str, str]] = field(default_factory=lambda: [("", "", "")])
    _codes: dict[tuple[str, str, str], int] = field(default_factory=lambda: {("", "", ""): 0})

    def code(self, pod: tuple[str, str, str]) -> int:
        """The code of (namespace, pod, container), given it now if it has none."""
        code = self._codes.get(pod)
        if code is None:
            code = self._codes[pod] = len(self.pods)
            self.pods.append(pod)
        return code

    def restore(self, pods: list[tuple[str, str, str]]) -> None:
        """The table a state file kept (analyzer/inputs/state.py)."""
        self.pods = pods
        self._codes = {pod: code for code, pod in enumerate(pods)}

    def keep(self, live: np.ndarray) -> np.ndarray:
        """Keep only the pods of codes `live` (sorted, 0 among them), renumbered in that order; the new code of
        each old one (0 for those let go)."""
        renumber = np.zeros(len(self.pods), dtype=np.float64)
        renumber[live] = np.arange(len(live))
        self.restore([self.pods[code] for code in live])
        return renumber


@dataclass
class Window:
    """The span a reader holds, on one step grid: the GPUs' values and the pods' (CPU, limits, restarts).
    The queries are split into `parts` (SeriesReader assigns them); a live cycle reads the parts read least
    recently, so that each is read every `parts` steps: Prometheus' cost of a query grows with the series it
    reads, not the steps, so four parts cost a quarter a cycle (benchmarks/live_prometheus.py). The window
    shows the steps every part has read (`whole_until`)."""

    gpus: StepGrid
    pods: StepGrid
    parts: int = 1
    #: Per part, unix seconds of the newest step its queries have all read (complete()); None: not read. A
    #: read that fails part way leaves it, so the next cycle reads again from there, not the whole window.
    read_until: list[float | None] = field(default_factory=list)
    #: Unix seconds of the oldest step every part has read: the window is whole once it is at or before start.
    read_from: float | None = None
    #: The parts this cycle reads (move_to), and the first step (unix seconds) each asks for.
    due: dict[int, float] = field(default_factory=dict)
    #: What the rows say beyond their values: the pods the "_pod" codes name, and the model and node of each
    #: GPU read from dcgm-exporter (its labels say them on every series).
    names: PodTable = field(default_factory=PodTable)
    dcgm: Hardware = field(default_factory=Hardware)
    #: Unix seconds of the newest step a pod held each gpulens GPU, kept across cycles (left_by_a_pod()).
    held_until: dict[Key, float] = field(default_factory=dict)

    @classmethod
    def of(cls, step: float, points: int, parts: int = 1) -> Window:
        return cls(StepGrid(step, points), StepGrid(step, points), parts, [None] * parts)

    @property
    def grids(self) -> dict[str, StepGrid]:
        return {"gpus": self.gpus, "pods": self.pods}

    @property
    def start(self) -> float:
        return self.gpus.start

    @property
    def whole_until(self) -> float | None:
        """Unix seconds of the newest step every part has read; None before any read completed."""
        if any(until is None for until in self.read_until):
            return None
        return min(until for until in self.read_until if until is not None)

    def move_to(self, end: float, newest: int | None = None) -> float:
        """Slide the grids so that their newest step is `end` and choose the parts to read (`due`): those never
        read, those not read for `parts` steps, and as many of the least recently read as steps have passed.
        Each reads from its first step not read in full, less REREAD_STEPS; on the first cycle the whole
        window, or its `newest` steps only (the older ones are then read by older()). The first step to read."""
        moved = self.gpus.points if self.gpus.end is None else round((end - self.gpus.end) / self.gpus.step)
        kept = min(grid.slide(end) for grid in self.grids.values())
        if not kept:
            self.read_until, self.read_from = [None] * self.parts, None
        grid = self.gpus
        last_read = [-math.inf if until is None else until for until in self.read_until]
        oldest_first = sorted(range(self.parts), key=lambda p: (last_read[p], p))
        due = set(oldest_first[: min(self.parts, max(1, moved))])
        due.update(p for p, until in enumerate(last_read) if until <= end - self.parts * grid.step)
        self.due = {}
        for part in sorted(due):
            until = self.read_until[part]
            if until is None:
                first = 0 if newest is None else max(0, grid.points - newest)
            else:
                first = min(max(0, grid.index(until) + 1 - REREAD_STEPS), kept)
            for held in self.grids.values():
                held.clear(first, part=part)
            self.due[part] = grid.time_of(first)
        return min(self.due.values())

    def older(self, steps: int, newest_from: float) -> tuple[float, float] | None:
        """The `steps` steps before the oldest read in full (before `newest_from`, where this cycle's read
        of the newest steps starts, on the first cycle), where the window is not whole yet; cleared, so
        that a read of them that failed part way leaves nothing. None when the window is whole. Every
        part reads them."""
        read_from = newest_from if self.read_from is None else self.read_from
        if read_from <= self.start:
            return None
        oldest = self.gpus.index(read_from)
        first = max(0, oldest - steps)
        for grid in self.grids.values():
            grid.clear(first, oldest)
        return self.gpus.time_of(first), self.gpus.time_of(oldest - 1)

    def complete(self, oldest: float) -> None:
        """The due parts have read the grids from their first step to the newest, and every part from
        `oldest` (or before)."""
        for part in self.due:
            self.read_until[part] = self.gpus.end
        self.read_from = oldest if self.read_from is None else min(self.read_from, oldest)


@dataclass(frozen=True)
class Shard:
    """One analyzer replica's share of the fleet: the nodes whose name hashes to `index` modulo `count`,
    as Prometheus' hashmod relabelling hashes a label (so a scrape config can split the same way). N
    replicas with indexes 0..N-1 over one store judge every pod exactly once: a pod's GPUs are on one
    node, and each node hashes to one index."""

    index: int
    count: int

    def owns(self, node: str) -> bool:
        return hashmod(node, self.count) == self.index

    def __str__(self) -> str:
        return f"shard {self.index} of {self.count}"


def hashmod(value: str, modulus: int) -> int:
    """Prometheus' relabel action `hashmod`: the last 8 bytes of the value's MD5, big-endian, modulo."""
    return int.from_bytes(hashlib.md5(value.encode()).digest()[8:], "big") % modulus


@dataclass(frozen=True)
class Exporters:
    """The exporters (their `instance`) that report one node's GPUs, those GPUs (UUIDs), and the node's name
    (its `node` label, dcgm-exporter's `Hostname`, else the first exporter's address: what a Shard hashes), as
    a store's index names them: the least a read may select, since a GPU's series from gpulens' exporter and
    from dcgm-exporter must meet in one read (analyzer/runs/span.py reads a large fleet a group of these at a
    time)."""

    instances: frozenset[str]
    gpus: frozenset[str]
    node: str


def _judged(columns: dict[str, T]) -> dict[str, T]:
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


class SeriesReader:
    """Fills a Window from a store: one range query per signal and family for every GPU at once, so the
    queries do not grow with the fleet. Each family's series are those of its job in `config`
    (MixinConfig.exporter, .dcgm: "" any job), with the label matchers `gpulens_selector` and
    `dcgm_selector` added (`cluster="eu-1"`); `instances` (scoped()) keeps a shard's."""

    def __init__(
        self,
        store: Store,
        step: float,
        config: mixin.MixinConfig | None = None,
        gpulens_selector: str = "",
        dcgm_selector: str = "",
        intervals: Mapping[str, float] | None = None,
    ):
        self.store, self.step = store, step
        self.config = config or mixin.ANY_JOB
        self.gpulens_selector, self.dcgm_selector = gpulens_selector, dcgm_selector
        #: The exporters this reader reads (an instance matcher, scoped()); "": every one.
        self.instances = ""
        self._exporter_pods = re.compile(self.config.exporter_pods)
        #: gpulens' hardware series as last read, and when (time.monotonic()): shared with scoped() copies.
        self._hardware: list[tuple[Hardware, float]] = []
        #: Seconds between a family's samples ("gpulens", "dcgm"), where scrape_interval() measured them (or
        #: a reader before this one: `intervals`).
        self.intervals: dict[str, float] = dict(intervals or {})

    def scoped(self, instances: str) -> SeriesReader:
        """This reader, reading only the exporters `instances` matches (instances_matcher(); "" all) besides
        those it is scoped to already: a shard's, or a group of nodes read apart. The copy shares the store,
        the intervals measured and the hardware read."""
        scoped = copy.copy(self)
        scoped.instances = mixin.matchers(self.instances, instances)
        return scoped

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

    def scrape_interval(self, at: float, lookback: float) -> float | None:
        """Seconds between the samples the store holds of a GPU in the `lookback` seconds to `at` (the median
        gap between one GPU's raw samples: gpulens' series, else dcgm-exporter's), to a tenth of a second; None
        where it holds none. Each family's interval is kept (`intervals`): a GPU's pod is read only from
        identity samples at most IDENTITY_FRESH intervals old, so that a pod gone from a store that holds no
        staleness marker (backfilled history) is not carried for its lookback. (Values are not filtered so: it
        would triple Prometheus' cost of every value query, benchmarks/store_report.py; dcgm-exporter's, which
        carry the pod, give way to the next pod's series instead.) A few small queries a family: one GPU is
        found, then its samples read."""
        window = f"{max(lookback, 60.0):.0f}s"
        for family, expr in zip(("gpulens", "dcgm"), self.looked_for(), strict=True):
            found = self.store.query(f"topk(1, last_over_time({expr}[{window}]))", at)
            if not found:
                continue
            name = expr.split("{")[0]
            labels = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(found[0]["metric"].items()) if k != "__name__")
            series = self.store.samples(f"{name}{{{labels}}}[{window}]", at)
            stamps = np.array([float(t) for t, _ in series[0]["values"]]) if series else np.zeros(0)
            if len(stamps) > 1:
                gap = float(np.median(np.diff(stamps)))
                self.intervals[family] = float(round(gap)) if abs(gap - round(gap)) < 0.05 else round(gap, 1)
        return next(iter(self.intervals.values()), None)

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

    # --- reading -----------------------------------------------------------------------------------
    def read(self, window: Window, start: float | dict[int, float], end: float) -> int:
        """The queries' steps to `end` (on the grid) into `window`: every part's from `start`, or (a dict:
        Window.due) the parts it names, each from its own first step. QUERIES_IN_FLIGHT are asked at once,
        so that the store evaluates the next while this process decodes and places the last, each answer
        placed in the order asked. A query of BARE_STEPS steps or more is asked in its bare form (_Bare). The
        points the answers held."""
        firsts = start if isinstance(start, dict) else dict.fromkeys(range(window.parts), start)
        # The plan is made again each read: 0.4 ms for 53 queries, a ten-thousandth of a live cycle, and a
        # kept one would carry the answers its consumers hold between queries past a read that failed.
        queries = self._queries(window)
        part_of = _parts(queries, window.parts)
        # Each expression is asked once, where it is last asked, and its answer handed to each consumer in
        # turn: bare reads of dcgm-exporter ask DCGM_FI_DEV_FB_USED as memory used, as a kind of the memory
        # total and as the pod identity. A consumer that keeps an answer for a later one (a freshness count,
        # the memory kinds) is asked before it, so moving a shared query later keeps that order.
        consumers: dict[tuple[str, float], list[Callable[[list[dict]], int]]] = {}
        for query in queries:
            part = part_of[query.key]
            if part not in firsts:
                continue
            long = round((end - firsts[part]) / self.step) + 1 >= BARE_STEPS
            forms = query.bare if long and query.bare is not None else [(query.expr, query.place)]
            for expr, place in forms:
                shared = consumers.pop((expr, firsts[part]), [])
                consumers[expr, firsts[part]] = [*shared, functools.partial(place, part)]
        asked = [(expr, start, _each(uses)) for (expr, start), uses in consumers.items()]
        points = self._answered(asked, end)
        shape = part_of[_SHAPE_COUNT]
        if shape in firsts:
            self._shape_ratios(window.gpus, firsts[shape], end, shape)
        return points

    def parts(self, count: int) -> dict[str, int]:
        """The part of `count` each query key is read in (what a state file's reads mean)."""
        return _parts(self._queries(Window.of(self.step, 1, count)), count)

    def _queries(self, window: Window) -> list[_Query]:
        """Every range query of a read, in the order asked, with what places its answer in `window`."""
        gpus = window.gpus
        queries: list[_Query] = []

        def ask(
            family: str,
            key: str,
            expr: str,
            place: Callable[[int, list[dict]], int],
            series: float = 1,
            bare: _Bare | list[tuple[str, Callable[[int, list[dict]], int]]] | None = None,
        ) -> None:
            # Prometheus allocates about 1.5 times as much for a rate over a GPU's series as for its gauge
            # (benchmarks/live_prometheus.py): the weight that balances the parts.
            rated = "rate(" in expr or "increase(" in expr
            bare_form = bare.asked(place) if isinstance(bare, _Bare) else bare
            queries.append(_Query(key, family, expr, place, series * (1.5 if rated else 1.0), bare_form))

        def add(
            family: str,
            expr: str,
            column: str,
            weight: Callable[[dict], float] | None = None,
            key: Callable[[dict], Key | None] = gpulens_gpu,
            grid: StepGrid = gpus,
            summed: bool | None = None,
            bare: _Bare | None = None,
            scale: float = 1.0,
        ) -> None:
            ask(
                family,
                _part_key(column),
                expr,
                lambda part, result: grid.add(_scaled(result, scale), column, weight, key, summed, part),
                self._series_per_gpu(column),
                bare,
            )

        for query in self._gpulens_queries():
            add("gpulens", query.expr, query.column, query.weight, bare=query.bare, scale=query.scale)
        # The hardware XIDs counted at each step, one series per code: written lowest code first, so that
        # where a GPU counted several the highest stays. Asked as it is: few GPUs have such series.
        ask(
            "gpulens",
            "hardware_xid",
            mixin.hardware_xids(
                self.selector(m.XID_ERRORS.name, mixin.HARDWARE_XID_MATCHER), self.rate_window(), "instance, uuid"
            ),
            lambda part, xids: gpus.add(
                sorted(
                    (x for x in xids if x["metric"].get("xid", "").isdigit()), key=lambda x: int(x["metric"]["xid"])
                ),
                "hardware_xid",
                lambda labels: float(labels["xid"]),
                summed=False,
                part=part,
            ),
        )
        pod_labels = ("namespace", "pod", "container")
        pod_info = self.selector(m.GPU_POD_INFO.name)
        ask(
            "gpulens",
            "_pod",
            f"max by (instance, uuid, {', '.join(pod_labels)}) ({self._fresh('gpulens', pod_info)})",
            lambda part, held: gpus.add(
                _newest_last(held),
                "_pod",
                weight=lambda labels: self._pod_code(window, labels, pod_labels),
                summed=False,
                part=part,
            ),
            bare=self._bare_identity("gpulens", pod_info, (*_GPU_BY, *pod_labels)),
        )
        by_labels = ("instance", *mixin.DCGM_GPU_LABELS)
        by = ", ".join(by_labels)
        # dcgm-exporter writes a GPU's pod on its value series: where a pod gives way to the next (or to none),
        # both series stand for a while (a store's lookback without staleness markers): each pod's values are
        # read apart and placed oldest first, so that at a step both name, the newer series' value stands, as
        # the newer pod does in the identity.
        held_by = tuple(n for names in mixin.DCGM_POD_LABELS.values() for n in names)
        for column, source in _judged(mixin.dcgm_columns()).items():
            selector = source.selector(self.matchers("dcgm"))
            ask(
                "dcgm",
                column,
                f"max by ({by}, {', '.join(held_by)}) ({selector})",
                partial(self._add_newest_last, gpus, column, source.scale),
                self._series_per_gpu(column),
                _Bare(selector, (*by_labels, *held_by)),
            )
        # Bare: the kinds but USED kept, then USED (the memory-used column's query, asked once) adds them up.
        kept: list[list[dict]] = []
        ask(
            "dcgm",
            "memory_total_bytes",
            mixin.dcgm_memory_total(self.matchers("dcgm"), by),
            lambda part, result: gpus.add(result, "memory_total_bytes", key=dcgm_gpu, part=part),
            bare=[
                (mixin.dcgm_memory_selector(self.matchers("dcgm"), ("TOTAL", "FREE", "RESERVED")), _keep(kept)),
                (
                    mixin.dcgm_memory_selector(self.matchers("dcgm"), ("USED",)),
                    lambda part, used: self._add_memory_total(gpus, by_labels, part, [*kept.pop(), *used]),
                ),
            ],
        )
        add("dcgm", mixin.dcgm_hardware_xid(self.matchers("dcgm"), by), "hardware_xid", key=dcgm_gpu)
        labels = (*by_labels, *mixin.DCGM_HARDWARE_LABELS, *held_by)
        identity = mixin.names_selector((mixin.DCGM_IDENTITY_SERIES,), self.matchers("dcgm"))
        ask(
            "dcgm",
            "_pod",
            f"group by ({', '.join(labels)}) ({self._fresh('dcgm', identity)})",
            lambda part, identity: self._add_dcgm_identity(window, identity, part),
            bare=self._bare_identity("dcgm", identity, labels),
        )
        for expr, column in self._pod_queries():
            add("pods", expr, column, key=pod_key, grid=window.pods)
        return queries

    def _bare_identity(self, family: str, selector: str, by: tuple[str, ...]) -> _Bare:
        """The bare form of an identity query: `max` (gpulens) or `group` (dcgm) by `by` of the family's fresh
        selector (_fresh)."""
        interval = self.intervals.get(family)
        return _Bare(
            selector, by, fresh=None if interval is None else IDENTITY_FRESH * interval, group=family == "dcgm"
        )

    @staticmethod
    def _add_memory_total(grid: StepGrid, by: tuple[str, ...], part: int, answer: list[dict]) -> int:
        """dcgm-exporter's memory series (mixin.dcgm_memory_selector) into memory_total_bytes as
        mixin.dcgm_memory_total() adds them up: the total where the counter set has it, else used + free
        (+ reserved where reported), in bytes. Each kind is placed in a matrix of its own first, and only the
        steps with a total are written: the rest of the grid keeps what it held."""
        kinds = ("TOTAL", "USED", "FREE", "RESERVED")
        reduced = _Bare("", (*by, "__name__")).reduce(answer)
        read = 0
        for kind in kinds:
            mine = [series for series in reduced if series["metric"].get("__name__") == f"DCGM_FI_DEV_FB_{kind}"]
            read += grid.add(mine, f"_fb_{kind}", key=dcgm_gpu, part=part)
        total, used, free, reserved = (grid.drop(f"_fb_{kind}") for kind in kinds)
        summed = used + free + np.where(np.isnan(reserved), 0.0, reserved)
        in_bytes = np.where(np.isnan(total), summed, total) * mixin.dcgm.MIB
        known = ~np.isnan(in_bytes)
        grid.matrix("memory_total_bytes", part)[known] = in_bytes[known]
        return read

    @staticmethod
    def _add_newest_last(grid: StepGrid, column: str, scale: float, part: int, result: list[dict]) -> int:
        """dcgm-exporter's series of `column` (in its unit: times `scale` in the trace's) into `grid`, each
        pod's apart, older series first (a newer one stands where both name a step)."""
        return grid.add(_newest_last(_scaled(result, scale)), column, key=dcgm_gpu, part=part)

    def _series_per_gpu(self, column: str) -> float:
        """The series a query of `column` reads per GPU: the clock-event reasons read, the NVLink error
        kinds the column adds up, else one."""
        if column == "clock_event_reasons":
            return float(self.config.throttle_reasons.count("|") + 1)
        kinds = tr.NVLINK_ERROR_RATES.get(column)
        return float(len(kinds)) if kinds else 1.0

    def _answered(self, queries: list[tuple[str, float, Callable[[list[dict]], int]]], end: float) -> int:
        """Each query's answer (from its start to `end`) handed to its consumer (which returns the points it
        placed), in the order asked, with QUERIES_IN_FLIGHT asked of the store at once; the points placed. A
        failure ends the read: the queries not answered yet are let go."""
        pending: collections.deque[tuple[Future[list[dict]], Callable[[list[dict]], int]]] = collections.deque()
        points = 0
        with ThreadPoolExecutor(QUERIES_IN_FLIGHT, thread_name_prefix="gpulens-query") as pool:
            try:
                for expr, start, consume in queries:
                    pending.append((pool.submit(self.store.query_range, expr, start, end, self.step), consume))
                    if len(pending) >= QUERIES_IN_FLIGHT:
                        future, use = pending.popleft()
                        points += use(future.result())
                while pending:
                    future, use = pending.popleft()
                    points += use(future.result())
            finally:
                for future, _ in pending:
                    future.cancel()
        return points

    def _add_dcgm_identity(self, window: Window, identity: list[dict], part: int) -> int:
        """dcgm-exporter's identity series: the pod that holds each GPU at each step, under the pod labels
        the deployment's layout names (config.dcgm_pod_labels; "auto": exported_pod wherever a series has it)."""
        layout = self.config.dcgm_pod_labels
        if layout == "auto":
            layout = "exported" if any("exported_pod" in s["metric"] for s in identity) else "plain"
        return window.gpus.add(
            _newest_last(identity),
            "_pod",
            weight=lambda labels: self._pod_code(window, labels, mixin.DCGM_POD_LABELS[layout]),
            key=lambda labels: self._dcgm_identity(window, labels),
            summed=False,
            part=part,
        )

    def _gpulens_queries(self) -> list[_ValueQuery]:
        """gpulens' value queries."""
        rate_window, by_gpu = self.rate_window(), ", ".join(_GPU_BY)

        def highest(inner: str, column: str, scale: float = 1.0) -> _ValueQuery:
            # Each answer keeps only the labels that place its values (a GPU: its exporter and uuid): a scrape
            # through kube-prometheus adds a dozen target labels to every series, and once a cycle reads only
            # the newest steps, labels would be most of its bytes.
            return _ValueQuery(f"max by ({by_gpu}) ({inner})", column, None, _Bare(inner, _GPU_BY), scale)

        def errors(kinds: tuple[str, ...]) -> str:
            kinds_matcher = 'type=~"' + "|".join(kinds) + '"'
            return f"rate({self.selector(m.NVLINK_ERRORS.name, kinds_matcher)}[{rate_window}])"

        return [
            *(highest(self.selector(spec.name), column) for column, spec in _judged(tr.FROM_GAUGES).items()),
            *(
                highest(f"rate({self.selector(spec.name)}[{rate_window}])", column)
                for column, spec in tr.FROM_RATES.items()
            ),
            # A column's NVLink error kinds add up, a query a column: one series a GPU in each answer. Asked by
            # kind and added up here, the answer held four series a GPU and cost Prometheus a third more
            # (benchmarks/live_prometheus.py, the costliest query of a live cycle).
            *(
                _ValueQuery(f"sum by ({by_gpu}) ({errors(kinds)})", column, lambda labels: 1.0, _Bare(errors(kinds)))
                for column, kinds in tr.NVLINK_ERROR_RATES.items()
            ),
            *self._clock_event_queries(highest),
            *(highest(inner, column, scale) for column, (inner, scale) in self._shape_queries().items()),
        ]

    def _clock_event_queries(self, highest: Callable[[str, str, float], _ValueQuery]) -> list[_ValueQuery]:
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
        bursts in it. The histogram's count is read once (into _SHAPE_COUNT) and the buckets' increases
        divided by it after the read (_shape_ratios), as PromQL would divide them: each bucket's query no
        longer reads the count again."""
        window = self.rate_window()

        def increase(name: str, *extra: str) -> tuple[str, float]:
            return f"increase({self.selector(name, *extra)}[{window}])", 1.0

        def per_row(name: str) -> tuple[str, float]:
            return f"rate({self.selector(name)}[{window}])", self.step

        return {
            _SHAPE_COUNT: increase(m.ACTIVITY.name + "_count"),
            **{
                column: increase(m.ACTIVITY.name + "_bucket", f'le="{bound:g}"')
                for column, bound in _SHAPE_BUCKETS.items()
            },
            "activity_transitions": per_row(m.ACTIVITY_TRANSITIONS.name),
            "steady_bursts": per_row(m.STEADY_BURSTS.name),
        }

    def _shape_ratios(self, grid: StepGrid, start: float, end: float, part: int) -> None:
        """The SHAPE columns of the steps read from `start` to `end`: samples per row, and each bucket's share
        of them (at or below its bound; the high one's complement), with PromQL's arithmetic (x / 0 is
        infinite, 0 / 0 NaN, a missing count NaN)."""
        count = grid.values.get(_SHAPE_COUNT)
        if count is None:
            return
        read = slice(round((start - grid.start) / self.step), round((end - grid.start) / self.step) + 1)
        seconds = max(4 * self.step, 60)  # rate_window()
        n = count[:, read]
        with np.errstate(divide="ignore", invalid="ignore"):
            grid.matrix("activity_samples", part)[:, read] = n / seconds * self.step
            for column in _SHAPE_BUCKETS:
                matrix = grid.matrix(column)
                matrix[:, read] = matrix[:, read] / n
            high = grid.matrix("activity_high_ratio")
            high[:, read] = 1 - high[:, read]

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

    def pods_named(self, start: float, end: float) -> int:
        """The most pod names that one family's identity series name between `start` and `end` (unix
        seconds), from the store's index without reading a sample: a lower bound of the pods a report of
        that span judges (a name in two namespaces counts once)."""
        named = [len(self.store.label_values("pod", self.selector(m.GPU_POD_INFO.name), start, end))]
        dcgm = f"{mixin.DCGM_IDENTITY_SERIES}{{{self.matchers('dcgm')}}}"
        for label in ("exported_pod", "pod"):
            values = self.store.label_values(label, dcgm, start, end)
            named.append(sum(1 for pod in values if not self._exporter_pods.fullmatch(pod)))
        return max(named)

    def exporters(self, start: float, end: float) -> list[Exporters]:
        """The exporters that reported GPUs between `start` and `end` (unix seconds), grouped so that
        those naming one GPU (gpulens' and dcgm-exporter's on its node) are together, from the store's
        index without reading a sample; the shard's matcher (`instances`) is not applied."""
        every = copy.copy(self)
        every.instances = ""
        gpulens = self.store.series(every.selector(m.GPU_INFO.name), start, end)
        dcgm = self.store.series(f"{mixin.DCGM_IDENTITY_SERIES}{{{every.matchers('dcgm')}}}", start, end)
        named = [(s.get("instance", ""), s.get("uuid", "")) for s in gpulens]
        named += [(s.get("instance", ""), s.get("UUID", "")) for s in dcgm]
        node_of: dict[str, str] = {}
        for s in gpulens + dcgm:
            node = next((s[n] for n in mixin.DCGM_NODE_LABELS if s.get(n)), "")
            if node:
                node_of.setdefault(s.get("instance", ""), node)
        # Instances that name one GPU are one group: a union-find over instances, joined through GPUs.
        parent: dict[str, str] = {}

        def root(instance: str) -> str:
            while parent.setdefault(instance, instance) != instance:
                parent[instance] = instance = parent[parent[instance]]
            return instance

        seen_at: dict[str, str] = {}
        for instance, gpu in named:
            if gpu:
                parent[root(instance)] = root(seen_at.setdefault(gpu, instance))
            root(instance)
        instances: dict[str, set[str]] = collections.defaultdict(set)
        gpus: dict[str, set[str]] = collections.defaultdict(set)
        for instance, gpu in named:
            instances[root(instance)].add(instance)
            if gpu:
                gpus[root(instance)].add(gpu)
        return sorted(
            (
                Exporters(
                    frozenset(instances[r]),
                    frozenset(gpus[r]),
                    next((node_of[i] for i in sorted(instances[r]) if i in node_of), min(instances[r])),
                )
                for r in instances
            ),
            key=lambda e: sorted(e.instances),
        )

    def _pod_code(self, window: Window, labels: dict, names: tuple[str, ...]) -> float:
        """The code in `window` of the pod an identity series names in `names` (namespace, pod, container): 0
        for none, and for the exporters' own pods (config.exporter_pods), which hold no GPU."""
        pod = (labels.get(names[0], ""), labels.get(names[1], ""), labels.get(names[2], ""))
        if not pod[1] or self._exporter_pods.fullmatch(pod[1]):
            return 0.0
        return float(window.names.code(pod))

    @staticmethod
    def _dcgm_identity(window: Window, labels: dict) -> Key | None:
        """The row of a dcgm-exporter identity series; records the GPU's model and node in `window`."""
        row = dcgm_gpu(labels)
        if row is not None:
            # A MIG instance as NVML names it ("<GPU> MIG 3g.40gb"): dcgm-exporter gives its parent's model and
            # its profile apart, and what it costs follows the profile (catalog.gpu_share_of).
            profile = labels.get("GPU_I_PROFILE", "") if labels.get("GPU_I_ID") else ""
            window.dcgm.models[row] = catalog.device_name(labels.get("modelName", ""), profile)
            node = next((labels[n] for n in mixin.DCGM_NODE_LABELS if labels.get(n)), "")
            window.dcgm.nodes[row] = node or row[0]
        return row

    # --- the frame -----------------------------------------------------------------------------------
    def hardware(self, keys: list[Key], end: float, lookback: float) -> Hardware:
        """gpulens' gpu_info (model, node) by row key and the topology groups by uuid, as of `end` over
        the `lookback` seconds before it. Hardware changes rarely and the topology is a series per pair of
        GPUs (a third of a node's series): read every HARDWARE_REFRESH_SECONDS, or at once when a gpulens
        GPU appears that the last read did not have."""
        if self._hardware:
            cached, read_at = self._hardware[0]
            if time.monotonic() - read_at < HARDWARE_REFRESH_SECONDS and all(k in cached.models for k in keys):
                return cached
        window = f"{lookback:.0f}s"
        info = {
            gpulens_gpu(r["metric"]): r["metric"]
            for r in self.store.query(f"last_over_time({self.selector(m.GPU_INFO.name)}[{window}])", end)
            if "uuid" in r["metric"]
        }
        pairs = [
            (r["metric"]["uuid"], r["metric"]["peer_uuid"], r["metric"]["level"], r["metric"].get("p2p", "unknown"))
            for r in self.store.query(f"last_over_time({self.selector(m.TOPOLOGY.name)}[{window}])", end)
            if {"uuid", "peer_uuid", "level"} <= r["metric"].keys()
        ]
        hardware = Hardware(
            {
                k: catalog.device_name(labels.get("model", ""), labels.get("mig_profile", ""))
                for k, labels in info.items()
                if k is not None
            },
            {k: labels.get("node", "") for k, labels in info.items() if k is not None},
            {column: of(pairs) for column, of in GROUPS.items()},
            frozenset(k for k, labels in info.items() if k is not None and labels.get("mig_mode") == "enabled"),
        )
        self._hardware[:] = [(hardware, time.monotonic())]
        return hardware

    def frame(self, window: Window, lookback: float) -> pd.DataFrame:
        """The window's rows as a trace frame: a row per GPU and step with a value, the GPU's model, node
        and topology, the pod that held it at that step, and that pod's CPU and restarts. A GPU that
        reports through gpulens' exporter too keeps only gpulens' rows; a GPU in MIG mode, only its instances'."""
        assert window.gpus.end is not None
        # A one-off read (a report's piece) completes nothing: it shows every step.
        until = window.gpus.end if window.whole_until is None else window.whole_until
        keys, gpu, columns = window.gpus.rows(until)
        if not len(gpu):
            return fr.empty()
        dcgm, pods = window.dcgm, window.names.pods
        hardware = self.hardware([k for k in keys if k not in dcgm.models], until, lookback)
        from_gpulens = {k[1] for k in keys if k not in dcgm.models}
        dropped = np.array(
            [(k in dcgm.models and k[1].split("/")[0] in from_gpulens) or k in hardware.mig_parents for k in keys],
            dtype=bool,
        )
        if dropped.any():
            keep = ~dropped[gpu]
            gpu, columns = gpu[keep], {name: values[keep] for name, values in columns.items()}
        frame = pd.DataFrame({name: values for name, values in columns.items() if not name.startswith("_")})
        models = {**hardware.models, **dcgm.models}
        nodes = {**hardware.nodes, **dcgm.nodes}
        per_gpu = {
            "instance": [k[0] for k in keys],
            "gpu": [k[1] for k in keys],
            "gpu_model": [models.get(k, "") for k in keys],
            "node": [nodes.get(k) or k[0] for k in keys],
        }
        for column, values in per_gpu.items():
            frame[column] = pd.Categorical(values).take(gpu)
        for column, group in hardware.groups.items():
            frame[column] = np.array([group.get(k[1], np.nan) for k in keys], dtype=np.float64)[gpu]
        held = columns.get("_pod", np.zeros(len(gpu)))
        # A code outside the pod table (a store answering a value where it had 1) is no pod, not an IndexError.
        code = np.where((held >= 0) & (held < len(pods)), held, 0.0).astype(np.intp)
        for j, column in enumerate(("namespace", "pod", "container")):
            # Names stay Python strings (object): numpy's fixed-width text would make every name as wide as
            # the longest, four bytes a character (a pod of 1 MiB of name made each of thousands 4 MiB).
            names = pd.Categorical(pd.array([p[j] for p in pods], dtype=object))
            frame[column] = pd.Categorical.from_codes(names.codes[code], categories=names.categories)
        window.pods.rows(until)  # forgets the pods gone for a whole window
        step = np.rint((columns["timestamp"] - window.pods.start) / self.step).astype(np.intp)
        pod_keys = [(ns, pod) if pod else None for ns, pod, _ in pods]
        for column in ("cpu_usage_cores", "cpu_limit_cores", "restarts_total"):
            frame[column] = window.pods.at(column, pod_keys, step, code)
        self._unknown_after_a_pod(window, frame, keys, gpu, code)
        self._forget(window)
        return fr.normalize(frame)

    def _unknown_after_a_pod(
        self, window: Window, frame: pd.DataFrame, keys: list[Key], gpu: np.ndarray, code: np.ndarray
    ) -> None:
        """Make the rate-derived values of a gpulens GPU unknown in its rows within a rate window after a pod
        held it and none holds it now (left_by_a_pod()): they reach back over the pod's samples, and would show
        kernels running without a pod after every busy pod ends. The rows stay: the GPU is free from then."""
        ours = np.array([k not in window.dcgm.models for k in keys], dtype=bool)
        if not ours.any():  # a fleet that runs only dcgm-exporter: gauges, nothing reaches back
            return
        ts = frame["timestamp"].to_numpy()
        seed = np.array([window.held_until.get(k, np.nan) for k in keys], dtype=np.float64)
        left, held_until = left_by_a_pod(gpu, ts, code, seed, self.rate_seconds())
        for key, until, mine in zip(keys, held_until, ours, strict=True):
            if mine and not np.isnan(until):
                window.held_until[key] = until
        left &= ours[gpu]
        if left.any():
            rated = [c for c in (*tr.FROM_RATES, *tr.NVLINK_ERROR_RATES, *tr.SHAPE) if c in frame.columns]
            frame.loc[left, rated] = np.nan

    def _forget(self, window: Window) -> None:
        """Forget the pods and dcgm-exporter GPUs that `window` no longer holds: a service that runs for
        months sees every pod its fleet ever ran. The pod table is compacted when it holds more than twice
        the pods in the window (so each compaction is paid for by as many new pods), and the codes in the
        window's "_pod" matrix renumbered to match."""
        for table in (window.dcgm.models, window.dcgm.nodes, window.held_until):
            for key in [k for k in table if k not in window.gpus.gpus]:
                del table[key]
        codes = window.gpus.values.get("_pod")
        if codes is None:
            return
        held = ~np.isnan(codes)
        live = np.union1d([0], codes[held].astype(np.intp))
        if len(window.names.pods) <= 2 * len(live) + 64:
            return
        codes[held] = window.names.keep(live)[codes[held].astype(np.intp)]
