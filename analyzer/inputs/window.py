"""What a read fills: the step grid of each GPU's and each pod's values (StepGrid), the pods it codes (PodTable),
the live analyzer's sliding window of them in parts read in turns (Window), a shard of the fleet by node hash
(Shard), the exporters that name one GPU grouped (Exporters), and how a series' labels key its row (a GPU by its
exporter and uuid, dcgm-exporter's by its own labels, a pod by namespace and name)."""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import overload

import numpy as np
import pandas as pd

#: Steps a cycle reads again before the first it has not read: a scrape that reached the store after the
#: last cycle's query (a slow target, a remote-write queue) changes the newest values it held.
REREAD_STEPS = 2
#: The parts the live analyzer splits its queries into (Window): a cycle reads the part read least
#: recently, so each is read every four steps (a minute at 15 s) and a cycle reads a quarter of the series.
#: Prometheus' cost of a query grows with the series it reads, not the steps, so a cycle costs it about a
#: quarter; the verdicts then rest on the steps every part has read, three steps (45 s) before the newest
#: (benchmarks/live_prometheus.py, docs/sizing.md).
READ_PARTS = 4
#: The most parts a reader takes: past it a query would be read less than once every 16 steps, and the
#: verdicts would lag as many (and there are not many more queries than that to split).
MAX_READ_PARTS = 16
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


def _points(chunks: list) -> np.ndarray:
    """(n, 2) float64 of (unix seconds, value) from answers' values: [t, "v"] lists as the API gives them
    (converted at once), or arrays (a bare answer reduced here, Bare)."""
    if all(isinstance(chunk, list) for chunk in chunks):
        return np.array(list(itertools.chain.from_iterable(chunks)), dtype=np.float64).reshape(-1, 2)
    return np.concatenate([np.asarray(chunk, dtype=np.float64).reshape(-1, 2) for chunk in chunks])


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
