"""kube-state-metrics' series as the cluster's and the owners' readers ask for them, from one of two sources:
a store with the Prometheus HTTP API (PromQL, evaluated by the store), or recorded files (its history as
OpenMetrics with timestamps, as promtool backfills it and `promtool tsdb dump-openmetrics` writes it; or saved
scrapes of its /metrics, each stamped with its file's modification time), evaluated here with the same
meaning: a series' value at a step is its newest sample at or before it, within the lookback (Prometheus'
5 minutes) and, where asked, within `age` seconds (`last_over_time(X[age])`: a series ends where its samples
do, whether or not the store wrote a staleness marker after them).

The readers (analyzer/inputs/cluster.py, analyzer/inputs/owners.py) ask for:
- last(): each series' newest sample in (at - window, at], their maximum by the labels named (PromQL's
  `max by (...) (last_over_time(name{...}[window]))`);
- samples_per_series(): the most samples one series holds in (at - window, at] (`max(count_over_time(...))`),
  to measure kube-state-metrics' scrape interval;
- the four series of the cluster's GPUs on a step grid: each node's allocatable GPUs (max by node), whether it
  is cordoned (max by node), each namespace's GPU quota (min by namespace), and each GPU pod's request summed
  by namespace, pod and node while its phase is Pending or Running;
- the workloads' on the same grid: each Deployment's and StatefulSet's spec replicas, each autoscaler's bounds.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from gpulens.analyzer.inputs.readers import available_memory
from gpulens.analyzer.inputs.store import Store, series_points
from gpulens.core.mixin import matchers, promql_string

#: kube-state-metrics' name of the GPU resource (nvidia.com/gpu with its dots and slash made "_"), and the
#: quota's (a ResourceQuota limits an extended resource by its requests only).
GPU_RESOURCE = "nvidia_com_gpu"
GPU_QUOTA_RESOURCE = "requests.nvidia.com/gpu"
#: Seconds a sample stands for after it was taken where nothing newer came (Prometheus' default lookback).
LOOKBACK = 300.0

Labels = dict[str, str]
#: A label matcher: (label, operator, value), operator one of PromQL's =, !=, =~, !~.
Matcher = tuple[str, str, str]
#: A range answer in the shape of Prometheus' (a series' labels and its (unix seconds, value) points).
RangeSeries = tuple[Labels, list[tuple[float, float]]]


class KubeStateError(Exception):
    """A recorded file of kube-state-metrics' series that cannot be read; the message names the file and the fix."""


class KubeState(Protocol):
    """Where kube-state-metrics' series are read from (a store, or recorded files)."""

    def last(
        self, name: str, by: Sequence[str], at: float, window: float, *matchers: Matcher
    ) -> list[tuple[Labels, float]]: ...

    def samples_per_series(self, name: str, at: float, window: float, *matchers: Matcher) -> float: ...

    def node_gpus(self, start: float, end: float, step: float, age: float) -> list[RangeSeries]: ...

    def cordoned(self, start: float, end: float, step: float, age: float) -> list[RangeSeries]: ...

    def gpu_quota(self, start: float, end: float, step: float, age: float) -> list[RangeSeries]: ...

    def gpu_pods(self, start: float, end: float, step: float, age: float) -> list[RangeSeries]: ...

    def workload_replicas(self, start: float, end: float, step: float, age: float) -> list[tuple[str, RangeSeries]]: ...

    def autoscaler_bounds(self, start: float, end: float, step: float, age: float) -> list[tuple[str, RangeSeries]]: ...


GPUS: Matcher = ("resource", "=", GPU_RESOURCE)
#: MIG instances as the device plugin's mixed strategy offers them (nvidia.com/mig-3g.40gb), as kube-state-metrics
#: writes a resource's name (nvidia_com_mig_3g_40gb).
MIG_RESOURCE_PREFIX = "nvidia_com_mig_"
#: The requests read: whole GPUs, and MIG instances (for showback's checks alone: a slice is no GPU to schedule).
GPU_REQUESTS: Matcher = ("resource", "=~", f"{GPU_RESOURCE}|{MIG_RESOURCE_PREFIX}.+")
#: The workloads whose replicas kube-state-metrics' spec series say: (kind, family, the label naming it).
REPLICAS = (
    ("Deployment", "kube_deployment_spec_replicas", "deployment"),
    ("StatefulSet", "kube_statefulset_replicas", "statefulset"),
)
#: An autoscaler's bounds: ("min" or "max", family); kube_horizontalpodautoscaler_info names what it scales.
AUTOSCALER_BOUNDS = (
    ("min", "kube_horizontalpodautoscaler_spec_min_replicas"),
    ("max", "kube_horizontalpodautoscaler_spec_max_replicas"),
)
AUTOSCALER_INFO = "kube_horizontalpodautoscaler_info"
LIVE_PHASES: Matcher = ("phase", "=~", "Pending|Running")
QUOTA_HARD: tuple[Matcher, Matcher] = (("resource", "=", GPU_QUOTA_RESOURCE), ("type", "=", "hard"))


class _OnGrid(ABC):
    """The four series of the cluster's GPUs on a step grid, from each source's `_on_grid`: the value of
    each matching series at each step (NaN where it has none, or none within `age` seconds)."""

    @abstractmethod
    def _on_grid(
        self,
        name: str,
        start: float,
        end: float,
        step: float,
        age: float,
        *matchers: Matcher,
        only: float | None = None,
    ) -> tuple[np.ndarray, list[tuple[Labels, np.ndarray]]]:
        """The step grid, and each matching series' value at each step (NaN where it has none, or none within
        `age` seconds); where `only` is given, only the steps where the value is `only` (a phase's 1)."""

    def node_gpus(self, start: float, end: float, step: float, age: float) -> list[RangeSeries]:
        grid, rows = self._on_grid("kube_node_status_allocatable", start, end, step, age, GPUS)
        return _aggregate(grid, rows, ("node",), "max")

    def cordoned(self, start: float, end: float, step: float, age: float) -> list[RangeSeries]:
        grid, rows = self._on_grid("kube_node_spec_unschedulable", start, end, step, age)
        return _aggregate(grid, rows, ("node",), "max")

    def gpu_quota(self, start: float, end: float, step: float, age: float) -> list[RangeSeries]:
        grid, rows = self._on_grid("kube_resourcequota", start, end, step, age, *QUOTA_HARD)
        return _aggregate(grid, rows, ("namespace",), "min")

    def workload_replicas(self, start: float, end: float, step: float, age: float) -> list[tuple[str, RangeSeries]]:
        """Each Deployment's and StatefulSet's replicas as its spec sets them (REPLICAS), as (its kind, its
        series labelled namespace and name)."""
        out: list[tuple[str, RangeSeries]] = []
        for kind, family, label in REPLICAS:
            grid, rows = self._on_grid(family, start, end, step, age)
            for labels, points in _aggregate(grid, rows, ("namespace", label), "max"):
                out.append((kind, ({"namespace": labels.get("namespace", ""), "name": labels.get(label, "")}, points)))
        return out

    def autoscaler_bounds(self, start: float, end: float, step: float, age: float) -> list[tuple[str, RangeSeries]]:
        """Each HorizontalPodAutoscaler's least and most replicas (AUTOSCALER_BOUNDS), as ("min" or "max", its
        series labelled namespace and horizontalpodautoscaler)."""
        out: list[tuple[str, RangeSeries]] = []
        for bound, family in AUTOSCALER_BOUNDS:
            grid, rows = self._on_grid(family, start, end, step, age)
            out += [
                (bound, series) for series in _aggregate(grid, rows, ("namespace", "horizontalpodautoscaler"), "max")
            ]
        return out

    def gpu_pods(self, start: float, end: float, step: float, age: float) -> list[RangeSeries]:
        """Each request of GPUs or MIG instances while its pod's phase is Pending or Running (PromQL's `* on
        (namespace, pod) group_left () (... == 1)`), summed by namespace, pod, node and resource."""
        # A phase's series is 1 while the pod is in it and 0 otherwise: only its 1s are read (a running pod's
        # Pending series, half of what a fleet's phases hold, is all 0s).
        grid, phases = self._on_grid("kube_pod_status_phase", start, end, step, age, LIVE_PHASES, only=1.0)
        live: dict[tuple[str, str], np.ndarray] = {}
        for labels, values in phases:
            key = (labels.get("namespace", ""), labels.get("pod", ""))
            live[key] = live.get(key, np.zeros(len(grid), dtype=bool)) | (values == 1)
        del phases
        _, requests = self._on_grid("kube_pod_container_resource_requests", start, end, step, age, GPU_REQUESTS)
        kept = []
        for labels, values in requests:
            mask = live.get((labels.get("namespace", ""), labels.get("pod", "")))
            if mask is not None and mask.any():
                kept.append((labels, np.where(mask, values, np.nan)))
        return _aggregate(grid, kept, ("namespace", "pod", "node", "resource"), "sum")


def _aggregate(
    grid: np.ndarray, rows: list[tuple[Labels, np.ndarray]], by: Sequence[str], how: str
) -> list[RangeSeries]:
    """PromQL's `max`, `min` or `sum by (by)` of series on `grid`: a series per value of `by` (the labels it
    has), at the steps where any of its series has a value."""
    grouped: dict[tuple[tuple[str, str], ...], list[np.ndarray]] = {}
    for labels, values in rows:
        key = tuple((label, labels[label]) for label in by if labels.get(label))
        grouped.setdefault(key, []).append(values)
    out = []
    for key, stacked in grouped.items():
        matrix = np.vstack(stacked)
        present = ~np.isnan(matrix).all(axis=0)
        if not present.any():
            continue
        seen = matrix[:, present]
        if how == "max":
            merged = np.nanmax(seen, axis=0)
        elif how == "min":
            merged = np.nanmin(seen, axis=0)
        else:
            merged = np.nansum(seen, axis=0)
        out.append((dict(key), list(zip(grid[present].tolist(), merged.tolist(), strict=True))))
    return out


def _grid(start: float, end: float, step: float) -> np.ndarray:
    return start + step * np.arange(int(round((end - start) / step)) + 1)


class StoreKubeState(_OnGrid):
    """kube-state-metrics' series in a store, through the HTTP API. `selector`: extra matchers of its series
    (job="kube-state-metrics"), "" for none. The range series are read bare and aggregated here (as
    analyzer/inputs/series.py reads a GPU's): Prometheus evaluates `sum by (...) (a * on (...) group_left () b)`
    and fresh() step by step, at 126 CPU-s for a day of 1,000 pods at 30 s, where the bare series and their
    count_over_time cost it 3. Each series is read once, its value and its freshness together
    (last_over_time): a third of a report's transfer was kube-state-metrics' series read twice."""

    def __init__(self, store: Store, selector: str = ""):
        self.store = store
        self.selector = selector

    def _sel(self, name: str, *given: Matcher) -> str:
        said = [f"{label}{op}{promql_string(value)}" for label, op, value in given]
        return f"{name}{{{matchers(self.selector, *said)}}}"

    def last(
        self, name: str, by: Sequence[str], at: float, window: float, *matchers: Matcher
    ) -> list[tuple[Labels, float]]:
        expr = f"max by ({', '.join(by)}) (last_over_time({self._sel(name, *matchers)}[{max(window, 60):.0f}s]))"
        return [(s["metric"], float(s["value"][1])) for s in self.store.query(expr, at)]

    def samples_per_series(self, name: str, at: float, window: float, *matchers: Matcher) -> float:
        found = self.store.query(f"max(count_over_time({self._sel(name, *matchers)}[{window:.0f}s]))", at)
        return float(found[0]["value"][1]) if found else 0.0

    def _on_grid(
        self,
        name: str,
        start: float,
        end: float,
        step: float,
        age: float,
        *matchers: Matcher,
        only: float | None = None,
    ) -> tuple[np.ndarray, list[tuple[Labels, np.ndarray]]]:
        """Each series' newest sample within `age` seconds of each step, as `last_over_time(X[age])` (the
        recorded files' meaning too); within the lookback as the store shows it (its staleness markers) where
        `age` is longer. One range query each, its value and its freshness in one answer (the caller,
        cluster.ClusterReader, asks a span in pieces sized for memory)."""
        grid = _grid(start, end, step)
        selector = self._sel(name, *matchers)
        expr = f"last_over_time({selector}[{round(age * 1000)}ms])" if age < LOOKBACK else selector
        if only is not None:
            expr = f"{expr} == {only:g}"
        rows: list[tuple[Labels, np.ndarray]] = []
        for series in self.store.query_range(expr, start, grid[-1], step):
            points = series_points(series)
            values = np.full(len(grid), np.nan)
            values[np.rint((points[:, 0] - start) / step).astype(np.intp)] = points[:, 1]
            rows.append((series["metric"], values))
        return grid, rows


@dataclass
class _Series:
    """One recorded series: its labels, and its samples in time order."""

    labels: Labels
    times: np.ndarray  # unix seconds, ascending
    values: np.ndarray


#: The families the readers ask for: the rest of a recording is skipped unparsed.
READ = (
    "kube_node_status_allocatable",
    "kube_node_spec_unschedulable",
    "kube_node_labels",
    "kube_pod_container_resource_requests",
    "kube_pod_status_phase",
    "kube_pod_created",
    "kube_pod_nodeselectors",
    "kube_resourcequota",
    "kube_pod_owner",
    "kube_replicaset_owner",
    "kube_job_owner",
    "kube_pod_labels",
    "kube_namespace_labels",
    "kube_pod_container_info",
    *(family for _, family, _ in REPLICAS),
    *(family for _, family in AUTOSCALER_BOUNDS),
    AUTOSCALER_INFO,
)


#: What a recording of kube-state-metrics' series costs to hold, to refuse one that would not fit: a sample's
#: time and value (16 bytes), sorted once (16 more); a series of its usual 9 labels, 1,667 bytes measured
#: (tracemalloc, 20,000 series of kube_pod_container_resource_requests), rounded up.
KEPT_SAMPLE_BYTES = 32
KEPT_SERIES_BYTES = 2048
#: The longest line of a recording read: a sample of kube-state-metrics is under a kilobyte, and a label
#: value is at most 63 characters or a Kubernetes label's 253.
MAX_LINE_CHARS = 1 << 20


def _ends_openmetrics(path: Path) -> bool:
    """Whether a file is OpenMetrics (its last line is "# EOF"), read from its end, not its whole."""
    with open(path, "rb") as handle:
        handle.seek(max(0, os.fstat(handle.fileno()).st_size - 64))
        return handle.read().rstrip().endswith(b"# EOF")


@dataclass
class RecordedKubeState(_OnGrid):
    """kube-state-metrics' series read from recorded files, evaluated as the store would evaluate the same
    PromQL (module docstring). `series`: by family name."""

    series: dict[str, list[_Series]] = field(default_factory=dict)

    @classmethod
    def read(cls, paths: Sequence[str | Path]) -> RecordedKubeState:
        """Every file's samples of the families the readers ask for. A file is OpenMetrics (it ends with
        "# EOF"; timestamps in seconds) or Prometheus' text format (timestamps in milliseconds); a sample
        without a timestamp is taken at its file's modification time (a saved scrape). Samples of a series
        need not be together (promtool's backfill takes them in any order, nor does this). Read a line at a
        time: what is held is the samples of the families read (KEPT_SAMPLE_BYTES and KEPT_SERIES_BYTES each),
        never the file, and a recording whose samples would pass the memory available is refused as they come."""
        # Two arrays of doubles a series (16 bytes a sample), not a tuple a sample (over 100).
        points: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[array, array]] = {}
        available = available_memory()
        held = 0
        for path in map(Path, paths):
            try:
                taken = os.stat(path).st_mtime
                per_second = 1.0 if _ends_openmetrics(path) else 1000.0
                with open(path, encoding="utf-8") as handle:
                    for number, line in enumerate(iter(lambda: handle.readline(MAX_LINE_CHARS + 1), ""), 1):
                        if len(line) > MAX_LINE_CHARS:
                            raise KubeStateError(
                                f"--kube-state {path}: line {number} is longer than {MAX_LINE_CHARS >> 20} MiB: not "
                                "kube-state-metrics' series"
                            )
                        if not line.strip() or line.startswith("#"):
                            continue
                        if line.split("{", 1)[0].split(" ", 1)[0].strip() not in READ:
                            continue
                        sample = _sample(line)
                        if sample is None:
                            raise KubeStateError(
                                f"--kube-state {path}: line {number} is not a sample of OpenMetrics or Prometheus' "
                                f"text format ({line.rstrip()[:120]!r}); give kube-state-metrics' /metrics as "
                                "saved, or its history as OpenMetrics with timestamps (what promtool backfills)"
                            )
                        name, labels, value, stamp = sample
                        if name == "kube_pod_status_phase" and dict(labels).get("phase") not in ("Pending", "Running"):
                            continue  # only the phases a wait or a hold is read from (LIVE_PHASES)
                        series = points.get((name, labels))
                        if series is None:
                            series = points[(name, labels)] = (array("d"), array("d"))
                            held += KEPT_SERIES_BYTES
                        series[0].append(stamp / per_second if stamp is not None else taken)
                        series[1].append(value)
                        held += KEPT_SAMPLE_BYTES
                        if held > available:
                            raise KubeStateError(
                                f"--kube-state {path}: line {number}: the series read so far ({len(points):,} series "
                                f"of {', '.join(sorted({n for n, _ in points}))}) would take more than the "
                                f"{available >> 20:,} MiB of memory available ({KEPT_SAMPLE_BYTES} bytes a sample, "
                                f"{KEPT_SERIES_BYTES:,} a series): give a shorter span of kube-state-metrics' "
                                "history, or backfill it into a Prometheus and report with --prometheus"
                            )
            except (OSError, UnicodeDecodeError) as e:
                raise KubeStateError(f"--kube-state {path}: cannot be read ({e})") from e
        out = cls()
        for (name, labels_of), (times, values) in points.items():
            order = np.argsort(np.frombuffer(times), kind="stable")
            kept = _Series(dict(labels_of), np.frombuffer(times)[order], np.frombuffer(values)[order])
            out.series.setdefault(name, []).append(kept)
        return out

    def _matching(self, name: str, matchers: Sequence[Matcher]) -> list[_Series]:
        tests = [_matcher(m) for m in matchers]
        return [s for s in self.series.get(name, []) if all(test(s.labels) for test in tests)]

    def last(
        self, name: str, by: Sequence[str], at: float, window: float, *matchers: Matcher
    ) -> list[tuple[Labels, float]]:
        window = max(window, 60)
        grouped: dict[tuple[tuple[str, str], ...], float] = {}
        for s in self._matching(name, matchers):
            i = int(np.searchsorted(s.times, at, side="right")) - 1
            if i < 0 or s.times[i] <= at - window:
                continue
            key = tuple((label, s.labels[label]) for label in by if s.labels.get(label))
            grouped[key] = max(grouped.get(key, -np.inf), float(s.values[i]))
        return [(dict(key), value) for key, value in grouped.items()]

    def samples_per_series(self, name: str, at: float, window: float, *matchers: Matcher) -> float:
        counts = [
            np.searchsorted(s.times, at, side="right") - np.searchsorted(s.times, at - window, side="right")
            for s in self._matching(name, matchers)
        ]
        return float(max(counts, default=0))

    def _on_grid(
        self,
        name: str,
        start: float,
        end: float,
        step: float,
        age: float,
        *matchers: Matcher,
        only: float | None = None,
    ) -> tuple[np.ndarray, list[tuple[Labels, np.ndarray]]]:
        grid = _grid(start, end, step)
        limit = min(age, LOOKBACK)
        out = []
        for s in self._matching(name, matchers):
            i = np.searchsorted(s.times, grid, side="right") - 1
            taken = s.times[np.maximum(i, 0)]
            values = np.where((i >= 0) & (grid - taken <= limit), s.values[np.maximum(i, 0)], np.nan)
            if only is not None:
                values[values != only] = np.nan
            if not np.isnan(values).all():
                out.append((s.labels, values))
        return grid, out


#: A sample line: its name, its labels' text, its value and its timestamp (OpenMetrics' seconds or the text
#: format's milliseconds), as both formats write them.
_SAMPLE = re.compile(
    r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+(?P<timestamp>-?[0-9.eE+]+))?"
)
#: One label pair, its value's quotes and backslashes escaped.
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _sample(line: str) -> tuple[str, tuple[tuple[str, str], ...], float, float | None] | None:
    """A sample line's name, labels (sorted), value and timestamp as written (None where it has none); None
    where the line is not a sample."""
    found = _SAMPLE.fullmatch(line.strip())
    if found is None or _LABEL.sub("", found["labels"] or "").strip():
        return None
    try:
        value = float(found["value"])
        stamp = float(found["timestamp"]) if found["timestamp"] else None
    except ValueError:
        return None
    unescape = lambda v: re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], v)  # noqa: E731
    labels = tuple(sorted((key, unescape(v)) for key, v in _LABEL.findall(found["labels"] or "")))
    return found["name"], labels, value, stamp


def _matcher(matcher: Matcher) -> Callable[[Labels], bool]:
    label, op, value = matcher
    if op in ("=", "!="):
        return lambda labels: (labels.get(label, "") == value) == (op == "=")
    pattern = re.compile(value)
    return lambda labels: bool(pattern.fullmatch(labels.get(label, ""))) == (op == "=~")
